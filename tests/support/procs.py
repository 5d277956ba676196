"""Child processes for the tests: one environment scrub, one way to run or spawn an app and read it.

Every test that starts a real process (a scenario app, the CLI, the service) goes through here, so
a child never inherits the runner's fault points or DBOS settings by accident, and reads its last
JSON line the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]

#: What a scenario child must not inherit: the fault points and DBOS's own overrides.
FAULT_VARS: tuple[str, ...] = ("HELIX_DBOS_CRASH_AT", "HELIX_DBOS_FAIL_AT", "DBOS__")
#: What a CLI or service child must not inherit: every helix and DBOS setting of the runner.
SETTINGS_VARS: tuple[str, ...] = ("HELIX_DBOS_", "DBOS__")


def child_env(drop: Iterable[str] = FAULT_VARS, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The runner's environment without the variables starting with ``drop``, plus ``extra``."""
    prefixes = tuple(drop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(extra or {})
    return env


def free_port() -> int:
    """A loopback port nothing listens on (free when asked; a test binds it, or finds it refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def last_json(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (what the apps print as their result)."""
    found = None
    for line in text.splitlines():
        if line.startswith("{"):
            found = json.loads(line)
    return found


@dataclass
class Outcome:
    code: int
    result: dict[str, Any] | None
    stderr: str


def run_module(module: str, args: Sequence[str], env: Mapping[str, str], timeout: float = 240) -> Outcome:
    """``python -m module args`` from the checkout, to its end: exit code, last JSON line, stderr.

    A scenario app is forked from the worker's fork server (tests/support/forkserver.py: the same
    real process, without re-importing pydantic-ai and DBOS each time)."""
    done = run_python_m([sys.executable, "-m", module, *args], env, timeout)
    return Outcome(done.returncode, last_json(done.stdout), done.stderr)


def spawn_module(module: str, args: Sequence[str], env: Mapping[str, str], stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
    """``python -m module args`` started and left running, for the test to kill or signal.

    Pass a file as ``stderr`` when nobody reads the pipe: a full pipe would freeze the child mid-run.
    """
    from tests.support.forkserver import popen_module

    return popen_module(module, args, env, ROOT, stdout=subprocess.PIPE, stderr=stderr)


def popen_python_m(argv: Sequence[str], env: Mapping[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    """``subprocess.Popen(argv, ...)`` for an ``argv`` of ``[sys.executable, "-m", module, ...]``, from
    the checkout, forked from the worker's fork server like spawn_module's children (text mode)."""
    from tests.support.forkserver import popen_module

    assert list(argv[:2]) == [sys.executable, "-m"], argv
    kwargs.pop("text", None)
    kwargs.pop("cwd", None)
    return popen_module(argv[2], list(argv[3:]), env, ROOT, **kwargs)


def run_python_m(argv: Sequence[str], env: Mapping[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=...)`` through popen_python_m."""
    with popen_python_m(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def wait_until_serving(proc: subprocess.Popen[str], base: str, ceiling: float = 180) -> None:
    """Poll a started service's /healthz until it answers 200; fail at once if the process ended
    (its output is the message), or after ``ceiling`` seconds (generous: CI may be busy)."""
    import time

    import httpx

    deadline = time.monotonic() + ceiling
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service never answered /healthz"
        time.sleep(0.2)


def follow_stream(url: str, params: Mapping[str, Any] | None = None) -> tuple[Any, list[str], list[BaseException | None]]:
    """Read an SSE stream line by line in a daemon thread: the thread, the lines so far, and how the
    stream ended (None when the server closed it, else what the client met), for a test to assert."""
    import threading

    import httpx

    streamed: list[str] = []
    ended: list[BaseException | None] = []

    def follow() -> None:
        try:
            with httpx.stream("GET", url, params=params, timeout=httpx.Timeout(120, read=120)) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    streamed.append(line)
            ended.append(None)
        except BaseException as exc:  # noqa: BLE001 - what the client met, asserted by the caller
            ended.append(exc)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    return reader, streamed, ended
