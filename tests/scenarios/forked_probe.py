"""What tests/processes/test_forkserver.py compares between a forked and a fresh ``python -m``: argv, the
environment, the working directory, ``__name__``, atexit, and each way a process ends."""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time

atexit.register(lambda: print("atexit ran", flush=True))
how = sys.argv[1]
print(json.dumps({"argv": sys.argv[1:], "probe": os.environ.get("PROBE"), "name": __name__, "cwd": os.getcwd(),
                  "main_file": os.path.basename(sys.argv[0]), "sigint": str(signal.getsignal(signal.SIGINT))}), flush=True)
if how == "exit3":
    sys.exit(3)
if how == "crash":
    print("unflushed", end="")
    os._exit(97)
if how == "raise":
    raise RuntimeError("boom")
if how == "thread":  # a non-daemon thread is joined before atexit and exit, as the interpreter does
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
if how == "wait":  # until signalled
    print("waiting", flush=True)
    time.sleep(120)
