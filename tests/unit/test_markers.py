"""Tests that kill real processes carry ``@pytest.mark.kills`` so a quick local run can skip them
(``pytest -m "not kills"``), and each test file sits in the folder of its kind (docs/contributing.md,
"Tests by kind"); this keeps both true as tests are added."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: How a test kills or crashes a child: a fault point (``crash_at``), a signal, an exit.
KILLS = re.compile(r"SIGKILL|\.kill\(\)|crash_at|CRASH_AT|os\._exit|\bcrash\(")
#: How a test starts a process of its own: a child Python, a service, a worker pool, the scenario
#: apps (crashkit's Kit, the family fixture), the dbos CLI, PgBouncer, a signal sent to a process.
SPAWNS = re.compile(
    r"Kit\(|\bfam\b|subprocess\.(run|Popen|check|call)|Popen\(|run_module|spawn_module|run_python_m|popen_python_m"
    r"|WorkerPool|os\.kill|killed_mid_charge|kill_mid_calls|PageRun\(|start_service|\bservices\b|provider_killed|PgBouncer|forkserver|dbos_cli\("
)
#: How a test reaches a database or launches DBOS: the database fixtures, a Runtime, DBOS itself.
LAUNCHES = re.compile(r"make_runtime|Runtime\(|\.launch\(|db_url|pg_url|DBOS\(|create_sync_engine\(")
KINDS = ("unit", "runtime", "processes")


def _test_files() -> list[Path]:
    return sorted(p for kind in KINDS for p in (TESTS / kind).glob("test_*.py"))


def test_every_test_that_kills_a_process_is_marked() -> None:
    unmarked, marked = [], 0
    for path in _test_files():
        src = path.read_text()
        for node in ast.parse(src).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                if not KILLS.search(ast.get_source_segment(src, node) or ""):
                    continue
                if any("kills" in ast.unparse(d) for d in node.decorator_list):
                    marked += 1
                else:
                    unmarked.append(f"{path.parent.name}/{path.name}::{node.name}")
    assert marked > 20  # the scan saw the crash tests
    assert unmarked == []


def test_every_test_file_sits_in_the_folder_of_its_kind() -> None:
    """unit/: no process but the test's and no database; runtime/: DBOS or a database in the test's
    own process; processes/: starts (and often kills) processes of its own. A file is placed by the
    heaviest thing any of its tests does, so ``pytest tests/unit`` stays a seconds-long check."""
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []  # no test file outside a kind
    misplaced = []
    for path in _test_files():
        if path == Path(__file__).resolve():
            continue  # this file spells the patterns out
        src = path.read_text()
        kind = "processes" if SPAWNS.search(src) else "runtime" if LAUNCHES.search(src) else "unit"
        if kind != path.parent.name:
            misplaced.append(f"{path.parent.name}/{path.name} belongs in {kind}/")
    assert len(_test_files()) > 90  # the scan saw the suite
    assert misplaced == []
