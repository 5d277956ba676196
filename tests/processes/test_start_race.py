"""Many starts of one new session id at once, on both databases: exactly one wins the session's first
run, every other is refused ``session_running`` (HTTP 409), and none meets a raw primary-key error.

Each racer reads "no such session" and inserts it; before the insert became ``ON CONFLICT DO
NOTHING`` the losers of that insert got ``IntegrityError ... sessions_pkey`` (HTTP 500).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.errors import AgentAlreadyRunningError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.processes.test_service import Service, expect_error, services  # noqa: F401  (the fixture)

RACERS = 200


def _rows(db_url: str, sid: str) -> tuple[int, int]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            sessions = conn.execute(sa.select(sa.func.count()).select_from(t.sessions).where(t.sessions.c.session_id == sid)).scalar_one()
            runs = conn.execute(sa.select(sa.func.count()).select_from(t.runs).where(t.runs.c.session_id == sid)).scalar_one()
    finally:
        engine.dispose()
    return int(sessions), int(runs)


def test_racing_starts_of_one_new_session_id_python_api(make_runtime: Any, db_url: str) -> None:
    release = threading.Event()
    asked: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        release.wait(60)  # the winner's run stays live until every racer has had its answer
        return ModelResponse(parts=[TextPart("hello")])

    rt = make_runtime([hx.Agent("racer", FunctionModel(reply))])
    sid = f"race-{uuid.uuid4().hex[:8]}"
    barrier = threading.Barrier(RACERS)

    def race(_: int) -> Any:
        barrier.wait()
        try:
            return rt.start("racer", "hi", session_id=sid)
        except Exception as exc:  # every outcome is collected: the test asserts there is no other kind
            return exc

    with ThreadPoolExecutor(RACERS) as pool:
        outcomes = list(pool.map(race, range(RACERS)))
    release.set()
    winners = [o for o in outcomes if isinstance(o, hx.RunHandle)]
    losers = [o for o in outcomes if isinstance(o, AgentAlreadyRunningError)]
    others = [o for o in outcomes if o not in winners and o not in losers]
    assert not others, Counter(f"{type(o).__name__}: {str(o)[:120]}" for o in others)
    assert len(winners) == 1 and len(losers) == RACERS - 1
    assert {o.code for o in losers} == {"session_running"}
    assert winners[0].result(timeout=60).status == "completed"
    assert _rows(db_url, sid) == (1, 1) and len(asked) == 1


def test_racing_starts_of_one_new_session_id_over_http(db_url: str, services: Callable[..., Service]) -> None:  # noqa: F811
    service = services(extra_env={"HELIX_DBOS_DEMO_SLOW": "300"})  # the winner's run stays live meanwhile (a late racer after it ended would be a new turn)
    sid = f"race-{uuid.uuid4().hex[:8]}"
    barrier = threading.Barrier(RACERS)
    limits = httpx.Limits(max_connections=RACERS, max_keepalive_connections=RACERS)

    with httpx.Client(base_url=service.base, timeout=120, limits=limits) as http:

        def race(_: int) -> httpx.Response:
            barrier.wait()
            return http.post("/sessions", json={"agent": "errands", "message": "the usual", "session_id": sid})

        with ThreadPoolExecutor(RACERS) as pool:
            responses = list(pool.map(race, range(RACERS)))
        codes = Counter(r.status_code for r in responses)
        assert codes == {202: 1, 409: RACERS - 1}, (codes, [r.text[:200] for r in responses if r.status_code not in (202, 409)][:5])
        for r in responses:
            if r.status_code == 409:
                expect_error(r, 409, "session_running")
        (won,) = [r.json() for r in responses if r.status_code == 202]
        assert won["session_id"] == sid and won["status"] == "running"
        http.post(f"/sessions/{sid}/stop", json={"kind": "abort"})  # no need to wait out the slow seat
    assert _rows(db_url, sid) == (1, 1)
