"""Drive ``tests.scenarios.family`` in real processes: parents, workers, relaunches, kills; read the ledger."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine

from tests.support.crashkit import dbos_table
from tests.support.effects import read_effects
from tests.support.procs import Outcome, child_env, run_module, spawn_module

APP = "tests.scenarios.family"


@dataclass
class Family:
    """One application (a database and an effects folder) run as several processes."""

    db_url: str
    workdir: Path
    parent_executor: str = field(default_factory=lambda: f"parent-{uuid.uuid4().hex[:8]}")
    _engine: sa.Engine | None = None

    @property
    def effects(self) -> Path:
        path = self.workdir / "effects"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def args(self, *cmd: str, executor: str | None = None, serve: bool = True) -> list[str]:
        """The arguments of ``python -m tests.scenarios.family``."""
        return [
            "--db", self.db_url, "--effects", str(self.effects),
            "--executor", executor or self.parent_executor, *([] if serve else ["--no-serve"]), *cmd,
        ]

    def run(self, *cmd: str, executor: str | None = None, serve: bool = True, env: dict[str, str] | None = None, timeout: float = 240) -> Outcome:
        return run_module(APP, self.args(*cmd, executor=executor, serve=serve), child_env(extra=env), timeout)

    def ok(self, *cmd: str, **kw: Any) -> dict[str, Any]:
        out = self.run(*cmd, **kw)
        assert out.code == 0 and out.result is not None, f"exit {out.code}: {out.stderr[-3000:]}"
        return out.result

    def spawn(self, *cmd: str, executor: str | None = None, serve: bool = True, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return spawn_module(APP, self.args(*cmd, executor=executor, serve=serve), child_env(extra=env))

    @contextmanager
    def worker(self, executor: str | None = None) -> Iterator[subprocess.Popen[str]]:
        """A second worker process serving the runtime's queue (children, companions) until the block ends."""
        proc = self.spawn("serve", executor=executor or f"worker-{uuid.uuid4().hex[:8]}")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("{") and json.loads(line)["ready"], f"worker did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # --- effects ---------------------------------------------------------------------------------

    def hold(self, key: str) -> None:
        (self.effects / f"hold_{key}").touch()

    def release(self, key: str) -> None:
        (self.effects / f"hold_{key}").unlink(missing_ok=True)

    def lines(self, kind: str) -> list[dict[str, Any]]:
        return read_effects(self.effects, kind)

    def bodies(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [b for b in self.lines("bodies") if tool is None or b["tool"] == tool]

    def model_requests(self, agent: str) -> Counter[tuple[str, ...]]:
        """Requests of ``agent`` keyed by (its prompts so far, step in turn): a repeat is a paid-twice request."""
        return Counter((*m["prompts"], str(m["step"])) for m in self.lines("model") if m["agent"] == agent)

    # --- ledger ----------------------------------------------------------------------------------

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = create_sync_engine(self.db_url, poolclass=sa.pool.NullPool)
        return self._engine

    def rows(self, table: sa.Table, *where: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(table).where(*where)).mappings()]

    def dbos_workflows(self, workflow_id: str) -> list[dict[str, Any]]:
        name = dbos_table(self.db_url, "workflow_status")
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(f"SELECT * FROM {name} WHERE workflow_uuid = :id"), {"id": workflow_id}).mappings()]

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def dump_ledger(engine: sa.Engine) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every ledger table, as sorted strings: equal dumps mean nothing was written."""
    out: dict[str, list[tuple[str, ...]]] = {}
    with engine.connect() as conn:
        for table in t.metadata.sorted_tables:
            out[table.name] = sorted(tuple(repr(v) for v in row) for row in conn.execute(sa.select(table)))
    return out
