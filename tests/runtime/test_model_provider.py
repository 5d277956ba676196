"""pydantic-ai's real model classes over HTTP, through helix (both databases): ``OpenAIChatModel``,
``OpenAIResponsesModel`` and ``AnthropicModel`` pointed at a local provider (``tests/support/
provider_server.py``) that logs every request as it arrives, so requests are counted as the provider
sees them, SDK retries included.

One retry budget per step (``hx.ModelRetries``; the SDK's own retries off) that waits at least what
``Retry-After`` / ``retry-after-ms`` asks; typed run errors for a provider that rate limits, is
down, refuses the credentials or the request, with its status and request id kept; an empty reply
retried only as often as the agent's ``output_retries`` allow (as plain ``agent.run``); and usage
per step as the provider reported it.
"""

from __future__ import annotations

import time
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa
from pydantic_ai import Agent

import helix_dbos as hx
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.conftest import one_database
from tests.support.procs import free_port
from tests.support.provider_server import WIRES, Calls, Empty, Status, Text, model_for, provider_server, quick_retries


class Whale(pydantic.BaseModel):
    name: str
    length: float


def _agents(server: Any, prefix: str, model_retries: Any = "quick", **kwargs: Any) -> list[Any]:
    """One agent per wire; ``model_retries=None``: plain pydantic-ai agents, the runtime's defaults."""
    agents = [Agent(model_for(wire, server), name=f"{prefix}_{wire}", **kwargs) for wire in WIRES]
    if model_retries is None:
        return agents
    retries = quick_retries() if model_retries == "quick" else model_retries
    return [hx.from_pydantic_ai(a, model_retries=retries) for a in agents]


def _one_by_one(rt: Any, server: Any, prefix: str, script: list[Any]) -> dict[str, tuple[Any, list[Any]]]:
    """Each wire's run with ``script`` as the provider's answers: its result and the requests it made."""
    out = {}
    for wire in WIRES:
        server.script(*script)
        before = len(server.requests())
        result = rt.start(f"{prefix}_{wire}", "go").result(timeout=180)
        out[wire] = (result, server.requests()[before:])
    return out


def _all_wires_at_once(rt: Any, server: Any, prefix: str, script: list[Any]) -> dict[str, tuple[Any, list[Any]]]:
    """As ``_one_by_one``, with every wire's run started together and each wire's requests answered
    from its own copy of ``script`` (its last answer repeated): the runs' waits overlap instead of
    adding up, and each run sees exactly the answers it would alone."""
    before = {wire: len(server.requests(wire)) for wire in WIRES}

    def answer(entry: Any) -> Any:
        n = [r.request_id for r in server.requests(entry.wire)].index(entry.request_id) - before[entry.wire]
        return script[min(n, len(script) - 1)]

    server.always(answer)
    handles = {wire: rt.start(f"{prefix}_{wire}", "go") for wire in WIRES}
    results = {wire: handle.result(timeout=300) for wire, handle in handles.items()}
    return {wire: (results[wire], server.requests(wire)[before[wire]:]) for wire in WIRES}


@one_database  # the retry budget lives inside one model step
def test_a_steady_429_makes_the_budgets_requests_and_waits_what_retry_after_asks(make_runtime: Any) -> None:
    """3 requests in all (not 3 x the SDK's 3), each after at least the 1 s / 1.5 s the provider asked;
    the run fails ``model_rate_limited`` with the status and the last request's id."""
    with provider_server() as server:
        rt = make_runtime(_agents(server, "limited"))
        asked = [Status(429, headers={"Retry-After": "1"}), Status(429, headers={"retry-after-ms": "1500"}),
                 Status(429, headers={"Retry-After": "1"})]
        for wire, (result, requests) in _all_wires_at_once(rt, server, "limited", asked).items():
            assert len(requests) == 3, (wire, [r.at for r in requests])
            gaps = [b.at - a.at for a, b in zip(requests, requests[1:], strict=False)]
            assert gaps[0] >= 1.0 and gaps[1] >= 1.5, (wire, gaps)
            assert gaps[0] < 1.0 * 1.2 + 1.5 and gaps[1] < 1.5 * 1.2 + 1.5, (wire, gaps)  # the jitter stretches, not more
            assert (result.status, result.error_code) == ("failed", "model_rate_limited"), (wire, result)
            assert "HTTP 429" in result.error and f"request id {requests[-1].request_id}" in result.error, result.error
            assert "after 3 requests" in result.error


