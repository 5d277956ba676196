"""Tests that kill real processes carry ``@pytest.mark.kills`` so a quick local run can skip them
(``pytest -m "not kills"``); this keeps the marker true as tests are added."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent
#: How a test kills or crashes a child: a fault point (``crash_at``), a signal, an exit.
KILLS = re.compile(r"SIGKILL|\.kill\(\)|crash_at|CRASH_AT|os\._exit|\bcrash\(")


def test_every_test_that_kills_a_process_is_marked() -> None:
    unmarked, marked = [], 0
    for path in sorted(ROOT.glob("test_*.py")):
        src = path.read_text()
        for node in ast.parse(src).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                if not KILLS.search(ast.get_source_segment(src, node) or ""):
                    continue
                if any("kills" in ast.unparse(d) for d in node.decorator_list):
                    marked += 1
                else:
                    unmarked.append(f"{path.name}::{node.name}")
    assert marked > 20  # the scan saw the crash tests
    assert unmarked == []
