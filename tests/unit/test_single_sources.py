"""Rules kept in one place stay there: read from the source and the docs, not from a running process.

- The fault points: the code's lists (``faults.CRASH_POINTS``, ``faults.FAIL_POINTS``) are exactly
  the points the code passes, and README.md, docs/recovery.md and docs/subagents.md name exactly them.
- Opening a run: one function writes a run's row (``runtime/floor/runs.py``); no other module inserts one.
- A JSON object of a user's edge is named once (``ledger/user_json.py``): no raw ``dict[str, Any]``
  in ``helix_dbos/runtime/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helix_dbos.runtime.process import faults

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "helix_dbos"


def _calls_named(name: str) -> dict[str, list[str]]:
    """Every call ``name(...)`` in the package: the literal first argument -> the modules that pass it."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called != name:
                continue
            first = node.args[0] if node.args else None
            key = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else "<not a literal>"
            found.setdefault(key, []).append(str(path.relative_to(ROOT)))
    return found


def test_the_code_passes_exactly_the_listed_crash_points() -> None:
    passed = _calls_named("crash_point")
    assert "<not a literal>" not in passed, passed
    assert sorted(passed) == sorted(faults.CRASH_POINTS)
    assert len(set(faults.CRASH_POINTS)) == len(faults.CRASH_POINTS)


def test_the_code_passes_exactly_the_listed_fail_points() -> None:
    passed = _calls_named("fail_point")
    assert "<not a literal>" not in passed, passed
    assert sorted(passed) == sorted(faults.FAIL_POINTS)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    rest = text[start + len(heading):]
    end = re.search(r"^#{1,3} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def _table_points(section: str, header: str) -> list[str]:
    """The first column's backticked names of the markdown table under ``header``."""
    lines = section[section.index(header):].splitlines()[2:]  # past the header and its |---| line
    end = next((i for i, ln in enumerate(lines) if not ln.startswith("|")), len(lines))
    return [re.match(r"\| `([a-z_]+)` \|", row).group(1) for row in lines[:end]]  # type: ignore[union-attr]


def test_docs_recovery_tables_are_the_code_lists() -> None:
    section = _section((ROOT / "docs" / "recovery.md").read_text(), "## Fault injection, for testing your own tools")
    assert _table_points(section, "| point | the process dies... |") == list(faults.CRASH_POINTS)
    assert _table_points(section, "| point | the run fails... |") == list(faults.FAIL_POINTS)


def _readme_row(readme: str, var: str) -> list[str]:
    (row,) = [ln for ln in readme.splitlines() if ln.startswith(f"| `{var}=")]
    return [name for name in re.findall(r"`([^`]+)`", row) if re.fullmatch(r"[a-z_]+", name)]


def test_readme_names_every_point_once() -> None:
    readme = (ROOT / "README.md").read_text()
    assert _readme_row(readme, faults.ENV) == list(faults.CRASH_POINTS)
    assert _readme_row(readme, faults.FAIL_ENV) == list(faults.FAIL_POINTS)


def test_docs_subagents_names_the_child_points() -> None:
    section = _section((ROOT / "docs" / "subagents.md").read_text(), "## Fault injection points added")
    assert re.findall(rf"`{faults.ENV}=([a-z_]+)", section) == list(faults.CHILD_CRASH_POINTS)
    assert re.findall(rf"`{faults.FAIL_ENV}=([a-z_]+)", section) == list(faults.CHILD_FAIL_POINTS)


def test_the_child_points_are_passed_only_by_the_child_phase() -> None:
    """The lists' split is the code's: child points in the child phase (remote children, companions,
    and the workflow's dispatch of both), never in a plain step."""
    passed = _calls_named("crash_point") | {f"fail:{k}": v for k, v in _calls_named("fail_point").items()}
    for point in (*faults.CHILD_CRASH_POINTS, *(f"fail:{p}" for p in faults.CHILD_FAIL_POINTS)):
        assert set(passed[point]) <= {"helix_dbos/runtime/flow/children.py", "helix_dbos/runtime/flow/companions.py", "helix_dbos/runtime/flow/workflow.py"}, (point, passed[point])
    assert "helix_dbos/runtime/flow/bodies.py" not in {m for point in faults.CHILD_CRASH_POINTS for m in passed[point]}


def test_a_run_row_is_written_in_one_place() -> None:
    assert {m for ms in _inserts_of_runs().values() for m in ms} == {"helix_dbos/runtime/floor/runs.py"}


def _inserts_of_runs() -> dict[str, list[str]]:
    """Modules calling ``insert_run`` or inserting into the runs table directly."""
    found = {"insert_run": [m for ms in _calls_named("insert_run").values() for m in ms]}
    direct = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if "t.runs.insert(" in p.read_text() and p != PACKAGE / "ledger" / "runs.py"]  # the statement's own module
    found["runs.insert"] = direct
    return found


