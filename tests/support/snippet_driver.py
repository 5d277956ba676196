"""The interpreter a docs page's Python blocks run in, one per page, as a reader pasting them in order
into one ``python`` session would: each block sees what the earlier ones defined.

Run as a script by tests/support/snippets.py (stdlib only: it must not import the test package or
anything the blocks do not). One JSON request a line on stdin, one JSON answer a line written to the
request's ``result`` file (stdout and stderr belong to the blocks):

- ``{"op": "exec", "code", "page", "line", "result"}``: run the block; tracebacks name the page and
  the page's own line numbers.
- ``{"op": "check", "code", "page", "line", "result"}``: compile it, import what it imports, and
  report the names it reads that neither it, the blocks before it nor the builtins define.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import importlib
import inspect
import json
import os
import symtable
import sys
import traceback
from typing import Any

NAMESPACE: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def _source(request: dict[str, Any]) -> str:
    """The block, shifted to its line in the page so a traceback's line is the page's."""
    return "\n" * int(request["line"]) + str(request["code"])


def _exec(request: dict[str, Any]) -> dict[str, Any]:
    try:
        code = compile(_source(request), request["page"], "exec", flags=FLAGS)
        result = eval(code, NAMESPACE)  # the docs' own block, run as the reader runs it
        if inspect.iscoroutine(result):  # a block with a top-level await, as an asyncio REPL runs it
            asyncio.run(result)
    except BaseException:  # noqa: BLE001  (a SystemExit or KeyboardInterrupt from a block is its failure too)
        return {"ok": False, "error": traceback.format_exc()}
    return {"ok": True}


def _free_names(source: str, page: str) -> set[str]:
    """Names the block reads as globals and never binds itself (symtable: the compiler's own scopes)."""
    top = symtable.symtable(source, page, "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        for sym in table.get_symbols():
            if sym.is_referenced() and sym.is_global():
                read.add(sym.get_name())
        tables.extend(table.get_children())
    return read - bound - set(dir(builtins))


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _check(request: dict[str, Any]) -> dict[str, Any]:
    source = _source(request)
    try:
        tree = compile(source, request["page"], "exec", flags=FLAGS | ast.PyCF_ONLY_AST)
        compile(tree, request["page"], "exec", flags=FLAGS)
    except SyntaxError:
        return {"ok": False, "error": traceback.format_exc()}
    unresolved = []
    for module in _imports(tree):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001  (any failure to import is "does not resolve")
            unresolved.append(f"{module} ({type(exc).__name__}: {exc})")
    # symtable refuses a top-level await outside a function: read the names of the block as a coroutine's body
    try:
        free = _free_names(source, request["page"])
    except SyntaxError:
        wrapped = "async def __snippet__():\n" + "\n".join("    " + ln for ln in source.splitlines())
        free = _free_names(wrapped, request["page"]) - {"__snippet__"}
    free -= set(NAMESPACE)
    return {"ok": True, "free": sorted(free), "unresolved": unresolved}


def main() -> None:
    sys.path[0] = ""  # as the interactive interpreter: modules the page wrote in its directory import
    for raw in sys.stdin:
        request = json.loads(raw)
        answer = _exec(request) if request["op"] == "exec" else _check(request)
        sys.stdout.flush()
        sys.stderr.flush()
        with open(request["result"] + ".tmp", "w") as out:
            json.dump(answer, out)
        os.replace(request["result"] + ".tmp", request["result"])  # whole, never half-written


if __name__ == "__main__":
    main()
