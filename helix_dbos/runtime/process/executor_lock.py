"""One live process per executor id, for the process's whole life, even across a lost connection.

DBOS recovers a PENDING workflow by its executor id: two live processes sharing one id re-run each
other's steps. So each process holds an exclusive lock on its id: a Postgres session advisory lock
(released by the server when the process dies, however it dies) or an OS file lock beside the
SQLite file: ``AdvisoryBackend`` or ``FileBackend``, one ``_Backend`` chosen by the database when the
``ExecutorLock`` is built. A process that asked for a specific id fails if it is held; one that did not takes the
first free slot of the host's default ids, so a restarted worker gets its old id back.

A session lock also goes when its *connection* goes (a Postgres restart, ``pg_terminate_backend``)
while the process lives on. So a launched runtime's lock is watched (``watch``): every
``CHECK_INTERVAL`` the watchdog confirms the lock on its connection and stamps ``confirmed_at``.
Once it is lost, bodies wait (``wait_held``, called before a body's attempt is recorded and before
the body runs) while the watchdog re-acquires it on a new connection, which it may do only if nobody
took the id meanwhile: every acquisition bumps the id's ``generation``, so a changed generation means
another process acted on the id. If it cannot re-acquire within its lease (``lease``, default
``HELIX_DBOS_TAKEOVER_AFTER``, 30 s: long enough to ride out a database restart) of its last confirmation,
it prints why on stderr and exits with ``LOCK_LOST_EXIT_CODE`` at once (``os._exit``: its bodies
and workflows must stop, not finish; a supervisor restarts it and it recovers its own runs). Its
counterpart: a process that takes an id whose previous holder did not release it cleanly waits until
that holder's lease plus ``TAKEOVER_MARGIN`` after its last confirmation before it acts (unless the
holder ran on this very host and its process is gone: then nobody can be cut off), so a cut-off holder has
exited (or re-acquired, and the newcomer was refused) before the newcomer runs anything.

The key is not computable: it is a random number kept in ``helix_private.executor_locks``, a table
only the runtime's role can read (``helix-dbos audit-role`` never grants that schema). Any role can
still see a held key in ``pg_locks`` and take it once it is free; so a key held by a role that
cannot update that table is not a runtime's: the acquirer draws a new key instead of being blocked.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from ...errors import ExecutorIdInUseError
from ...ledger import executor_locks
from ...ledger.engine import create_sync_engine, is_sqlite, sqlite_path
from ...settings import DEFAULT_LEASE

MAX_DEFAULT_SLOTS = 64
#: How often the watchdog confirms the lock while this process is working (it asked ``held()``
#: within ``BUSY_WINDOW`` seconds); a body never starts on a confirmation older than twice this
#: (or, on a process so loaded that a confirmation takes longer, twice that, up to a third of the lease).
CHECK_INTERVAL = 0.5
#: How often it confirms an idle process's lock (and renews its lease, which rides the same wake-up):
#: a statement every 10 s, not two a second, on the database of a worker that waits for work (the
#: first ``held()`` after idling asks for a fresh one, so a body never starts on an old confirmation).
IDLE_CHECK_INTERVAL = 10.0
BUSY_WINDOW = 10.0
#: What a newcomer waits beyond an unclean holder's lease, for clocks and the holder's own exit.
TAKEOVER_MARGIN = 1.5
#: The exit status of a process that lost its executor lock for good (EX_TEMPFAIL: restart it).
LOCK_LOST_EXIT_CODE = 75
#: The lock connection's application_name, so operators (and tests) can tell it apart.
APPLICATION_NAME = "helix-executor-lock"

log = logging.getLogger("helix_dbos")


def exit_loudly(message: str) -> None:
    """The default reaction to a lock lost for good: say why on stderr and stop everything at once."""
    text = f"helix-dbos: FATAL: {message}; exiting (status {LOCK_LOST_EXIT_CODE}) so no body runs twice\n"
    try:
        log.critical(text.strip())
        sys.stderr.write(text)
        sys.stderr.flush()
    finally:
        os._exit(LOCK_LOST_EXIT_CODE)


def _gone_from_this_host(host: str | None, pid: int | None) -> bool:
    """Whether the last holder ran here and its process no longer exists (so it cannot be cut off)."""
    if host != socket.gethostname() or not pid:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


class _Backend(Protocol):
    """Where an executor id's lock lives, chosen once per ``ExecutorLock`` by the database: an OS
    file lock beside a SQLite file (``FileBackend``), a Postgres session advisory lock (``AdvisoryBackend``)."""

    #: Monotonic time before which a newcomer must not act: an unclean holder's lease plus ``TAKEOVER_MARGIN``.
    wait_until: float

    def take(self, executor_id: str, lease: float, *, wait: bool) -> bool:
        """Take the id's lock if free (``wait=False``: not if its last holder may still be alive)."""
        ...

    def confirm(self, executor_id: str) -> bool:
        """Whether this process still holds the lock (True: confirmed just now)."""
        ...

    def regain(self, executor_id: str) -> bool | None:
        """Re-acquire a lost lock: True done, False someone else took the id, None try again."""
        ...

    def release(self, executor_id: str | None) -> None:
        """Give the lock back (a no-op when none is held), marking a clean release where it can."""
        ...


