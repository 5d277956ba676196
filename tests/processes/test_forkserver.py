"""The fork server's children are the processes a fresh ``python -m`` would be, in all a test sees.

Each case runs tests/scenarios/forked_probe.py twice, forked from the server and as a fresh
interpreter, and compares what a test observes: stdout (what the module printed, atexit included),
stderr's last line, the exit status (a code, ``os._exit``'s, an uncaught exception's 1, a real
SIGINT's KeyboardInterrupt ending by SIGINT, SIGTERM's and SIGKILL's signals).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support import forkserver
from tests.support.procs import ROOT, child_env

pytestmark = pytest.mark.kills  # its children crash (os._exit) and are killed by real signals


def _both(how: str, sig: int | None = None) -> list[tuple[int, str, str]]:
    env = child_env(extra={"PROBE": "seen"})
    seen = []
    for forked in (True, False):
        if forked:
            proc = forkserver.popen_module("tests.scenarios.forked_probe", [how], env, ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert isinstance(proc, forkserver.ForkedPopen) == forkserver.ENABLED
        else:
            proc = subprocess.Popen([sys.executable, "-m", "tests.scenarios.forked_probe", how], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if sig is not None:
            assert proc.stdout is not None
            lines = [proc.stdout.readline(), proc.stdout.readline()]
            assert lines[1].strip() == "waiting", lines
            assert proc.poll() is None
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
            out = "".join(lines) + out
        else:
            out, err = proc.communicate(timeout=120)
        seen.append((proc.returncode, out, (err.strip().splitlines() or [""])[-1]))
    return seen


@pytest.mark.parametrize("how", ["exit0", "exit3", "crash", "raise", "thread"])
def test_a_forked_app_ends_as_a_fresh_one_does(how: str) -> None:
    forked, fresh = _both(how)
    assert forked == fresh
    expected = {"exit0": 0, "exit3": 3, "crash": 97, "raise": 1, "thread": 0}[how]
    assert forked[0] == expected
    assert '"probe": "seen"' in forked[1] and '"name": "__main__"' in forked[1] and f'"cwd": "{ROOT}"' in forked[1]
    assert ("atexit ran" in forked[1]) == (how != "crash")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_forked_app_meets_a_real_signal_as_a_fresh_one_does(sig: int) -> None:
    forked, fresh = _both("wait", sig)
    assert forked == fresh
    assert forked[0] == -sig
    if sig == signal.SIGINT:  # KeyboardInterrupt: traceback, atexit, then the end by SIGINT
        assert forked[2] == "KeyboardInterrupt" and "atexit ran" in forked[1]


def test_a_child_with_other_interpreter_settings_starts_fresh() -> None:
    env = child_env(extra={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONSAFEPATH": "0"})
    proc = forkserver.popen_module("tests.scenarios.forked_probe", ["exit0"], env, ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.communicate(timeout=120)
    assert not isinstance(proc, forkserver.ForkedPopen) and proc.returncode == 0


def test_the_server_is_one_per_worker_and_reused() -> None:
    first = forkserver._server_path()
    assert (first is not None) == forkserver.ENABLED
    assert forkserver._server_path() == first
    assert os.getpid() in forkserver._server or not forkserver.ENABLED