@one_database  # the retry budget lives inside one model step
def test_the_default_budget_is_four_requests_as_the_provider_sees_them(make_runtime: Any) -> None:
    """A plain pydantic-ai agent, the runtime's defaults: under a steady 429 asking for 2 s, 4 requests
    in all (the SDK's own retries off), each at least 2 s after the one before."""
    with provider_server() as server:
        rt = make_runtime(_agents(server, "default", model_retries=None))
        for wire, (result, requests) in _all_wires_at_once(rt, server, "default", [Status(429, headers={"Retry-After": "2"})]).items():
            gaps = [b.at - a.at for a, b in zip(requests, requests[1:], strict=False)]
            assert len(requests) == 4 and all(g >= 2.0 for g in gaps), (wire, gaps)
            assert (result.status, result.error_code) == ("failed", "model_rate_limited"), (wire, result)


@one_database  # the retry budget lives inside one model step
def test_a_provider_that_recovers_completes_the_step(make_runtime: Any) -> None:
    """Two 429s then a reply: the step completes on its third request, having waited as asked."""
    with provider_server() as server:
        rt = make_runtime(_agents(server, "recovers", model_retries=hx.ModelRetries(attempts=4, first_delay=0.1)))
        script = [Status(429, headers={"Retry-After": "1"}), Status(503, headers={"retry-after-ms": "700"}), Text("fine")]
        for wire, (result, requests) in _all_wires_at_once(rt, server, "recovers", script).items():
            assert (result.status, result.output) == ("completed", "fine"), (wire, result)
            assert len(requests) == 3
            assert requests[1].at - requests[0].at >= 1.0 and requests[2].at - requests[1].at >= 0.7


@one_database  # the retry budget lives inside one model step
def test_a_wait_longer_than_max_retry_after_fails_now(make_runtime: Any) -> None:
    with provider_server() as server:
        retries = hx.ModelRetries(attempts=4, max_retry_after=5.0)
        rt = make_runtime(_agents(server, "toolong", model_retries=retries))
        started = time.monotonic()
        for wire, (result, requests) in _one_by_one(rt, server, "toolong", [Status(429, headers={"Retry-After": "120"})]).items():
            assert len(requests) == 1 and result.error_code == "model_rate_limited", (wire, result)
            assert "asked to wait 120 s" in result.error
        assert time.monotonic() - started < 100


@one_database  # the retry budget lives inside one model step
def test_the_budget_is_the_agents_max_retries_setting(make_runtime: Any) -> None:
    """pydantic-ai's ``ModelSettings['max_retries']`` (``1 + max_retries`` requests) is the step's budget
    when the agent sets no ``ModelRetries``."""
    with provider_server() as server:
        agent = Agent(model_for("chat", server), name="settings_chat", model_settings={"max_retries": 1})
        rt = make_runtime([agent])
        server.always(Status(500, headers={"retry-after-ms": "100"}))
        result = rt.start("settings_chat", "go").result(timeout=180)
        assert (result.status, result.error_code) == ("failed", "model_unavailable"), result
        assert len(server.requests()) == 2
        assert all(r.body.get("stream") is not True for r in server.requests())


@pytest.mark.parametrize(("status", "code"), [(401, "model_auth_failed"), (400, "model_request_invalid")])
@one_database  # the provider's refusal typed inside one model step
def test_a_refusal_is_typed_and_asked_once(status: int, code: str, make_runtime: Any) -> None:
    with provider_server() as server:
        rt = make_runtime(_agents(server, f"refused{status}"))
        for wire, (result, requests) in _one_by_one(rt, server, f"refused{status}", [Status(status, "no")]).items():
            assert len(requests) == 1, wire
            assert (result.status, result.error_code) == ("failed", code), (wire, result)
            assert f"HTTP {status}" in result.error and f"request id {requests[0].request_id}" in result.error