class FileBackend:
    """An exclusive ``flock`` on a file named after the id, in a directory beside the SQLite file:
    the OS releases it when the process dies, however it dies."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.wait_until = 0.0  # a file lock is never held by a cut-off process: nobody waits
        self.fd: int | None = None
        self.path: Path | None = None

    def take(self, executor_id: str, lease: float, *, wait: bool) -> bool:
        path = sqlite_path(self.database_url)
        base = Path(f"{path}.executors") if path else Path(os.environ.get("TMPDIR", "/tmp")) / "helix-executors"
        base.mkdir(parents=True, exist_ok=True)
        lock_path = base / f"{hashlib.sha1(executor_id.encode()).hexdigest()}.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd, self.path = fd, lock_path
        return True

    def confirm(self, executor_id: str) -> bool:
        """The locked file is still the one at its path (a removed file could be locked anew by another process)."""
        if self.fd is None:
            return False
        try:
            return self.path is not None and os.fstat(self.fd).st_ino == os.stat(self.path).st_ino
        except OSError:
            return False

    def regain(self, executor_id: str) -> bool | None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return self.take(executor_id, 0.0, wait=True)

    def release(self, executor_id: str | None) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class AdvisoryBackend:
    """A Postgres session advisory lock on the id's random key (``helix_private.executor_locks``),
    on a connection of its own: the server releases it when the process or the connection dies."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.wait_until = 0.0
        self.conn: sa.Connection | None = None
        self.engine: sa.Engine | None = None
        self.key: int | None = None
        self.generation: int | None = None

    def _connect(self) -> sa.Connection:
        if self.engine is None:
            self.engine = create_sync_engine(
                self.database_url,
                poolclass=sa.pool.NullPool,
                connect_args={"application_name": APPLICATION_NAME, "connect_timeout": 2, "options": "-c statement_timeout=5000"},
            )
        return self.engine.connect()

    def _lock_row(self, conn: sa.Connection, executor_id: str) -> sa.Row[Any]:
        return executor_locks.lock_row(conn, executor_id, secrets.randbits(63))

    def _take_key(self, conn: sa.Connection, executor_id: str, key: int) -> int | None:
        """Lock ``key``, or a fresh key if ``key`` is held by a role that is no runtime; None if a runtime holds it."""
        if executor_locks.try_lock(conn, key):
            return key
        if executor_locks.held_by_runtime(conn, key):
            return None
        fresh = secrets.randbits(63)  # held by an intruder (or just released): never wait for it
        executor_locks.set_key(conn, executor_id, fresh)
        log.warning("executor %s: its lock key was held by a role that is no runtime; drew a new key", executor_id)
        return fresh if executor_locks.try_lock(conn, fresh) else None

    def take(self, executor_id: str, lease: float, *, wait: bool) -> bool:
        conn = self.conn = self.conn or self._connect()
        row = self._lock_row(conn, executor_id)
        key = self._take_key(conn, executor_id, int(row.lock_key))
        if key is None:
            conn.rollback()
            return False
        if not wait and row.age is not None and not _gone_from_this_host(row.host, row.pid):
            last_lease = float(row.lease_seconds) if row.lease_seconds is not None else DEFAULT_LEASE
            if float(row.age) < last_lease + TAKEOVER_MARGIN:
                # Its holder may be alive and cut off: leave it everything (generation, marker) as it was.
                conn.rollback()
                executor_locks.unlock(conn, key)
                conn.commit()
                return False
        generation = int(row.generation) + 1
        executor_locks.acquired(conn, executor_id, generation, socket.gethostname(), os.getpid(), lease)
        conn.commit()
        self.key, self.generation = key, generation
        if row.age is not None and not _gone_from_this_host(row.host, row.pid):
            # the last holder never released it: it may be alive, cut off, and exits within its lease
            last_lease = float(row.lease_seconds) if row.lease_seconds is not None else DEFAULT_LEASE
            self.wait_until = time.monotonic() + max(0.0, last_lease + TAKEOVER_MARGIN - float(row.age))
        return True

    def confirm(self, executor_id: str) -> bool:
        if self.conn is None or self.key is None:
            return False
        try:
            done = executor_locks.confirm(self.conn, executor_id, self.generation, self.key)
            self.conn.commit()
            return done
        except sa.exc.DBAPIError:
            return False

    def regain(self, executor_id: str) -> bool | None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # a dead connection may fail to close; it is gone either way
                log.debug("closing the lost lock connection failed", exc_info=True)
            self.conn = None
        try:
            conn = self.conn = self._connect()
            row = self._lock_row(conn, executor_id)
            if int(row.generation) != self.generation:
                conn.rollback()
                return False  # another process acquired the id since: it may have acted on it
            key = self._take_key(conn, executor_id, int(row.lock_key))
            if key is None:
                conn.rollback()
                return False
            executor_locks.regained(conn, executor_id)
            conn.commit()
            self.key = key
            return True
        except sa.exc.DBAPIError:
            log.warning("executor %s: could not reach the database to re-acquire its lock", executor_id, exc_info=True)
            return None

    def release(self, executor_id: str | None) -> None:
        if self.conn is not None:
            try:
                if self.generation is not None and executor_id is not None:
                    executor_locks.released(self.conn, executor_id, self.generation)
                    self.conn.commit()
            except sa.exc.DBAPIError:  # the connection is gone, and the lock with it
                log.debug("could not mark executor %s released", executor_id, exc_info=True)
            finally:
                self.conn.close()
                self.conn = None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None


