"""The runtime builds no SQL of its own: every statement lives in ``helix_dbos/ledger/``.

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

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "helix_dbos" / "runtime"

_BUILDERS = {"select", "insert", "update", "delete", "text"}

# The one door to DBOS's own tables: stays, by design.
ALLOWED = {"process/dbos_private.py"}

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
        if name in ALLOWED:
            continue
        if built := _statements_built(path):
            offenders[name] = built
    assert not offenders, f"move these statements into helix_dbos/ledger/: {offenders}"


def test_the_exception_is_a_real_one() -> None:
    """The one allowed module still builds statements (else the exception is stale: drop it)."""
    for name in ALLOWED:
        assert _statements_built(RUNTIME / name), f"{name} builds no statement: drop it from the list"


def test_the_reader_finds_a_statement_built_in_the_runtime(tmp_path: Path) -> None:
    """The rule's reader is not blind: each way of building a statement is found (so an empty list
    of offenders means none, not a reader that sees nothing)."""
    module = tmp_path / "offender.py"
    module.write_text(
        "import sqlalchemy as sa\n"
        "from sqlalchemy import select\n"
        "from ..ledger import tables as t\n"
        "def f(conn):\n"
        "    conn.execute(sa.select(t.runs))\n"
        "    conn.execute(t.runs.update())\n"
        "    conn.execute(sa.text('SELECT 1'))\n"
    )
    found = _statements_built(module)
    assert [f.split(": ", 1)[1] for f in found] == ["from sqlalchemy import select", "sa.select(...)", ".update()", "sa.text(...)"], found
