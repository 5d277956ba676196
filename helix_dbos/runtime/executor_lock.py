"""One live process per executor id.

DBOS recovers a PENDING workflow by its executor id: two live processes sharing one id re-run each
other's steps when either restarts. So each process holds an exclusive lock on its id for its whole
life: a Postgres session advisory lock (released by the server when the process dies, however it
dies) or an OS file lock beside the SQLite file. A process that asked for a specific id fails if it
is held; one that did not takes the first free slot of the host's default ids, so a restarted
worker gets its old id back and recovers its own pending runs.

A database outage or restart ends the session, and the server drops its advisory locks with it: the
id would look free while its process lives on. So the runtime's own lock is kept (``keep``): a
thread checks the session every few seconds and takes the lock again on a new one once the
database answers.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ..errors import ExecutorIdInUseError
from ..ledger.engine import create_sync_engine, is_sqlite, sqlite_path

MAX_DEFAULT_SLOTS = 64
KEEP_INTERVAL = 2.0
log = logging.getLogger("helix_dbos")


def _key(database_url: str, executor_id: str) -> int:
    """Advisory locks are server-wide: the key names the database too, since ids are per application."""
    from sqlalchemy.engine import make_url

    database = make_url(database_url).database or ""
    return int.from_bytes(hashlib.sha256(f"helix-executor:{database}:{executor_id}".encode()).digest()[:8], "big", signed=True)


class ExecutorLock:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.executor_id: str | None = None
        self._conn: sa.Connection | None = None
        self._engine: sa.Engine | None = None
        self._fd: int | None = None
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def _try(self, executor_id: str) -> bool:
        if is_sqlite(self.database_url):
            path = sqlite_path(self.database_url)
            base = Path(f"{path}.executors") if path else Path(os.environ.get("TMPDIR", "/tmp")) / "helix-executors"
            base.mkdir(parents=True, exist_ok=True)
            fd = os.open(base / f"{hashlib.sha1(executor_id.encode()).hexdigest()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            self._fd = fd
            return True
        if self._engine is None:
            # connect_timeout: the keeper re-connects during outages, and must never hang a shutdown
            self._engine = create_sync_engine(self.database_url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 5})
            self._conn = self._engine.connect()
        assert self._conn is not None
        got = bool(self._conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(self.database_url, executor_id)}).scalar())
        self._conn.commit()
        return got

    def acquire(self, requested: str | None) -> str:
        if requested:
            if not self._try(requested):
                self.release()
                raise ExecutorIdInUseError(
                    f"executor id {requested!r} is held by another live process",
                    detail="two processes on one executor id run each other's steps twice; give each its own",
                )
            self.executor_id = requested
            return requested
        host = socket.gethostname()
        for slot in range(MAX_DEFAULT_SLOTS):
            candidate = f"{host}-{slot}"
            if self._try(candidate):
                self.executor_id = candidate
                return candidate
        self.release()
        raise ExecutorIdInUseError(f"all {MAX_DEFAULT_SLOTS} default executor ids of host {host!r} are in use")

    def keep(self) -> None:
        """Hold the acquired id across database outages (Postgres; a file lock needs no keeping)."""
        if self._conn is None or self._keeper is not None:
            return
        self._keeper = threading.Thread(target=self._keep_loop, name="helix-executor-lock", daemon=True)
        self._keeper.start()

    def _keep_loop(self) -> None:
        lost = contested = False
        while not self._stop.wait(KEEP_INTERVAL):
            with self._guard:
                if self._stop.is_set() or self.executor_id is None:
                    return
                try:
                    if lost:
                        if self._reconnect():
                            lost = contested = False
                            log.warning("executor id %r: lock taken again after the database came back", self.executor_id)
                        elif not contested:
                            contested = True
                            log.error("executor id %r is held by another session since the database came back: another "
                                      "process took it (stop one of them), or the server has not yet ended this "
                                      "process's old session; retrying", self.executor_id)
                    else:
                        assert self._conn is not None
                        self._conn.execute(sa.text("SELECT 1"))
                        self._conn.commit()
                except Exception as exc:  # the session is gone (outage, restart): take the lock again when back
                    if not lost:
                        log.warning("executor id %r: lock session lost (%s); re-taking it when the database is back",
                                    self.executor_id, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    lost = True

    def _reconnect(self) -> bool:
        """A new session and the lock on it; False while another session holds it."""
        assert self._engine is not None and self.executor_id is not None
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None
        self._conn = self._engine.connect()
        key = _key(self.database_url, self.executor_id)
        got = bool(self._conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())
        self._conn.commit()
        return got

    def release(self) -> None:
        self._stop.set()
        with self._guard:
            self._release()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join(timeout=5)
        self._keeper = None

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # a session an outage already broke: the server dropped its lock anyway
                log.debug("executor lock session was already broken", exc_info=True)
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> ExecutorLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
