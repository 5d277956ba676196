"""The Postgres backends one OS process holds, sampled while it works.

A process's backends are found by its sockets, not by their ``application_name``: the process's
TCP sockets to the server (``/proc/<pid>/fd`` -> socket inodes, ``/proc/<pid>/net/tcp`` -> their
local ports) are the ``client_port`` of its rows in ``pg_stat_activity``. So a connection whose
name nobody set is counted as well as the named ones. Sampling misses a connection that lives
between two samples; ``SessionCounter`` (the database's ``pg_stat_database.sessions``, every
session ever opened to it) does not.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:  # closed between the listing and the read
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def client_ports(pid: int, server_port: int) -> set[int]:
    """The local ports of ``pid``'s established TCP connections to ``server_port``."""
    inodes = _socket_inodes(pid)
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]  # noqa: SIM115 - read at once
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], int(cols[9])
            if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(make_url(url).set(drivername="postgresql+psycopg"), poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")


class SessionCounter:
    """Every session ever opened to ``url``'s database (``pg_stat_database.sessions``), read on one
    connection of its own (counted once), so reading it does not move it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine = _engine(url)
        self._conn = self._engine.connect()

    def read(self) -> int:
        self._conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        return int(self._conn.execute(sa.text("SELECT sessions FROM pg_stat_database WHERE datname = :d"), {"d": make_url(self.url).database}).scalar_one())

    def runs_at_rest(self) -> int:
        """How many of the ledger's runs are at rest (read here, so polling it opens no session)."""
        return int(self._conn.execute(sa.text("SELECT count(*) FROM helix.runs WHERE status IN ('completed', 'failed', 'interrupted')")).scalar_one())

    def settled(self, timeout: float = 60.0) -> int:
        """The count once it stops moving: a backend reports its connect to the statistics when it
        next goes idle (at most once a second) or ends, so the count catches up a little late."""
        deadline = time.monotonic() + timeout
        last = self.read()
        while True:
            time.sleep(1.5)
            now = self.read()
            if now == last or time.monotonic() > deadline:
                return now
            last = now

    def close(self) -> None:
        self._conn.close()
        self._engine.dispose()


@dataclass
class Sample:
    at: float
    backends: list[dict[str, Any]]


@dataclass
class BackendSampler:
    """Samples ``pid``'s backends on ``url``'s database every ``every`` seconds, in a thread, from
    one connection of its own (``start`` .. ``stop``)."""

    url: str
    pid: int
    every: float = 0.05
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> BackendSampler:
        self._thread = threading.Thread(target=self._loop, name="backend-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        u = make_url(self.url)
        server_port = int(u.port or 5432)
        engine = _engine(self.url)
        query = sa.text(
            "SELECT pid, backend_start, application_name, state FROM pg_stat_activity "
            "WHERE datname = :d AND client_port = ANY(:ports)"
        )
        try:
            with engine.connect() as conn:
                while not self._stop.is_set():
                    ports = sorted(client_ports(self.pid, server_port))
                    rows = conn.execute(query, {"d": u.database, "ports": ports}).mappings().all() if ports else []
                    self.samples.append(Sample(time.monotonic(), [dict(r) for r in rows]))
                    self._stop.wait(self.every)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)
        finally:
            engine.dispose()

    def stop(self) -> BackendSampler:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        assert not self.errors, self.errors
        return self

    @property
    def peak(self) -> int:
        return max((len(s.backends) for s in self.samples), default=0)

    @property
    def distinct(self) -> set[tuple[int, Any]]:
        """Every backend seen, as (pid, backend_start): a pool that re-opens connections grows it."""
        return {(b["pid"], b["backend_start"]) for s in self.samples for b in s.backends}

    @property
    def names(self) -> set[str]:
        return {b["application_name"] for s in self.samples for b in s.backends}
