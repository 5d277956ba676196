"""The tree's import graph: no circles anywhere (bench included), the CLI never reaches the service,
the runtime's four layers import only downwards: process -> floor -> flow -> face, and the agent
SDK adapters sit beside definitions, reached by the runtime only through the seam.

Read from the source, not from a run: every import counts, also one inside a function (a circle
hidden in a function is still a circle that decides import order) and one under ``TYPE_CHECKING``
(a circle the type checker needs is still one the reader has to hold in their head).
``from pkg import module`` is an edge to that module, not to the package.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("helix_dbos", "bench")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                graph[name].update(subs)
                if target in mods and len(subs) < len(node.names):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles_in_helix_dbos_or_bench() -> None:
    graph = import_graph()
    assert len(graph) > 80 and any(m.startswith("bench.") for m in graph)  # the scan saw both trees
    assert cycles(graph) == []


def test_the_scan_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cli_reaches_nothing_of_the_service() -> None:
    graph = import_graph()
    seen, todo = set(), [m for m in graph if m.startswith("helix_dbos.cli")]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    assert not {m for m in seen if m.startswith("helix_dbos.service")}


#: The runtime's layers, lowest first: each imports only those before it (docs/architecture.md).
LAYERS = ("process", "floor", "flow", "face")


def upward_edges(graph: dict[str, set[str]], layer: Callable[[str], int | None]) -> list[str]:
    """Every edge from a module to one of a higher ``layer`` (modules of no layer are not judged)."""
    out = []
    for m, deps in graph.items():
        mine = layer(m)
        if mine is None:
            continue
        out += [f"{m} -> {d}" for d in sorted(deps) if (theirs := layer(d)) is not None and theirs > mine]
    return sorted(out)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    def layer(module: str) -> int | None:
        parts = module.split(".")
        if parts[:2] != ["helix_dbos", "runtime"]:
            return None
        if len(parts) == 2:
            return len(LAYERS)  # the runtime package's public face (helix_dbos/runtime/__init__.py)
        return LAYERS.index(parts[2]) if parts[2] in LAYERS else None

    return upward_edges(graph, layer)


def test_the_runtime_layers_import_only_downwards() -> None:
    graph = import_graph()
    assert {m.split(".")[2] for m in graph if m.startswith("helix_dbos.runtime.") and m.count(".") >= 3} == set(LAYERS)
    assert layer_violations(graph) == []


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"helix_dbos.runtime.floor.commits": {"helix_dbos.runtime.flow.reconcile"}, "helix_dbos.runtime.flow.reconcile": set()}
    assert layer_violations(graph) == ["helix_dbos.runtime.floor.commits -> helix_dbos.runtime.flow.reconcile"]


def test_type_checking_imports_count() -> None:
    """A circle closed only under ``TYPE_CHECKING`` (executor_lock -> state -> registry once) is found."""
    graph = import_graph()
    assert "helix_dbos.runtime.process.executor_lock" in graph["helix_dbos.runtime.floor.registry"]  # a TYPE_CHECKING-only edge


#: The package's layers under the runtime, lowest first: each imports only those before it, and the
#: runtime only these (docs/architecture.md). The ledger is the floor of the whole tree: a type it
#: stores (a tool's replay policy, say) is defined in it and imported from it by the layers above.
PACKAGE_LAYERS = ("ledger", "recovery", "definitions", "runtime")


def package_violations(graph: dict[str, set[str]]) -> list[str]:
    def layer(module: str) -> int | None:
        parts = module.split(".")
        if parts[0] != "helix_dbos" or len(parts) < 2 or parts[1] not in PACKAGE_LAYERS:
            return None
        return PACKAGE_LAYERS.index(parts[1])

    return upward_edges(graph, layer)


def test_the_packages_import_only_downwards() -> None:
    graph = import_graph()
    assert {m.split(".")[1] for m in graph if m.startswith("helix_dbos.") and m.count(".") >= 2} >= set(PACKAGE_LAYERS)
    assert package_violations(graph) == []


def test_no_ledger_module_imports_definitions() -> None:
    """Also under ``TYPE_CHECKING``: a type the ledger stores is the ledger's own."""
    graph = import_graph()
    ledger = {m: deps for m, deps in graph.items() if m == "helix_dbos.ledger" or m.startswith("helix_dbos.ledger.")}
    assert len(ledger) > 20
    assert {f"{m} -> {d}" for m, deps in ledger.items() for d in deps if d.split(".")[:2] == ["helix_dbos", "definitions"]} == set()


def test_the_package_check_finds_an_upward_import() -> None:
    graph = {"helix_dbos.ledger.records": {"helix_dbos.definitions.tools"}, "helix_dbos.definitions.tools": {"helix_dbos.ledger.statuses"}}
    assert package_violations(graph) == ["helix_dbos.ledger.records -> helix_dbos.definitions.tools"]


#: What the runtime may import of ``helix_dbos.adapters``: the registry and the seam, never one SDK's
#: adapter (a new SDK then needs no runtime edit).
ADAPTER_SEAM = {"helix_dbos.adapters", "helix_dbos.adapters.registry", "helix_dbos.adapters.base"}


def adapter_violations(graph: dict[str, set[str]]) -> list[str]:
    """Adapters sit beside definitions: they import definitions, ledger, recovery and errors, never the
    runtime, service or CLI; nothing below them (definitions, ledger, recovery) imports them; the
    runtime reaches them only through ``ADAPTER_SEAM``."""
    adapters = {m for m in graph if m == "helix_dbos.adapters" or m.startswith("helix_dbos.adapters.")}
    above = ("helix_dbos.runtime", "helix_dbos.service", "helix_dbos.cli")
    below = ("helix_dbos.definitions", "helix_dbos.ledger", "helix_dbos.recovery")
    out = [f"{m} -> {d}" for m in adapters for d in graph[m] if d.startswith(above)]
    out += [f"{m} -> {d}" for m in graph if m.startswith(below) for d in graph[m] if d in adapters]
    out += [f"{m} -> {d}" for m in graph if m.startswith("helix_dbos.runtime") for d in graph[m] if d in adapters - ADAPTER_SEAM]
    return sorted(out)


def test_adapters_sit_beside_definitions_and_the_runtime_sees_only_the_seam() -> None:
    graph = import_graph()
    assert "helix_dbos.adapters.pydantic_ai.agent" in graph and "helix_dbos.adapters.registry" in graph["helix_dbos.runtime.face.agents"]
    assert adapter_violations(graph) == []


def test_the_adapter_check_finds_each_wrong_edge() -> None:
    graph: dict[str, set[str]] = {
        "helix_dbos.adapters.pydantic_ai.agent": {"helix_dbos.runtime.flow.planning"},
        "helix_dbos.definitions.agents": {"helix_dbos.adapters.base"},
        "helix_dbos.runtime.flow.model_request": {"helix_dbos.adapters.pydantic_ai.agent", "helix_dbos.adapters.base"},
        "helix_dbos.adapters.base": set(),
        "helix_dbos.runtime.flow.planning": set(),
    }
    assert adapter_violations(graph) == [
        "helix_dbos.adapters.pydantic_ai.agent -> helix_dbos.runtime.flow.planning",
        "helix_dbos.definitions.agents -> helix_dbos.adapters.base",
        "helix_dbos.runtime.flow.model_request -> helix_dbos.adapters.pydantic_ai.agent",
    ]