@one_database  # the provider's failure typed inside one model step
def test_a_provider_that_is_down_is_model_unavailable(make_runtime: Any) -> None:
    port = free_port()  # nothing listens on it: connection refused
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(api_key="k", base_url=f"http://127.0.0.1:{port}/v1"))
    rt = make_runtime([hx.from_pydantic_ai(Agent(model, name="down"), model_retries=hx.ModelRetries(attempts=2, first_delay=0.1))])
    result = rt.start("down", "go").result(timeout=180)
    assert (result.status, result.error_code) == ("failed", "model_unavailable"), result
    assert "after 2 requests" in result.error


@one_database  # output retries inside one model step
def test_an_empty_reply_is_retried_as_often_as_output_retries_allow(make_runtime: Any) -> None:
    """The same requests as plain ``agent.run`` on the same provider: 1 + output_retries, then a typed
    failure; ``max_steps`` (50 here) is only a ceiling."""
    with provider_server() as server:
        server.always(Empty())
        plain: dict[str, int] = {}
        for wire in WIRES:
            before = len(server.requests())
            with pytest.raises(Exception, match="Exceeded maximum output retries"):
                Agent(model_for(wire, server), output_type=Whale, retries={"output": 2}).run_sync("go")
            plain[wire] = len(server.requests()) - before
        rt = make_runtime(_agents(server, "empty", model_retries=None, output_type=Whale, retries={"output": 2})
                          + [Agent(model_for("chat", server), name="empty_default", output_type=Whale)])
        for wire in WIRES:
            before = len(server.requests())
            result = rt.start(f"empty_{wire}", "go").result(timeout=180)
            assert (result.status, result.error_code) == ("failed", "output_retries_exceeded"), (wire, result)
            assert len(server.requests()) - before == plain[wire] == 3, (wire, plain)
        before = len(server.requests())
        result = rt.start("empty_default", "go").result(timeout=180)  # pydantic-ai's default: retries=1
        assert result.error_code == "output_retries_exceeded" and len(server.requests()) - before == 2


@one_database  # output retries inside one model step
def test_an_invalid_output_then_a_valid_one_completes(make_runtime: Any) -> None:
    with provider_server() as server:
        rt = make_runtime(_agents(server, "fixes", output_type=Whale))
        script = [Calls([("final_result", {"name": "moby"})]), Calls([("final_result", {"name": "moby", "length": 18})])]
        for wire, (result, requests) in _one_by_one(rt, server, "fixes", script).items():
            assert (result.status, result.output) == ("completed", {"name": "moby", "length": 18.0}), (wire, result)
            assert len(requests) == 2


def test_usage_per_step_is_what_the_provider_reported(make_runtime: Any, db_url: str) -> None:
    with provider_server() as server:
        agents = _agents(server, "usage", output_type=Whale)
        for a in agents:
            @a.source.tool_plain(metadata={"replay": "safe"})
            def depth(where: str) -> int:
                return 3000

        rt = make_runtime(agents)
        script = [Calls([("depth", {"where": "azores"})], usage=(120, 17)), Calls([("final_result", {"name": "moby", "length": 18})], usage=(190, 23))]
        results = _one_by_one(rt, server, "usage", script)
        engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
        try:
            for wire, (result, _) in results.items():
                assert result.status == "completed", (wire, result)
                with engine.connect() as conn:
                    rows = conn.execute(sa.select(t.usage.c.step, t.usage.c.input_tokens, t.usage.c.output_tokens)
                                        .where(t.usage.c.run_id == result.run_id).order_by(t.usage.c.step)).all()
                assert [tuple(r) for r in rows] == [(0, 120, 17), (1, 190, 23)], wire
                assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (2, 310, 40)
        finally:
            engine.dispose()