#: ``dict[str, Any]`` is said once, where it is a user's edge (``ledger/user_json.py``: tool args, a
#: JSON result, pydantic-ai's message JSON); between the runtime's own modules a record is a
#: ``TypedDict`` or a frozen dataclass.
RAW_JSON_DICT = re.compile(r"dict\[\s*str\s*,\s*(?:typing\.)?Any\s*\]")

def _raw_json_dicts() -> dict[str, int]:
    found = {}
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        n = len(RAW_JSON_DICT.findall(path.read_text()))
        if n:
            found[str(path.relative_to(ROOT))] = n
    return found


def test_no_raw_dict_of_any_passes_between_runtime_modules() -> None:
    assert _raw_json_dicts() == {}


def test_the_raw_dict_scan_finds_one() -> None:
    assert RAW_JSON_DICT.findall("def f(x: dict[str, Any]) -> dict[str,typing.Any]: ...") == ["dict[str, Any]", "dict[str,typing.Any]"]
    assert "JsonObject: TypeAlias = dict[str, Any]" in (PACKAGE / "ledger" / "user_json.py").read_text()  # the edge, named once


def _loggers(tree: ast.Module) -> tuple[list[str], int]:
    """A module's top-level ``log = logging.getLogger(...)`` names, and how many ``getLogger`` calls it makes."""
    top = [t.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
           and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "getLogger"
           for t in node.targets if isinstance(t, ast.Name)]
    calls = sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "getLogger" for n in ast.walk(tree))
    return top, calls


def test_log_is_defined_once_per_runtime_module() -> None:
    """A module that logs names its logger once, at the top, as ``log``: no second logger, no call in a function."""
    bad = {}
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        top, calls = _loggers(ast.parse(path.read_text()))
        if calls and (top != ["log"] or calls != 1):
            bad[str(path.relative_to(ROOT))] = (top, calls)
    assert bad == {}
    assert _loggers(ast.parse("import logging\nlog = logging.getLogger('x')\ndef f():\n    logging.getLogger('x').info('y')\n")) == (["log"], 2)


#: The process-wide lookups of the launched runtime (``runtime/floor/registry.py``).
REGISTRY_LOOKUPS = frozenset({"current", "env", "installed"})


def _registry_lookups(source: str) -> list[int]:
    """The lines where ``source`` calls one of ``REGISTRY_LOOKUPS`` (by its bare name or as ``registry.x``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in REGISTRY_LOOKUPS and not (isinstance(func, ast.Attribute) and not isinstance(func.value, ast.Name)):
                lines.append(node.lineno)
    return lines


def test_a_runs_code_is_handed_its_registry_never_looks_it_up() -> None:
    """``runtime/flow`` and ``runtime/floor`` get the registry (its Env, the agent) as an argument, and
    the durable operations from the one the workflow's entry set (``registry.serving``): no module
    there calls ``current()``, ``env()`` or ``installed()``; registry.py defines them."""
    found = {}
    for folder in ("flow", "floor"):
        for path in sorted((PACKAGE / "runtime" / folder).glob("*.py")):
            if path.name != "registry.py" and (lines := _registry_lookups(path.read_text())):
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}
    probe = "def f():\n    return registry.env(), current(), registry.env.agents, self.a.env()\n"
    assert _registry_lookups(probe) == [2, 2]  # ``self.a.env()`` is a method of something held, not the lookup
