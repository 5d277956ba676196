"""A stand-in payments provider for the demo: charges keyed on an idempotency key, and a lookup.

It plays the outside system a reconcile check asks. Charges are appended, fsynced, to the file
``HELIX_DBOS_DEMO_PAYMENTS`` names (so they survive a killed worker, as a real provider's would);
without it they live in this process only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "HELIX_DBOS_DEMO_PAYMENTS"
_memory: dict[str, dict[str, Any]] = {}


def _path() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def find(key: str) -> dict[str, Any] | None:
    """The charge made under ``key``, if any (a provider's "get by idempotency key")."""
    path = _path()
    if path is None:
        return _memory.get(key)
    for line in path.read_text().splitlines() if path.exists() else []:
        row = json.loads(line)
        if row["key"] == key:
            return dict(row["receipt"])
    return None


def charge(key: str, amount_cents: int) -> dict[str, Any]:
    """Charge once per key: a repeat under the same key returns the first receipt."""
    existing = find(key)
    if existing is not None:
        return existing
    receipt = {"charge_id": f"ch_{key[-8:]}", "amount_cents": amount_cents}
    path = _path()
    if path is None:
        _memory[key] = receipt
        return receipt
    with open(path, "a") as f:
        f.write(json.dumps({"key": key, "receipt": receipt}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return receipt
