"""Side effects recorded outside the runtime, so a demo can prove how often a body really ran.

Each body appends one fsynced line to ``HELIX_DBOS_DEMO_EFFECTS`` (when set) *before* it returns: a
line written just before a process is killed survives the kill, as an email sent would.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

ENV = "HELIX_DBOS_DEMO_EFFECTS"


def record(tool: str, **data: Any) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"tool": tool, **data}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def bodies_by_call(path: str | Path) -> Counter[str]:
    """Body starts per dispatch id: the number a crash must never push above what recovery allows."""
    return Counter(str(line.get("dispatch_id")) for line in read(path))
