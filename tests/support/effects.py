"""Reading back the side-effect record the scenario apps keep outside the runtime (one fsynced JSON
line per body start or model request, written by ``tests/scenarios/effects.py``): what really
happened, counted apart from what the ledger says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_effects(folder: Path, kind: str) -> list[dict[str, Any]]:
    """Every line of ``folder/kind.jsonl`` in the order written; none yet: an empty list."""
    path = folder / f"{kind}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