def test_the_typed_code_reaches_the_api_and_the_cli(db_url: str) -> None:
    """``GET /runs/{id}`` and ``helix-dbos show --json`` carry ``model_rate_limited`` with the status
    and the provider's request id, as the run does."""
    import json
    import uuid

    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from helix_dbos.cli.main import app as cli
    from helix_dbos.service.app import create_app

    with provider_server() as server:
        server.always(Status(429, headers={"retry-after-ms": "200"}))
        agent = hx.from_pydantic_ai(Agent(model_for("chat", server), name="api_limited"), model_retries=quick_retries())
        rt = hx.Runtime([agent], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")
        with TestClient(create_app(rt), base_url="http://127.0.0.1") as client:
            started = client.post("/sessions", json={"agent": "api_limited", "message": "go"})
            assert started.status_code == 202, started.text
            run_id, session_id = started.json()["run_id"], started.json()["session_id"]
            deadline = time.monotonic() + 180
            while (run := client.get(f"/runs/{run_id}").json())["status"] not in ("failed", "completed"):
                assert time.monotonic() < deadline, run
                time.sleep(0.2)
        last = server.requests()[-1].request_id
        assert run["error_code"] == "model_rate_limited" and f"HTTP 429, request id {last}" in run["error"], run
        shown = CliRunner().invoke(cli, ["show", session_id, "--db", db_url, "--json"])
        assert shown.exit_code == 0, shown.output
        runs = json.loads(shown.stdout)["session"]["runs"]
        assert [(r["error_code"], f"request id {last}" in r["error"]) for r in runs] == [("model_rate_limited", True)], runs


@one_database  # the retry budget lives inside one model step
def test_live_output_has_the_same_budget_inside_its_step(make_runtime: Any) -> None:
    """With ``live_output`` the request is a DBOS step (streamed): the budget runs inside it, DBOS's own
    step retries are off, so the provider sees the same requests and the run gets the same code."""
    with provider_server() as server:
        rt = make_runtime(_agents(server, "live"), live_output=True)
        server.script(Status(429, headers={"retry-after-ms": "800"}), Text("streamed"))
        before = len(server.requests())
        result = rt.start("live_chat", "go").result(timeout=180)
        requests = server.requests()[before:]
        assert (result.status, result.output) == ("completed", "streamed"), result
        assert len(requests) == 2 and requests[1].body.get("stream") is True and requests[1].at - requests[0].at >= 0.8
        server.always(Status(429, headers={"retry-after-ms": "300"}))
        before = len(server.requests())
        result = rt.start("live_chat", "go").result(timeout=180)
        assert (result.status, result.error_code) == ("failed", "model_rate_limited"), result
        assert len(server.requests()) - before == 3  # quick_retries(): 3 requests, not 3 x DBOS's attempts


def test_a_stop_during_a_retry_wait_is_honoured_before_the_next_request(make_runtime: Any) -> None:
    """A provider asking for 30 s: a stop that comes during the wait ends the run within a few
    seconds, and the provider sees no second request."""
    with provider_server() as server:
        rt = make_runtime(_agents(server, "waiting", model_retries=hx.ModelRetries(attempts=4)))
        server.always(Status(429, headers={"Retry-After": "30"}))
        handle = rt.start("waiting_chat", "go")
        deadline = time.monotonic() + 120
        while not server.requests():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        asked = time.monotonic()
        rt.stop(handle.session_id, kind="interrupt")
        result = handle.result(timeout=120)
        assert result.status == "interrupted", result
        assert time.monotonic() - asked < 20 and len(server.requests()) == 1


@one_database  # what is sent to the provider
def test_an_hx_agent_on_a_real_model_class_sends_pydantic_ais_output_tool(make_runtime: Any) -> None:
    """``hx.Agent`` (no pydantic-ai agent) on ``OpenAIResponsesModel``: the same ``final_result`` a plain
    ``agent.run`` sends for ``list[Whale]``, and the same retry budget."""
    from tests.support.provider_server import tools_sent
    from tests.support.schema_check import assert_self_contained

    with provider_server() as server:
        answer = Calls([("final_result", {"response": [{"name": "moby", "length": 18}]})], usage=(30, 9))
        server.script(answer)
        Agent(model_for("responses", server), output_type=list[Whale]).run_sync("go")
        plain = tools_sent(server.requests()[-1])
        agent = hx.Agent("hx_responses", model_for("responses", server), output_type=list[Whale], model_retries=quick_retries())
        rt = make_runtime([agent])
        server.script(Status(503, headers={"retry-after-ms": "300"}), answer)
        before = len(server.requests())
        result = rt.start("hx_responses", "go").result(timeout=180)
        assert (result.status, result.output) == ("completed", [{"name": "moby", "length": 18.0}]), result
        assert len(server.requests()) - before == 2 and result.usage.input_tokens == 30
        assert tools_sent(server.requests()[-1]) == plain
        assert_self_contained(plain["final_result"]["parameters"])
