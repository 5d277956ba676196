"""docs/operations.md's settings table against ``helix_dbos/settings.py``'s ``EnvSettings``, so the
docs cannot drift from the code again (its ``HELIX_DBOS_RECOVERY_POLL`` default once did): every
field is a row and every row a field, with the field's default and its meaning's words; every
``HELIX_DBOS_*`` variable the package names is documented; and no module but ``settings.py`` reads
a ``HELIX_DBOS_*`` (or DBOS's ``DBOS__*``) variable, so a second reader cannot come back.
"""

from __future__ import annotations

import ast
import re
import uuid
from dataclasses import fields
from pathlib import Path

import pytest

from helix_dbos import settings
from helix_dbos.errors import ConfigurationError
from helix_dbos.settings import EnvSettings, from_environ, variables
from tests.conftest import one_database

ROOT = Path(__file__).resolve().parents[2]
VAR = r"(?:HELIX_DBOS|DBOS_)_[A-Z0-9_]+"


def _settings_table() -> dict[str, tuple[str, str]]:
    """The first table of the "## Settings" section: variable -> (default, meaning)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| setting |"))
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        names = re.findall(rf"`({VAR})`", cells[0])
        assert len(names) == 1, f"a settings row names one variable: {line}"
        assert names[0] not in rows, f"{names[0]} has two rows"
        rows[names[0]] = (cells[1], cells[2])
    return rows


def test_the_settings_table_is_the_settings_object() -> None:
    rows, code = _settings_table(), variables()
    assert len(code) == len(fields(EnvSettings)) > 25  # one variable per field, and they were all seen
    assert sorted(set(code) - set(rows)) == [], "fields without a row in docs/operations.md"
    assert sorted(set(rows) - set(code)) == [], "rows that are no field of EnvSettings"
    for name, (_field, default, meaning) in code.items():
        doc_default, doc_meaning = rows[name]
        assert doc_default == default, (name, doc_default, default)
        assert doc_meaning.startswith(meaning), (name, doc_meaning, meaning)
        assert len(meaning) > 10, (name, meaning)


def test_the_table_check_sees_a_changed_default() -> None:
    """The check compares what the class says: a default changed in code no longer matches its row."""
    rows = _settings_table()
    assert rows["HELIX_DBOS_RECOVERY_POLL"][0] == settings.default_text(settings.DEFAULT_RECOVERY_POLL) == "3 s"
    assert settings.default_text(1.0) != rows["HELIX_DBOS_RECOVERY_POLL"][0]


def test_every_variable_the_package_names_is_documented() -> None:
    read = set()
    for path in (ROOT / "helix_dbos").rglob("*.py"):
        read |= set(re.findall(r"\"(HELIX_DBOS_[A-Z0-9_]+)\"", path.read_text()))
    documented = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    assert len(read) > 15  # the scan saw them
    assert sorted(v for v in read if v not in documented) == []


#: Modules allowed to read the environment, and why. ``settings.py`` is the one reader of helix's
#: variables; the examples are an app built on the runtime, reading their own demo knobs as a user's
#: app would. Anything else may read only a variable that is not helix's or DBOS's, by its literal name.
READERS = {"helix_dbos/settings.py", "helix_dbos/examples/"}
#: Reads whose key is not a literal, each with its reason: dbos-config.yaml's ``${VAR}`` names any variable.
DYNAMIC = {("helix_dbos/runtime/process/config.py", "_substitute")}


def _environ_reads(tree: ast.AST) -> list[tuple[str, ast.expr | None]]:
    """(enclosing function, key) of every read of ``os.environ`` / ``os.getenv`` (writes excluded)."""
    found: list[tuple[str, ast.expr | None]] = []

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func
            if (target.attr in ("get", "pop", "setdefault") and is_environ(target.value)) or target.attr == "getenv":
                found.append((func, node.args[0] if node.args else None))
        if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            found.append((func, node.slice))
        if isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            found.append((func, node.left))
        if isinstance(node, ast.keyword) and node.arg == "envvar":  # typer/click reading a variable itself
            found.append((func, node.value))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "<module>")
    return found


def environ_reads_outside_settings() -> list[str]:
    bad = []
    for path in sorted((ROOT / "helix_dbos").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == r or (r.endswith("/") and rel.startswith(r)) for r in READERS):
            continue
        for func, key in _environ_reads(ast.parse(path.read_text())):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                if re.fullmatch(VAR, key.value):
                    bad.append(f"{rel}:{func} reads {key.value}")
            elif (rel, func) not in DYNAMIC:
                bad.append(f"{rel}:{func} reads a variable by a computed name")
    return bad


def test_no_module_but_settings_reads_a_helix_variable() -> None:
    assert environ_reads_outside_settings() == []


def test_the_reader_scan_finds_a_read() -> None:
    tree = ast.parse(
        "import os\ndef f():\n    a = os.environ.get('HELIX_DBOS_X')\n    b = os.environ['DBOS__VMID']\n    c = os.getenv(NAME)\n"
        "    os.environ['HELIX_DBOS_Y'] = '1'\n    d = 'HELIX_DBOS_Z' in os.environ\n"
    )
    keys = [ast.unparse(k) if k is not None else None for _, k in _environ_reads(tree)]
    assert keys == ["'HELIX_DBOS_X'", "'DBOS__VMID'", "NAME", "'HELIX_DBOS_Z'"]  # the write is not a read


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HELIX_DBOS_LEASE_RENEW", "abc"),
        ("HELIX_DBOS_TAKEOVER_AFTER", "0.1"),
        ("HELIX_DBOS_RECOVERY_POLL", "soon"),
        ("HELIX_DBOS_STORE_RETRY_WINDOW", "inf"),
        ("HELIX_DBOS_COMPANION_IDLE_SECONDS", "0"),
        ("HELIX_DBOS_LIVE_OUTPUT", "maybe"),
        ("HELIX_DBOS_MODE", "server"),
        ("HELIX_DBOS_PORT", "70000"),
        ("HELIX_DBOS_HTTP_THREADS", "many"),
        ("HELIX_DBOS_SSE_POLL_SEC", "-1"),
    ],
)
def test_a_bad_value_is_a_configuration_error_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        from_environ({name: value})


def test_values_parse_and_unset_or_empty_is_the_default() -> None:
    got = from_environ({
        "HELIX_DBOS_LEASE_RENEW": "2.5", "HELIX_DBOS_MODE": "worker", "HELIX_DBOS_LIVE_OUTPUT": "yes",
        "HELIX_DBOS_ALLOWED_HOSTS": "a.example, b.example,", "HELIX_DBOS_RECOVERY_POLL": "", "PORT": "9000",
    })
    assert (got.lease_renew, got.mode, got.live_output, got.allowed_hosts) == (2.5, "worker", True, ("a.example", "b.example"))
    assert got.recovery_poll == settings.DEFAULT_RECOVERY_POLL and got.port == 9000  # empty: the default; PORT: the fallback
    assert from_environ({}) == EnvSettings()


@one_database  # the setting is refused before the database is opened
def test_a_bad_value_refuses_the_launch_typed(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HELIX_DBOS_LEASE_RENEW=abc`` refuses the runtime before anything is launched, naming the
    variable; the same runtime launches once the value is fixed (nothing half-launched was left)."""
    from pydantic_ai.models.test import TestModel

    import helix_dbos as hx

    monkeypatch.setenv("HELIX_DBOS_LEASE_RENEW", "abc")
    with pytest.raises(ConfigurationError, match="HELIX_DBOS_LEASE_RENEW"):
        hx.Runtime([hx.Agent("a", TestModel())], database_url=db_url)
    monkeypatch.setenv("HELIX_DBOS_LEASE_RENEW", "5")
    rt = hx.Runtime([hx.Agent("a", TestModel())], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("HELIX_DBOS_LEASE_RENEW", "abc")  # set between construction and launch
    with pytest.raises(ConfigurationError, match="HELIX_DBOS_LEASE_RENEW"):
        rt.launch()
    monkeypatch.setenv("HELIX_DBOS_LEASE_RENEW", "5")
    with rt:
        assert rt._launched is not None and rt._launched.environment.lease_renew == 5.0


#: Where a process starts, the only places the environment is read (everything below is handed it).
EDGES = {
    "helix_dbos/settings.py",  # defines from_environ
    "helix_dbos/runtime/face/runtime.py",  # Runtime's construction and launch
    "helix_dbos/loader.py",  # which app the service and the CLI load
    "helix_dbos/cli/common.py", "helix_dbos/cli/serving.py", "helix_dbos/cli/demo.py",  # a CLI command's start
    "helix_dbos/service/app.py", "helix_dbos/service/__main__.py", "helix_dbos/service/settings.py",  # the service's factory
}


def test_the_environment_is_read_at_the_edges_only() -> None:
    """``from_environ()`` is called where a process starts and nowhere under it (the resolvers in
    ``runtime/process/config.py``, the executor lock and the trace exporter are handed what a launch
    read); and nothing in the package writes ``os.environ`` to hand a setting on (the CLI passes
    arguments)."""
    readers, writers = set(), set()
    for path in sorted((ROOT / "helix_dbos").rglob("*.py")):
        tree = ast.parse(path.read_text())
        name = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "from_environ":
                readers.add(name)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ" for t in node.targets):
                writers.add(name)
    assert readers and readers <= EDGES, sorted(readers - EDGES)
    assert writers == set(), sorted(writers)
