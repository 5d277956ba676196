"""What a reader may touch: every package and top-level module of ``helix_dbos`` says whether it is
public (documented for users) or internal, as httpx and pydantic-ai mark theirs.

The public surface is ``helix_dbos``'s ``__all__`` (``import helix_dbos as hx``), the typed errors
(``helix_dbos.errors``), the service (``python -m helix_dbos.service``) and the bundled examples
(``HELIX_DBOS_APP=helix_dbos.examples:runtime``). Everything else opens its docstring with
``Internal:``, and an internal package declares its ``__all__`` (empty unless the layers above
import names from the package itself). The docs tell users to import public names only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "helix_dbos"
#: The documented-public packages and modules, each with a page that documents it for users.
PUBLIC = {
    "helix_dbos": "README.md",
    "helix_dbos.errors": "README.md",
    "helix_dbos.service": "docs/service.md",
    "helix_dbos.examples": "docs/service.md",
}


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _units() -> dict[str, Path]:
    """Every package of ``helix_dbos`` and every module at its top level (a module inside a package
    is as public as the package says)."""
    units = {_name(init): init for init in PACKAGE.rglob("__init__.py")}
    units.update({_name(module): module for module in PACKAGE.glob("*.py") if module.name != "__init__.py"})
    return units


def _declared(path: Path) -> tuple[str, list[str] | None]:
    """The docstring's opening word and the ``__all__`` the module assigns (None: it assigns none)."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    exported = None
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            exported = ast.literal_eval(node.value)
    return doc.split(":", 1)[0] if ":" in doc.split("\n", 1)[0] else "", exported


def undeclared(units: dict[str, Path]) -> list[str]:
    out = []
    for name, path in sorted(units.items()):
        word, exported = _declared(path)
        if name == "helix_dbos":
            continue  # the surface itself: its ``__all__`` is what every other unit points to
        if name in PUBLIC:
            if word != "Public":
                out.append(f"{name}: documented for users, but its docstring does not open with 'Public:'")
        elif word != "Internal":
            out.append(f"{name}: neither documented for users nor declared 'Internal:'")
        elif path.name == "__init__.py" and exported is None:
            out.append(f"{name}: an internal package without an __all__ of its own")
    return out


def test_every_package_and_top_level_module_is_public_or_declares_itself_internal() -> None:
    units = _units()
    assert {"helix_dbos.ledger", "helix_dbos.runtime.floor", "helix_dbos.cli", "helix_dbos.settings"} <= set(units)  # the scan saw them
    assert undeclared(units) == []
    for name in ("helix_dbos.cli", "helix_dbos.runtime.face", "helix_dbos.runtime.floor", "helix_dbos.runtime.flow", "helix_dbos.runtime.process"):
        assert _declared(units[name]) == ("Internal", [])  # nothing to import from the package itself


def test_the_check_finds_an_undeclared_package(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.py"
    quiet.write_text('"""Helpers."""\n')
    no_all = tmp_path / "__init__.py"
    no_all.write_text('"""Internal: helpers."""\n')
    assert undeclared({"helix_dbos.quiet": quiet, "helix_dbos.helpers": no_all}) == [
        "helix_dbos.helpers: an internal package without an __all__ of its own",
        "helix_dbos.quiet: neither documented for users nor declared 'Internal:'",
    ]


def test_the_public_units_are_documented_and_the_docs_import_only_them() -> None:
    pages = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    for name, page in PUBLIC.items():
        assert name in pages[ROOT / page], f"{name} is public but {page} never names it"
    imports = {
        (page.name, module)
        for page, text in pages.items()
        for module in re.findall(r"^\s*(?:from|import)\s+(helix_dbos(?:\.\w+)*)", text, re.MULTILINE)
    }
    assert imports  # the scan saw the README's imports
    assert sorted((page, module) for page, module in imports if module not in PUBLIC) == []
