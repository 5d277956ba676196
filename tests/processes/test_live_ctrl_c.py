"""Ctrl-C (or SIGTERM) to the service while a client holds ``/live`` open: the stream ends cleanly.

``/events`` streams end at their next poll on a stop signal; a ``/live`` stream that waited on the
run's next model value only would hold uvicorn's shutdown for the whole 5 s grace, then be
cancelled: the client's read broken mid-stream and "Exception in ASGI application" with a
traceback printed. ``/live`` sees the stop at its next poll too (``service/live.py``) and ends without its ``end`` frame (the run did not end).

A real service process (both entries), an app whose model streams a value now and then for
minutes (``flowing``) or one value and then nothing (``quiet``), a client holding ``/live`` open,
and a real signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tests.support.procs import SETTINGS_VARS, child_env, follow_stream, wait_until_serving
from tests.support.procs import free_port

APP = '''
import asyncio

from pydantic_ai.models.function import FunctionModel

import helix_dbos as hx

QUIET = {quiet}


async def stream(messages, info):
    yield "Thinking"
    for _ in range(600):  # a model that takes its time: minutes, longer than any test waits
        await asyncio.sleep(0.5)
        if not QUIET:
            yield "."


runtime = hx.Runtime([hx.Agent("slow", FunctionModel(stream_function=stream))], live_output=True)
'''


@pytest.mark.kills
@pytest.mark.parametrize("values", ["flowing", "quiet"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("entry", ["helix-dbos serve", "python -m helix_dbos.service"])
def test_a_stop_signal_ends_an_open_live_stream_cleanly(entry: str, sig: signal.Signals, values: str, tmp_path: Path) -> None:
    (tmp_path / "slowlive.py").write_text(textwrap.dedent(APP.format(quiet=values == "quiet")))
    port = free_port()
    db = f"sqlite:///{tmp_path}/l.sqlite"
    env = {"HELIX_DBOS_APP": "slowlive:runtime", "PYTHONPATH": str(tmp_path)}
    if entry == "helix-dbos serve":
        cmd = [sys.executable, "-m", "helix_dbos.cli", "serve", "--port", str(port), "--db", db]
    else:
        cmd = [sys.executable, "-m", "helix_dbos.service"]
        env |= {"HELIX_DBOS_PORT": str(port), "HELIX_DBOS_DATABASE_URL": db}
    proc = subprocess.Popen(cmd, env=child_env(SETTINGS_VARS, env), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, base)
        started = httpx.post(f"{base}/sessions", json={"agent": "slow", "message": "take your time", "session_id": "live-stop"}, timeout=90)
        assert started.status_code == 202, started.text

        reader, streamed, ended = follow_stream(f"{base}/sessions/live-stop/live", {"timeout": 600})
        deadline = time.monotonic() + 120
        # the model request is streaming and the stream is open (a quiet model's one delta waits in its batch)
        while not any('"type": "start"' in line for line in streamed):
            assert time.monotonic() < deadline and reader.is_alive(), (streamed, ended)
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # 0 after Ctrl-C; after SIGTERM uvicorn re-raises the signal once it has shut down (its own way)
    assert proc.returncode == (0 if sig == signal.SIGINT else -signal.SIGTERM), out + err
    assert "Traceback" not in err and "Exception in ASGI application" not in err, err
    assert ended == [None], ended  # the client's stream ended, not broken
    assert "event: end" not in streamed, streamed  # the run did not end: a reconnect reads it again
