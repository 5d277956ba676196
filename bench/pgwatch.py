"""What one batch of the scale section costs Postgres, counted so that short-lived backends are not missed.

A pool's overflow connection (DBOS's system-database pool under a burst) can open, run a few
statements and close between two samples of ``pg_stat_activity``: a sampler alone undercounts both
the backends a shape opens and the CPU they spend. So each figure comes from a counter where one
exists, and the sampled figure is kept beside it as a cross-check:

* **backends opened**: the delta of ``pg_stat_database.sessions`` for this database (Postgres 14+),
  a counter every backend bumps at its start, read after the batch's processes have exited (a
  backend flushes its counters at exit at the latest). Exact: the bench's own connections are
  opened before the batch and kept, so none of them counts. ``seen`` is how many backends opened
  during the batch the sampler caught (distinct ``(pid, backend_start)`` not there at its start).
* **Postgres CPU**: (1) ``sampled``: every backend of this database seen by the sampler (every
  ``every`` s), from ``/proc/<pid>/stat`` at its last sample: a lower bound (a backend that lives
  between two samples counts nothing, one that exits counts up to its last sample); (2)
  ``server``: every process of the Postgres server, exactly: the live children of the postmaster
  at the end (their CPU since the start, or since birth), plus what the postmaster reaped during the
  batch (its ``cutime + cstime``: the whole CPU of every backend that exited), minus what those
  that existed at the start had spent before it, plus the postmaster itself, less the bench's own
  backends (the sampler's, the wait for the batch's end). That counts every
  short-lived backend and the server's own processes (WAL writer, checkpointer, autovacuum), and
  also other databases' work: exact on a server the batch has to itself, an upper bound on a shared
  one. (3) ``busy``: ``pg_stat_database.active_time`` delta (ms the database's backends spent
  executing statements, every backend counted, flushed at exit): wall time, not CPU, so it
  includes waits for a lock, a WAL flush or a CPU.
* **peak connections per process**: at each sample, this database's backends grouped by the process
  holding the client end of their TCP connection (``client_port`` matched with ``/proc/<pid>/fd``
  and ``/proc/net/tcp``); the most any one process held, and the most all held at once.
* **WAL**: ``pg_current_wal_lsn()`` delta (every database of the server, full-page images
  included); and when ``pg_walinspect`` can be used (PG 15+, a superuser), the bytes of the records
  whose blocks are in this database, full-page images apart, read back over a range a temporary
  physical replication slot keeps from recycling (the slot dies with its session).

Needs the server on this machine for the ``/proc`` figures (``None`` otherwise).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

STATS_SETTLE_S = 1.2
"""Postgres flushes an idle backend's pending counters after at most 1 s (``PGSTAT_MIN_INTERVAL``)."""
OWN_APP = "helix-bench-watch"
"""``application_name`` of the bench's own connections, left out of the per-process figures."""


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return None


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a process so far."""
    f = _stat(pid)
    return None if f is None else (int(f[11]) + int(f[12])) / _TICK


def _reaped(pid: int) -> float:
    """CPU seconds of the children a process has waited for (``cutime + cstime``)."""
    f = _stat(pid)
    return 0.0 if f is None else (int(f[13]) + int(f[14])) / _TICK


def _children(parent: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat(int(name))
            if f is not None and int(f[1]) == parent:
                out[int(name)] = (int(f[11]) + int(f[12])) / _TICK
    return out


def _ports_of(pids: Iterable[int]) -> dict[int, int]:
    """Local TCP port -> pid, for the sockets these processes hold."""
    inode_pid: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inode_pid[link[8:-1]] = pid
        except OSError:
            continue
    out: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    pid = inode_pid.get(cols[9])
                    if pid is not None:
                        out[int(cols[1].rsplit(":", 1)[1], 16)] = pid
        except OSError:
            continue
    return out


def own_engine(url: str, size: int = 2) -> sa.Engine:
    """An engine for the bench's own reads, marked so the watcher leaves its connections out."""
    return sa.create_engine(url, pool_size=size, max_overflow=0, connect_args={"application_name": OWN_APP})