class ExecutorLock:
    """One executor id's lock, held for the process's life and watched (see the module's docstring)."""

    def __init__(self, database_url: str, lease: float | None = None) -> None:
        self.database_url = database_url
        #: How long this holder may go unconfirmed before it exits (and a newcomer may act).
        self.lease = lease if lease is not None else DEFAULT_LEASE  # the launch hands HELIX_DBOS_TAKEOVER_AFTER's
        self.executor_id: str | None = None
        #: The lock's backend, chosen once by the database (``FileBackend`` for SQLite, else ``AdvisoryBackend``).
        self.backend: _Backend = FileBackend(database_url) if is_sqlite(database_url) else AdvisoryBackend(database_url)
        self._held = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by ``held()`` wanting a fresh confirmation, and by release
        self._thread: threading.Thread | None = None
        self._last_ok = 0.0
        self._confirm_took = 0.0  # how long the last confirmation took, start to answer
        self._last_demand = 0.0
        self._idling = False
        #: The reaction to a lock lost for good (the watchdog calls it; default: say why and exit).
        self.on_lost: Callable[[str], None] = exit_loudly
        self.confirmations = 0  # watchdog confirmations so far (observable by tests and operators)
        self.renewer: Callable[[], bool | None] | None = None
        self._renew_every = 2.0
        self._last_renew = time.monotonic()
        self.regains = 0  # locks lost and re-acquired so far

    # --- acquiring -------------------------------------------------------------------------------

    def acquire(self, requested: str | None, *, wait: bool = True) -> str:
        """Take the id (or the first free default one); once this returns, no other live process acts on it."""
        if requested:
            if not self.backend.take(requested, self.lease, wait=wait):
                self.release()
                raise ExecutorIdInUseError(
                    f"executor id {requested!r} is held by another live process",
                    detail="two processes on one executor id run each other's steps twice; give each its own",
                )
            chosen = requested
        else:
            host = socket.gethostname()
            for slot in range(MAX_DEFAULT_SLOTS):
                if self.backend.take(f"{host}-{slot}", self.lease, wait=True):
                    chosen = f"{host}-{slot}"
                    break
            else:
                self.release()
                raise ExecutorIdInUseError(f"all {MAX_DEFAULT_SLOTS} default executor ids of host {host!r} are in use")
        self.executor_id = chosen
        self._held.set()
        self._last_ok = time.monotonic()
        delay = self.backend.wait_until - time.monotonic()
        if delay > 0:
            log.info("executor %s was not released cleanly; waiting %.1fs so a cut-off holder stops first", chosen, delay)
            time.sleep(delay)
        return chosen

    # --- watching --------------------------------------------------------------------------------

    def watch(self, on_lost: Callable[[str], None] | None = None) -> None:
        """Start the watchdog (a launched runtime's lock; probes are short-lived and need none)."""
        if on_lost is not None:
            self.on_lost = on_lost
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._watch, name=f"helix-executor-lock-{self.executor_id}", daemon=True)
        self._thread.start()

    def set_renewer(self, renew: Callable[[], bool | None], every: float) -> None:
        """Renew the executor's lease (``leases.renew``) every ``every`` seconds while the lock holds:
        True renewed, False the lease is no longer ours (taken over: exit like a lost lock), None
        the database did not answer (the lock's own checks decide)."""
        self.renewer, self._renew_every, self._last_renew = renew, every, time.monotonic()

    def _fresh(self) -> bool:
        """Whether this process may still act for its id: its lease, by its own clock, has not run
        out (a frozen or starved process wakes up stale, and waits for its watchdog's verdict)."""
        last = self._last_renew if self.renewer is not None else self._last_ok
        return time.monotonic() - last < max(self.lease - TAKEOVER_MARGIN, self.lease / 2)

    def held(self) -> bool:
        """Whether a body may start now: the lock held, the lease fresh, and confirmed recently
        (``_confirmed_within``; after an idle spell the watchdog is woken to confirm it at once, and
        the caller waits for that in ``wait_held``)."""
        now = time.monotonic()
        self._last_demand = now
        if self._idling:  # work has come: the watchdog goes back to its busy interval at once
            self._wake.set()
        if self._thread is not None and now - self._last_ok > self._confirmed_within():
            self._wake.set()
            return False
        return self._held.is_set() and self._fresh()

    def _confirmed_within(self) -> float:
        """How old a confirmation a body may start on: ``2 * CHECK_INTERVAL``, or twice what the
        last confirmation took when the process is so loaded that one takes longer, never more than
        a third of the lease (a takeover waits for the whole lease past the last one).

        A fixed bound livelocked a CPU-starved process: with each confirmation taking longer than
        the bound, none was ever fresh when it landed, no body started, and after a lease the
        process exited 75 while holding its lock (200 sessions at once under a profiler)."""
        return max(2 * CHECK_INTERVAL, min(2 * self._confirm_took, self.lease / 3))

    def _interval(self) -> float:
        self._idling = time.monotonic() - self._last_demand >= BUSY_WINDOW
        if not self._idling:
            return CHECK_INTERVAL
        idle = IDLE_CHECK_INTERVAL if self.renewer is None else min(IDLE_CHECK_INTERVAL, self._renew_every)
        return max(CHECK_INTERVAL, min(idle, self.lease / 3))

    def wait_held(self) -> None:
        """Return once the lock is held and the lease fresh; if it is lost for good, do what the
        watchdog does (exit)."""
        deadline = time.monotonic() + self.lease + 2 * CHECK_INTERVAL
        while not self.held():
            if self._stop.is_set():
                return
            if time.monotonic() > deadline:
                self.on_lost(f"executor {self.executor_id!r} lost its lock and did not get it back")
                return
            time.sleep(0.05)

    def _confirm(self) -> bool:
        """Whether this process still holds its lock (True: confirmed just now)."""
        return self.executor_id is not None and self.backend.confirm(self.executor_id)

    def _regain(self) -> bool | None:
        """Re-acquire a lost lock: True done, False someone else took the id, None try again."""
        assert self.executor_id is not None
        return self.backend.regain(self.executor_id)

    def _watch(self) -> None:
        while True:
            self._wake.wait(self._interval())
            self._wake.clear()
            if self._stop.is_set():
                return
            started = time.monotonic()
            if self._confirm():
                if self._stop.is_set():
                    return
                self._last_ok = started
                self._confirm_took = time.monotonic() - started
                self.confirmations += 1
                if self.renewer is not None and started - self._last_renew >= self._renew_every:
                    try:
                        renewed = self.renewer()
                    except Exception:  # the database did not answer: the next check decides
                        log.warning("executor %s could not renew its lease", self.executor_id, exc_info=True)
                        renewed = None
                    if renewed is False:
                        self._held.clear()
                        self.on_lost(f"executor {self.executor_id!r} lost its lease (its runs were taken over by another executor)")
                        return
                    if renewed:
                        self._last_renew = started
                continue
            self._held.clear()
            log.error("executor %s lost its lock; bodies wait while it re-acquires it", self.executor_id)
            outcome: bool | None = None
            while not self._stop.is_set() and time.monotonic() < self._last_ok + self.lease:
                outcome = self._regain()
                if outcome is not None:
                    break
                self._stop.wait(0.2)
            if self._stop.is_set():
                return
            if outcome:
                log.warning("executor %s re-acquired its lock", self.executor_id)
                self._last_ok = time.monotonic()
                self.regains += 1
                self._held.set()
                continue
            why = "another process took its executor id" if outcome is False else f"it could not re-acquire it within {self.lease:g}s (HELIX_DBOS_TAKEOVER_AFTER)"
            self.on_lost(f"executor {self.executor_id!r} lost its lock ({why})")
            return

    # --- releasing -------------------------------------------------------------------------------

    def stop_watching(self) -> None:
        """Stop the watchdog (and its lease renewals) while the lock is still held: a shutting-down
        runtime releases its lease itself, and must not race a renewal against its own teardown."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def release(self) -> None:
        """Give the id back cleanly: the next holder need not wait for a possibly cut-off one."""
        self.stop_watching()
        self._held.clear()
        self.backend.release(self.executor_id)

    def __enter__(self) -> ExecutorLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
