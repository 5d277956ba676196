"""The side-effect record every scenario app keeps outside the runtime: one fsynced JSON line per
body start or model request, so a line written just before ``os._exit`` or a SIGKILL survives it
and a test counts what really happened, not what the ledger says."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def append(folder: Path | None, kind: str, data: dict[str, Any]) -> None:
    """Append ``data`` to ``folder/kind.jsonl`` and fsync it (no folder: record nothing)."""
    if folder is None:
        return
    with open(folder / f"{kind}.jsonl", "a") as f:
        f.write(json.dumps(data) + "\n")
        f.flush()
        os.fsync(f.fileno())


def recorder(variable: str) -> Callable[..., None]:
    """``record(kind, **data)`` appending ``data`` with the writer's pid and time to the folder the
    environment ``variable`` names when it is called (a forked app gets its environment after import)."""

    def record(kind: str, **data: Any) -> None:
        raw = os.environ.get(variable)
        append(Path(raw) if raw else None, kind, {"pid": os.getpid(), "t": time.time(), **data})

    return record


def app_args(argv: list[str], *required: str) -> argparse.Namespace:
    """The command line the pydantic-ai crash apps share: ``--db --effects --executor`` (plus
    ``required`` options), ``start`` or ``wake``, ``--session``; the effects folder is created."""
    p = argparse.ArgumentParser()
    for name in ("--db", "--effects", "--executor", *required):
        p.add_argument(name, required=True)
    p.add_argument("cmd", choices=["start", "wake"])
    p.add_argument("--session", required=True)
    args = p.parse_args(argv)
    Path(args.effects).mkdir(parents=True, exist_ok=True)
    return args
