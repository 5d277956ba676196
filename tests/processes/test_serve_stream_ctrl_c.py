"""Ctrl-C to the service while a client follows a session's events: the stream ends, no traceback.

``helix-dbos serve``, a session started over HTTP, its events followed over SSE, Ctrl-C: uvicorn
would wait its whole 5 s grace for the stream, then cancel it and print "Exception in ASGI
application" with a traceback on stderr. The stop signal marks the app stopping (``service/http.py``) and the stream ends at its next poll; the client's stream closes
cleanly and the process exits 0 with nothing on stderr but its own lines. Both entries
that run the service (``helix-dbos serve`` and ``python -m helix_dbos.service``), real processes
and a real SIGINT.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.procs import SETTINGS_VARS, child_env, follow_stream, wait_until_serving
from tests.support.procs import free_port


@pytest.mark.kills
@pytest.mark.parametrize("entry", ["helix-dbos serve", "python -m helix_dbos.service"])
def test_ctrl_c_ends_an_open_event_stream_without_a_traceback(entry: str, tmp_path: Path) -> None:
    port = free_port()
    db = f"sqlite:///{tmp_path}/s.sqlite"
    if entry == "helix-dbos serve":
        cmd, env = [sys.executable, "-m", "helix_dbos.cli", "serve", "--port", str(port), "--db", db], {}
    else:
        cmd, env = [sys.executable, "-m", "helix_dbos.service"], {"HELIX_DBOS_PORT": str(port), "HELIX_DBOS_DATABASE_URL": db}
    proc = subprocess.Popen(cmd, env=child_env(SETTINGS_VARS, env), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, base)
        # the concierge suspends on an approval: a followed stream of it stays open
        started = httpx.post(f"{base}/sessions?wait=60", json={"agent": "concierge", "message": "Dinner in Porto", "session_id": "ctrl-c"}, timeout=90)
        assert started.status_code in (200, 202), started.text

        reader, streamed, ended = follow_stream(f"{base}/sessions/ctrl-c/events", {"follow": "true"})
        deadline = time.monotonic() + 60
        while not any(line.startswith("id: ") for line in streamed):
            assert time.monotonic() < deadline and reader.is_alive(), (streamed, ended)
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - signalled
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err and "Exception in ASGI application" not in err, err
    assert ended == [None], ended  # the client's stream ended, not broken
    # generous: the runtime's own shutdown follows (DBOS's grace period), slow on a loaded machine;
    # the stream's cut would show above as uvicorn's traceback, not here
    assert took < 60, f"the stop took {took:.1f} s"
