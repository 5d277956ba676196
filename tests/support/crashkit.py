"""Run the scenario app in real child processes, crash them at named boundaries, relaunch them."""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.effects import read_effects
from tests.support.procs import ROOT, Outcome, child_env, run_module, spawn_module  # noqa: F401  (ROOT: tests import it from here)


@dataclass
class Kit:
    """One application (database, executor id, effects folder) run as a sequence of processes."""

    db_url: str
    workdir: Path
    scenario: str = "mixed"
    executor: str = field(default_factory=lambda: f"crash-{uuid.uuid4().hex[:8]}")
    session: str = field(default_factory=lambda: uuid.uuid4().hex)

    def run(self, *cmd: str, crash_at: str | None = None, variant: str = "v1", recovery: str = "full", fail_at: str | None = None, extra_env: dict[str, str] | None = None, timeout: float = 240, executor: str | None = None) -> Outcome:
        faults = {"HELIX_DBOS_CRASH_AT": crash_at or "", "HELIX_DBOS_FAIL_AT": fail_at or ""}
        env = child_env(extra={**{k: v for k, v in faults.items() if v}, **(extra_env or {})})
        args = [
            "--db", self.db_url, "--effects", str(self.workdir / "effects"), "--executor", executor or self.executor,
            "--scenario", self.scenario, "--variant", variant, "--recovery", recovery,
            *cmd, "--session", self.session,
        ]
        return run_module("tests.scenarios.app", args, env, timeout)

    def spawn(self, *cmd: str, crash_at: str | None = None, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start the app without waiting, to kill it from outside (SIGKILL) at a moment of the test's choosing."""
        env = child_env(extra={**({"HELIX_DBOS_CRASH_AT": crash_at} if crash_at else {}), **(extra_env or {})})
        args = [
            "--db", self.db_url, "--effects", str(self.workdir / "effects"),
            "--executor", self.executor, "--scenario", self.scenario, *cmd, "--session", self.session,
        ]
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"spawn-{uuid.uuid4().hex[:6]}.stderr", "w")
        return spawn_module("tests.scenarios.app", args, env, stderr=log)

    def start(self, **kw: Any) -> Outcome:
        return self.run("start", **kw)

    def crash(self, point: str, **kw: Any) -> Outcome:
        out = self.run("start", crash_at=point, **kw)
        assert out.code == CRASH_EXIT_CODE, f"expected a crash at {point}, got exit {out.code}: {out.stderr[-2000:]}"
        return out

    def wake(self, **kw: Any) -> Outcome:
        out = self.run("wake", **kw)
        assert out.code == 0 and out.result is not None, out.stderr[-3000:]
        return out

    def entry(self, kind: str, message: str | None = None, checkpoint: str | None = None, **kw: Any) -> Outcome:
        cmd = ["entry", "--kind", kind]
        if message is not None:
            cmd += ["--message", message]
        if checkpoint is not None:
            cmd += ["--checkpoint", checkpoint]
        return self.run(*cmd, **kw)

    def lines(self, kind: str) -> list[dict[str, Any]]:
        return read_effects(self.workdir / "effects", kind)

    def bodies(self) -> Counter[str]:
        """Body starts per tool, counted by the tools themselves, outside the runtime."""
        return Counter(line["tool"] for line in self.lines("bodies"))

    def model_steps(self) -> Counter[int]:
        """Model requests per conversation step: a saved step must never be asked twice."""
        return Counter(line["step"] for line in self.lines("model"))


def query(db_url: str, sql: str, **params: Any) -> list[dict[str, Any]]:
    """Plain SQL against the test's database, as an auditor would run it."""
    import sqlalchemy as sa

    from helix_dbos.ledger.engine import create_sync_engine

    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(sql), params).mappings()]
    finally:
        engine.dispose()


def helix_table(db_url: str, table: str) -> str:
    """A ledger table's name in plain SQL: schema ``helix`` on Postgres, unqualified on SQLite."""
    from helix_dbos.ledger.engine import is_sqlite

    return table if is_sqlite(db_url) else f"helix.{table}"


def dbos_table(db_url: str, table: str) -> str:
    """A DBOS system table's name in plain SQL: schema ``dbos`` on Postgres, unqualified on SQLite."""
    from helix_dbos.ledger.engine import is_sqlite

    return table if is_sqlite(db_url) else f"dbos.{table}"


def calls_by_tool(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool"]: c for c in result["calls"] if c["step"] == 0}


def transcript_problems(db_url: str, session_id: str) -> list[str]:
    """Why the session's active transcript would be refused by a provider (empty list: it is valid).

    Every tool call of a reply must be answered exactly once, in the very next request, and nothing
    may answer a call that was never made.
    """
    import sqlalchemy as sa
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

    from helix_dbos.ledger import messages as message_rows
    from helix_dbos.ledger.engine import create_sync_engine
    from helix_dbos.runtime.floor import transcript

    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            messages = transcript.load([m["body"] for m in message_rows.active_messages(conn, session_id)])
    finally:
        engine.dispose()
    problems = []
    for i, m in enumerate(messages):
        if not isinstance(m, ModelResponse):
            continue
        asked = [p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)]
        if not asked:
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        if not isinstance(nxt, ModelRequest):
            problems.append(f"reply {i} has calls {asked} but no request answers them")
            continue
        answered = [p.tool_call_id for p in nxt.parts if isinstance(p, ToolReturnPart)]
        if answered != asked:
            problems.append(f"reply {i} asked {asked}, next request answered {answered}")
    return problems
