"""Worker processes of one test (``helix-dbos worker --app ...``) on one database, with one effects
folder: what the fleet tests share. Each test module names its app and the variable its app reads
the effects folder from; the rest (start a worker and read its ready line, the ledger's runs, a
clean stop of every process) is the same for all of them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tests.support.crashkit import helix_table, query
from tests.support.effects import read_effects
from tests.support.procs import child_env, popen_python_m

AT_REST = ("completed", "failed", "interrupted")


class WorkerPool:
    """The worker processes of one test; ``stop_all`` (the fixture's teardown) ends every one."""

    def __init__(self, db_url: str, workdir: Path, env: dict[str, str], *, app: str, effects_var: str, lease: float = 3.0) -> None:
        self.db_url, self.workdir, self.app = db_url, workdir, app
        self.effects = workdir / "effects"
        self.effects.mkdir()
        self.env = {effects_var: str(self.effects), "HELIX_DBOS_TAKEOVER_AFTER": str(lease), **env}
        self.procs: list[subprocess.Popen[str]] = []
        #: Each worker's ready line (executor id, pid, its Postgres connections by pool), by executor id.
        self.ready_lines: dict[str, dict[str, Any]] = {}
        self._logs: list[IO[str]] = []

    def worker(self, executor: str, drain_timeout: float = 30, **extra: str) -> subprocess.Popen[str]:
        return self.ready(executor, self.spawn(executor, drain_timeout, **extra))

    def spawn(self, executor: str, drain_timeout: float = 30, **extra: str) -> subprocess.Popen[str]:
        """A worker started and not waited for (``ready`` reads its first line), so a test can start
        several at once; stopped by ``stop_all`` whatever became of it."""
        log = open(self.workdir / f"{executor}.log", "w")  # noqa: SIM115 - closed in stop_all
        self._logs.append(log)
        env = child_env(extra={**self.env, "HELIX_DBOS_EXECUTOR_ID": executor, **extra})
        proc = popen_python_m(
            [sys.executable, "-m", "helix_dbos.cli.main", "worker", "--app", self.app, "--db", self.db_url, "--drain-timeout", f"{drain_timeout:g}"],
            env, stdout=subprocess.PIPE, stderr=log,
        )
        self.procs.append(proc)
        return proc

    def ready(self, executor: str, proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
        """``proc`` once it printed its ready line (fails with its log if it printed anything else)."""
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("{"), f"worker {executor} did not start: {line!r} {self.log_of(executor)[-3000:]}"
        self.ready_lines[executor] = json.loads(line)
        return proc

    def log_of(self, executor: str) -> str:
        return (self.workdir / f"{executor}.log").read_text()

    def effects_of(self, kind: str) -> list[dict[str, Any]]:
        return read_effects(self.effects, kind)

    def runs(self) -> list[dict[str, Any]]:
        return query(self.db_url, f"SELECT * FROM {helix_table(self.db_url, 'runs')}")

    def all_at_rest(self, n: int) -> list[dict[str, Any]] | None:
        runs = self.runs()
        return runs if len(runs) == n and all(r["status"] in AT_REST for r in runs) else None

    def stop_all(self) -> None:
        """SIGTERM each worker (it drains: its runs in flight get ``--drain-timeout``); one still
        draining a moment later gets the second signal that ends the drain at once, as an operator's
        would: the test is over, and a run that never ends by itself (an idle companion) would hold
        the teardown for the whole drain timeout."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3
        while any(proc.poll() is None for proc in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()
