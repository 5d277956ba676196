"""The run fence has one judge: ``runtime/floor/fence.py`` reads (through ``ledger/fence_reads.py``),
decides and refuses, and every other module goes through one of its entry points.

Read from the source: a module that reads the fence's statements itself, or weighs its conditions
(``fence_status``, ``fence_current``, ...), judges the fence a second time, and the two judgements
drift apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import helix_dbos
from helix_dbos.ledger import fence_reads
from helix_dbos.runtime.floor import fence

PACKAGE = Path(helix_dbos.__file__).resolve().parent
JUDGE = PACKAGE / "runtime" / "floor" / "fence.py"
READS = PACKAGE / "ledger" / "fence_reads.py"


def _second_judgements(path: Path) -> list[str]:
    """What in ``path`` reads or weighs the fence outside its judge: an import of ``fence_reads``,
    a use of the judge's private parts, a fence condition's label."""
    found = []
    conditions = set(fence_reads.CALLS_HEAD_KEYS)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and ((node.module or "").endswith("fence_reads") or any(a.name == "fence_reads" for a in node.names)):
            found.append(f"{path.name}:{node.lineno}: imports fence_reads")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "fence" and node.attr.startswith("_"):
            found.append(f"{path.name}:{node.lineno}: fence.{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in conditions:
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return found


def test_only_the_judge_reads_and_weighs_the_fence() -> None:
    others = [p for p in sorted(PACKAGE.rglob("*.py")) if p not in (JUDGE, READS)]
    assert [hit for p in others for hit in _second_judgements(p)] == []
    assert _second_judgements(JUDGE)  # the scan does see the judge's own reads


def test_the_scan_finds_a_second_judgement(tmp_path: Path) -> None:
    bad = tmp_path / "second.py"
    bad.write_text(
        "from ...ledger import fence_reads\n"
        "def passes(row, fence):\n"
        "    return row['fence_status'] == 'running' and fence._judge(row)\n"
    )
    assert sorted(_second_judgements(bad)) == ["second.py:1: imports fence_reads", "second.py:3: 'fence_status'", "second.py:3: fence._judge"]


def test_the_entry_points_are_the_judges_public_names() -> None:
    public = {n for n in vars(fence) if not n.startswith("_") and callable(getattr(fence, n)) and getattr(getattr(fence, n), "__module__", "") == fence.__name__}
    assert public == {
        "FenceHead", "current_workflow_id", "is_own_workflow", "check", "refused", "live_run", "step_calls", "new_messages", "refuse",
        "fork_refusal", "raise_if_refused", "refusal", "is_fenced",
    }
