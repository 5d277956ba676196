"""A fork server for the scenario apps: the same real processes, without paying their imports each time.

Where the suite's time goes: a scenario app (``python -m tests.scenarios.app ...``) spends about
1.3 s of CPU importing pydantic-ai, SQLAlchemy, DBOS and helix_dbos before it does anything, out of
about 2.3 s in all, and the pytest workers themselves are nearly idle (4 s of CPU in a 600 s run of
the crash tests: everything else is their children). So each pytest worker starts one server that
imports those once and then forks a child per request. A child is an ordinary process in every way
a test observes: its own pid, stdio, working directory and environment, DBOS launched inside it,
killed by a real SIGKILL, exiting through ``os._exit`` at a fault point, interrupted by a real SIGINT
that raises KeyboardInterrupt. Only the interpreter's start is skipped; the module runs as
``__main__`` exactly as ``python -m`` runs it, and the end mimics the interpreter's (non-daemon
threads joined, atexit handlers, streams flushed; an uncaught KeyboardInterrupt ends the process by
SIGINT, as CPython does).

Nothing is imported in the server that reads the environment at import time: helix_dbos reads its
settings at construction and at each fault point, and the scenario modules themselves (which read
``SCENARIO_*`` variables at import) are imported in the child. ``HELIX_DBOS_TEST_FORKSERVER=0``
turns it off (every child is then a fresh ``python -m``), and a child whose ``PYTHON*`` variables
differ from the server's is always started fresh, since those act at interpreter start.

The client side is a ``subprocess.Popen`` whose child is started by the server: ``communicate``,
``poll``, ``wait``, ``kill`` and ``send_signal`` work as for any Popen (the server, the real parent,
reports the exit status on the request's connection).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What every scenario app imports: loaded once in the server, shared by each forked child.
PRELOAD = (
    "sqlalchemy",
    "psycopg",
    "pydantic",
    "dbos",
    "opentelemetry.trace",
    "pydantic_ai",
    "pydantic_ai.messages",
    "pydantic_ai.models.function",
    "pydantic_ai.models.test",
    "helix_dbos",
    "helix_dbos.runtime.face.runtime",
    # the OpenAI Agents SDK half of the recovery suites (SCENARIO_SDK=openai_agents): importing openai
    # and agents cost each such app about 0.7x the CPU of all the above (2.2 s beside 2.9 s at load);
    # neither reads the environment nor starts a thread at import (tracing reads its switch at first use)
    "openai",
    "agents",
    "helix_dbos.adapters.openai_agents.agent",
    "helix_dbos.adapters.openai_agents.reading",
    "tests.scenarios.effects",
    # imported later by most children (counted over the crash, takeover, wire-crash and txtools files:
    # each in 50-214 of 218 children): DBOS's system-database modules at launch, anyio's asyncio
    # backend at the first run, pydantic-ai's direct requests, its OpenAI model and provider (the wire
    # tests and the SDK half), and genai-prices' tables (usage pricing, each child's slowest import)
    "anyio._backends._asyncio",
    "dbos._sys_db_sqlite",
    "dbos._sys_db_postgres",
    "pydantic_ai.direct",
    "pydantic_ai.models.openai",
    "pydantic_ai.providers.openai",
    "genai_prices.data",
)


def _warm() -> None:
    """Build what each child would otherwise build at its first message: pydantic builds a
    ``TypeAdapter``'s schema at first use, and pydantic-ai's message list adapter was 7% of the crash
    tests' py-spy samples (every child dumped a message and built it again). A built adapter is plain memory,
    shared by the fork like the imports."""
    from pydantic_ai import ModelMessagesTypeAdapter

    ModelMessagesTypeAdapter.validate_python([])
    ModelMessagesTypeAdapter.dump_python([], mode="json")


ENABLED = os.environ.get("HELIX_DBOS_TEST_FORKSERVER", "1") != "0"


def _python_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


# ---------------------------------------------------------------------------------------------- server


def _fresh_stdio() -> None:
    """``sys.stdin``/``stdout``/``stderr`` made again over fds 0-2, as a new interpreter makes them.
    The server's were made over its own stdio (its stderr over /dev/null, which is seekable), and a
    stream keeps what it learnt of its file: ``reconfigure()`` on a child's stderr pipe failed with
    ESPIPE (the CLI reconfigures its streams at every command's start)."""
    import io

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__")
        raw: Any = open(fd, "rb" if fd == 0 else "wb", buffering=0 if (fd and unbuffered) else -1, closefd=False)  # noqa: SIM115 (the process's own, never closed)
        stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, line_buffering=fd == 2 or (fd == 1 and raw.isatty()),
                                  write_through=bool(fd) and unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the requested ``python -m module args`` process, then exit."""
    code: int = 0
    interrupted = False
    try:
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _fresh_stdio()
        sys.path[0] = request["cwd"]
        sys.argv = [request["module"], *request["args"]]
        import runpy
        import types

        # what ``python -m`` does: the module runs as the real __main__, in a namespace of its own
        sys.modules["__main__"] = types.ModuleType("__main__")
        runpy._run_module_as_main(request["module"], alter_argv=True)  # type: ignore[attr-defined]
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:  # noqa: BLE001 - printed and exit 1, as the interpreter does
        traceback.print_exc()
        code = 1
    _finish(code, interrupted)


def _finish(code: int, interrupted: bool) -> None:
    """The interpreter's own end: join non-daemon threads, run atexit, flush, exit."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:  # noqa: BLE001 - CPython reports and goes on finalising
        print("Exception ignored on threading shutdown:", file=sys.stderr)
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise EOFError
        body += more
    return json.loads(body), list(fds)


def serve(path: str) -> None:
    """Load PRELOAD, then fork one child per request until the parent (a pytest worker) is gone."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    _warm()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the test run is the pytest worker's to handle
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent:
        readable, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in readable:
            os.read(wake_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"exit {status}\n".encode())
                except OSError:
                    pass
                conn.close()
        if listener in readable:
            conn, _ = listener.accept()
            try:
                request, fds = _recv_request(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                for other in children.values():
                    other.close()
                os.close(wake_r)
                os.close(wake_w)
                _run_child(request, fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"pid {pid}\n".encode())
            children[pid] = conn
    listener.close()


# ---------------------------------------------------------------------------------------------- client

_server: dict[int, tuple[subprocess.Popen[bytes], str, dict[str, str]]] = {}
_server_lock = threading.Lock()


def _server_path() -> tuple[str, dict[str, str]] | None:
    """This process's server (started on first use), or None when it is off or cannot be started."""
    if not ENABLED:
        return None
    with _server_lock:
        known = _server.get(os.getpid())
        if known is not None and known[0].poll() is None:
            return known[1], known[2]
        import tempfile

        from tests.support.procs import ROOT

        folder = tempfile.mkdtemp(prefix="helix-fork-")
        path = str(Path(folder) / "s")
        env = dict(os.environ)
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.forkserver", path], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            proc.kill()
            return None
        _server[os.getpid()] = (proc, path, _python_vars(env))
        atexit.register(proc.kill)
        return path, _python_vars(env)


class ForkedPopen(subprocess.Popen[str]):
    """A Popen whose child the fork server starts; the server reports its exit status."""

    _fork_path: str
    _fork_conn: socket.socket | None

    def __init__(self, fork_path: str, module: str, args: Sequence[str], **kwargs: Any) -> None:
        self._fork_path = fork_path
        self._fork_module = module
        self._fork_conn = None
        super().__init__([sys.executable, "-m", module, *args], **kwargs)

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any, pass_fds: Any, cwd: Any, env: Any, startupinfo: Any, creationflags: Any, shell: Any,  # type: ignore[override]
                       p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int, *rest: Any) -> None:
        devnull = None
        try:
            if p2cread == -1:
                devnull = os.open(os.devnull, os.O_RDONLY)
                p2cread_fd = devnull
            else:
                p2cread_fd = p2cread
            c2pwrite_fd = c2pwrite if c2pwrite != -1 else 1
            if errwrite == -1:
                errwrite_fd = 2
            elif errwrite == subprocess.STDOUT or errwrite == c2pwrite:
                errwrite_fd = c2pwrite_fd
            else:
                errwrite_fd = errwrite
            request = json.dumps({"module": self._fork_module, "args": list(args[3:]), "cwd": str(cwd), "env": dict(env)}).encode()
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(self._fork_path)
            socket.send_fds(conn, [len(request).to_bytes(8, "big") + request], [p2cread_fd, c2pwrite_fd, errwrite_fd])
            reply = conn.makefile("rb").readline().split()
            assert reply[:1] == [b"pid"], reply
            self.pid = int(reply[1])
            self._fork_conn = conn
            self._child_created = True
        finally:
            if devnull is not None:
                os.close(devnull)
            # the child's ends of the pipes Popen made, exactly as Popen's own _execute_child closes
            # them (never a file the caller passed, never Popen's devnull, which it closes itself)
            if p2cread != -1 and p2cwrite != -1 and p2cread != getattr(self, "_devnull", None):
                os.close(p2cread)
            if c2pwrite != -1 and c2pread != -1:
                os.close(c2pwrite)
            if errwrite != -1 and errread != -1:
                os.close(errwrite)

    def _read_exit(self, timeout: float | None) -> int | None:
        conn = self._fork_conn
        if conn is None:
            return self.returncode
        ready, _, _ = select.select([conn], [], [], timeout)
        if not ready:
            return None
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(64)
            if not chunk:
                break
            data += chunk
        conn.close()
        self._fork_conn = None
        parts = data.split()
        status = int(parts[1]) if parts[:1] == [b"exit"] else 255 << 8
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def _internal_poll(self, _deadstate: Any = None, _waitpid: Any = None, _WNOHANG: Any = None, _ECHILD: Any = None) -> int | None:  # type: ignore[override]
        if self.returncode is None:
            self._read_exit(0)
        return self.returncode

    def _wait(self, timeout: float | None) -> int:  # type: ignore[override]
        if self.returncode is not None:
            return self.returncode
        if self._read_exit(timeout) is None:
            assert timeout is not None
            raise subprocess.TimeoutExpired(self.args, timeout)
        assert self.returncode is not None
        return self.returncode


def popen_module(module: str, args: Sequence[str], env: Mapping[str, str], cwd: Path, **kwargs: Any) -> subprocess.Popen[str]:
    """``python -m module args`` as a fresh interpreter or, when possible, forked from the server."""
    server = _server_path()
    if server is not None and _python_vars(env) == server[1]:
        return ForkedPopen(server[0], module, args, cwd=str(cwd), env=dict(env), text=True, **kwargs)
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=dict(env), text=True, **kwargs)


if __name__ == "__main__":
    serve(sys.argv[1])
