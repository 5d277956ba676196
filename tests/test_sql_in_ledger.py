"""The runtime builds no SQL of its own: every statement lives in ``helix_dbos/ledger/`` (issue 24).

One place per table group means one place to read when a query is slow, a lock is taken or a
column changes. The rule is read from the source: no module under ``helix_dbos/runtime/``
imports ``select``/``insert``/``update``/``delete``/``text`` from sqlalchemy, calls ``sa.select``
and friends, or calls ``<table>.insert()``/``.update()``/``.delete()``.

``process/dbos_private.py`` is the one exception by design: it is the single door to DBOS's own
tables (which helix does not own and ``ledger/`` does not describe).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "helix_dbos" / "runtime"

_BUILDERS = {"select", "insert", "update", "delete", "text"}

# The one door to DBOS's own tables: stays, by design.
ALLOWED = {"process/dbos_private.py"}

# Modules whose statements have not moved to ledger/ yet (issue 24 item 7, in progress).
# Remove a line when its module's statements move; never add one.
NOT_YET_MOVED: set[str] = {
    "floor/fence.py",
    "floor/pairing.py",
    "flow/model_request.py",
}


def _statements_built(path: Path) -> list[str]:
    """Where ``path`` builds a Core statement itself: ``line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sqlalchemy":
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name in _BUILDERS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _BUILDERS:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in {"sa", "sqlalchemy"}:
                found.append(f"{node.lineno}: {owner.id}.{node.func.attr}(...)")
            elif node.func.attr in {"insert", "update", "delete"} and not node.args and not node.keywords:
                found.append(f"{node.lineno}: .{node.func.attr}()")
    return found


def test_the_runtime_builds_no_statement_of_its_own() -> None:
    offenders = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        name = str(path.relative_to(RUNTIME))
        if name in ALLOWED or name in NOT_YET_MOVED:
            continue
        if built := _statements_built(path):
            offenders[name] = built
    assert not offenders, f"move these statements into helix_dbos/ledger/: {offenders}"


def test_the_lists_name_real_offenders_only() -> None:
    """A module that moved its statements leaves the not-yet list (so the list only shrinks)."""
    for name in ALLOWED | NOT_YET_MOVED:
        assert _statements_built(RUNTIME / name), f"{name} builds no statement: drop it from the list"