class PgWatch:
    """Watch this database over one batch: start it before the first enqueue, ``stop_sampling`` at
    the batch's end, ``finish`` after the batch's processes have exited."""

    def __init__(self, url: str, processes: dict[int, str], every: float = 0.1, wal_by_db: bool = True) -> None:
        self.url = url
        self.processes = dict(processes)  # pid -> label ("worker", "front")
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT", connect_args={"application_name": OWN_APP})
        self.conn = self.engine.connect()  # kept for the batch: it holds the temporary slot
        self._sampler = self.engine.connect()  # opened before the counters are read: not one of the batch's backends
        c = self.conn
        self.db_oid = int(c.execute(sa.text("SELECT oid FROM pg_database WHERE datname = current_database()")).scalar_one())
        me = int(c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
        f = _stat(me)
        self.postmaster = int(f[1]) if f is not None else None
        self.slot: str | None = None
        self.wal_error: str | None = None
        if wal_by_db:
            try:
                c.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
                self.slot = f"helix_bench_watch_{me}"
                c.execute(sa.text("SELECT pg_create_physical_replication_slot(:s, true, true)"), {"s": self.slot})
            except sa.exc.DBAPIError as exc:
                self.slot, self.wal_error = None, str(exc.orig).splitlines()[0]
        # a backend's counters reach pg_stat_database within about a second of its going idle: let
        # those of the connections opened before the batch (the workers' and the front's) land first
        time.sleep(STATS_SETTLE_S)
        self.counters0 = self._counters()
        self.lsn0 = str(c.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar_one())
        self.server0 = _children(self.postmaster) if self.postmaster else {}
        self.reaped0 = _reaped(self.postmaster) if self.postmaster else 0.0
        self.pm0 = cpu_of(self.postmaster) if self.postmaster else 0.0
        self.seen: set[tuple[int, str]] = set()
        self.own_cpu_s = 0.0
        """CPU this watcher's thread spent sampling: the front end's process hosts it, not its cost."""
        self.own_first: dict[int, float] = {}
        self.own_last: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.peak_by_pid: dict[int, int] = {}
        self.peak_total = 0
        self.samples = 0
        self.t0 = time.time()
        self._sample()  # the backends alive at the start: their CPU so far is not the batch's
        self.first = dict(self.last)
        self.before = set(self.seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), name="bench-pgwatch", daemon=True)
        self._thread.start()

    def _counters(self) -> dict[str, float]:
        row = self.conn.execute(sa.text(
            "SELECT sessions, active_time, session_time, xact_commit FROM pg_stat_database WHERE datname = current_database()")).mappings().one()
        return {k: float(v or 0) for k, v in row.items()}

    def _sample(self) -> None:
        rows = self._sampler.execute(sa.text(
            "SELECT pid, backend_start::text AS bs, client_port, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend'")).mappings().all()
        ports = _ports_of(self.processes)
        per: dict[int, int] = {}
        total = 0
        for r in rows:
            pid = int(r["pid"])
            if r["application_name"] == OWN_APP:
                cpu = cpu_of(pid)
                if cpu is not None:
                    self.own_first.setdefault(pid, cpu)
                    self.own_last[pid] = cpu
                continue
            self.seen.add((pid, str(r["bs"])))
            cpu = cpu_of(pid)
            if cpu is not None:
                self.last[pid] = cpu
            total += 1
            owner = ports.get(int(r["client_port"] or -1))
            if owner is not None:
                per[owner] = per.get(owner, 0) + 1
        for pid, n in per.items():
            self.peak_by_pid[pid] = max(self.peak_by_pid.get(pid, 0), n)
        self.peak_total = max(self.peak_total, total)
        self.samples += 1

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            t = time.thread_time()
            with contextlib.suppress(sa.exc.DBAPIError):  # a slow server: the next sample
                self._sample()
            self.own_cpu_s += time.thread_time() - t

    def stop_sampling(self) -> dict[str, Any]:
        """At the batch's end: the sampled figures, the server's CPU and the WAL position."""
        self._stop.set()
        self._thread.join()
        self._sample()
        self._sampler.close()
        self.seconds = time.time() - self.t0
        sampled = sum(v - self.first.get(pid, 0.0) for pid, v in self.last.items())
        server = None
        if self.postmaster:
            now = _children(self.postmaster)
            live = sum(v - self.server0.get(pid, 0.0) for pid, v in now.items())
            gone_before = sum(v for pid, v in self.server0.items() if pid not in now)
            server = live + (_reaped(self.postmaster) - self.reaped0) - gone_before + ((cpu_of(self.postmaster) or 0.0) - (self.pm0 or 0.0))
            # less the bench's own backends (this sampler, the waits on the batch's end)
            server -= sum(v - self.own_first[pid] for pid, v in self.own_last.items())
        self.lsn1 = str(self.conn.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar_one())
        wal = int(self.conn.execute(sa.text("SELECT pg_wal_lsn_diff(CAST(:b AS pg_lsn), CAST(:a AS pg_lsn))"), {"a": self.lsn0, "b": self.lsn1}).scalar_one())
        by_label: dict[str, int] = {}
        for pid, n in self.peak_by_pid.items():
            label = self.processes.get(pid, "?")
            by_label[label] = max(by_label.get(label, 0), n)
        self.result: dict[str, Any] = {
            "pg_cpu_sampled_s": sampled if self.last else None,
            "pg_cpu_server_s": server,
            "wal_server_bytes": wal,
            "backends_seen": len(self.seen - self.before),
            "peak_conns": by_label,
            "peak_conns_total": self.peak_total,
            "samples": self.samples,
            "watch_cpu_s": self.own_cpu_s,
        }
        return self.result

    def finish(self, settle_s: float = 15.0) -> dict[str, Any]:
        """After the batch's processes have exited: the counters (backends opened, busy time) and
        this database's WAL. Waits (up to ``settle_s``) for the other backends of the database to
        be gone, since a backend's counters reach ``pg_stat_database`` at its exit at the latest."""
        deadline = time.monotonic() + settle_s
        q = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend' AND coalesce(application_name, '') <> :own")
        while self.conn.execute(q, {"own": OWN_APP}).scalar_one() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)  # the last exits' flush
        c1 = self._counters()
        out = dict(self.result)
        out["backends_opened"] = int(c1["sessions"] - self.counters0["sessions"])
        out["pg_busy_s"] = (c1["active_time"] - self.counters0["active_time"]) / 1000.0
        out["commits"] = int(c1["xact_commit"] - self.counters0["xact_commit"])
        out["wal_db_bytes"] = None
        out["wal_error"] = self.wal_error
        if self.slot is not None:
            try:
                row = self.conn.execute(sa.text(
                    "SELECT coalesce(sum(record_length - fpi_length), 0) AS n FROM pg_get_wal_records_info(CAST(:a AS pg_lsn), CAST(:b AS pg_lsn)) "
                    "WHERE block_ref LIKE :pat"), {"a": self.lsn0, "b": self.lsn1, "pat": f"%rel %/{self.db_oid}/%"}).mappings().one()
                out["wal_db_bytes"] = int(row["n"])
            except sa.exc.DBAPIError as exc:
                out["wal_error"] = str(exc.orig).splitlines()[0]
        self.close()
        return out

    def close(self) -> None:
        """Drop the slot (it is temporary: closing its session drops it too) and the connection."""
        if not self.conn.closed:
            if self.slot is not None:
                with contextlib.suppress(sa.exc.DBAPIError):
                    self.conn.execute(sa.text("SELECT pg_drop_replication_slot(:s)"), {"s": self.slot})
                self.slot = None
            self.conn.close()
        self.engine.dispose()
