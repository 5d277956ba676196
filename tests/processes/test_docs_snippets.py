"""Every fenced block of README.md and docs/*.md, run by tests/support/snippets.py as a reader who
pastes them in order into a fresh directory would: one test per page, on SQLite (the database the
pages use as printed), and on Postgres too for a page that holds SQL (``_databases``).

A block that cannot run as printed carries a marker saying why (``<!-- snippet: output -->``, ...;
the vocabulary and what each is checked for are in tests/support/snippets.py), so a page added
without markers fails here naming the block until it runs or says why it cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import sqlite_copy_of_template
from tests.support import snippets


def _databases(page: str) -> tuple[str, ...]:
    """Where a page is run: on SQLite, the database its commands use as printed, and on Postgres too
    when it holds SQL, which a reader runs against either database and which differs between them
    (schemas, ``-- postgres`` blocks). A page's commands and Python run the same runtime, service
    and CLI paths that tests/runtime and tests/processes run on both databases; on Postgres they
    would prove only that the page's setting of ``HELIX_DBOS_DATABASE_URL`` is read."""
    return ("sqlite", "postgres") if any(b.lang == "sql" for b in snippets.blocks(page)) else ("sqlite",)


def _pages() -> list[object]:
    """(page, database) pairs; a page whose blocks kill a process (a fault point) is a ``kills``
    test, as the others are."""
    out: list[object] = []
    for page in snippets.pages():
        crashes = any("HELIX_DBOS_CRASH_AT=" in b.text and not b.markers for b in snippets.blocks(page))
        out += [pytest.param(page, db, id=f"{page}-{db}", marks=[pytest.mark.kills] if crashes else []) for db in _databases(page)]
    return out


@pytest.mark.parametrize(("page", "db_url"), _pages(), indirect=["db_url"])
def test_every_block_of_the_page_runs_as_printed(page: str, db_url: str, tmp_path: Path) -> None:
    workdir = tmp_path / "reader"
    workdir.mkdir()
    run = snippets.PageRun(page, workdir, None if db_url.startswith("sqlite") else db_url, sqlite_copy_of_template)
    done = run.run()
    print("\n".join(done))  # noqa: T201  (what ran, with -s or in the report)
    assert len(done) >= len(run.blocks)  # every block was run or checked


def test_pages_are_found_by_globbing_and_blocks_in_page_order() -> None:
    pages = snippets.pages()
    assert pages[0] == "README.md" and "docs/audit.md" in pages
    assert not any(p.startswith("docs/design/") for p in pages)
    readme = snippets.blocks("README.md")
    assert [b.line for b in readme] == sorted(b.line for b in readme)
    assert next(b for b in readme if b.file == "example.py").lang == "python"


def test_an_unknown_marker_is_refused() -> None:
    with pytest.raises(snippets.SnippetError, match="unknown snippet marker"):
        snippets.Marker.parse("outptu", "x.md:1")


F = "```"
SERVER = """# srv.py
import http.server, os
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(os.environ["HELIX_DBOS_PORT"])), Health).serve_forever()
"""
#: Small pages and what the harness must say about them: each rule of tests/support/snippets.py
#: would let a wrong page through if it broke.
RULES = {
    "an unmarked command that fails names its page line": (f"# p\n\n{F}bash\ntrue\nfalse   # no\n{F}\n", r"page\.md:5: `false   # no` exited 1, expected 0"),
    "a command's exit status is what its comment says": (f"{F}bash\nbash -c 'exit 3'   # exits 3\n{F}\n", None),
    "python blocks share one interpreter": (f"{F}python\nx = 41\n{F}\n\n{F}python\nassert x + 1 == 42\n{F}\n", None),
    "a failing python block names the page's line": (f"{F}python\nx = 1\nraise SystemExit(x)\n{F}\n", r'File "page\.md", line 3'),
    "a file block is written and imports from the page's directory": (
        f"{F}python\n# pkg/mod.py\nVALUE = 7\n{F}\n\n{F}python\nfrom pkg.mod import VALUE\nassert VALUE == 7\n{F}\n", None),
    "a file named by its paragraph is written": (f"Save this as `conf.yaml`:\n\n{F}yaml\na: 1\n{F}\n\n{F}bash\ngrep -q 'a: 1' conf.yaml\n{F}\n", None),
    "an unmarked block that is neither code nor a file is refused": (f"{F}yaml\na: 1\n{F}\n", r"page\.md:1: a ```yaml block that names no file"),
    "output is never a command": (f"<!-- snippet: output -->\n{F}console\n$ rm -rf /\n{F}\n", r"marked as output, but it has a `\$` prompt"),
    "JSON output parses": (f"<!-- snippet: output -->\n{F}json\n{{\"a\": 1,}}\n{F}\n", r"marked as JSON output, which does not parse"),
    "a synopsis's flags are the command's": (f"<!-- snippet: synopsis -->\n{F}console\n$ helix-dbos calls [--no-such-flag]\n{F}\n", r"shows \['--no-such-flag'\], which `helix-dbos calls --help` does not list"),
    "a synopsis's programs exist": (f"<!-- snippet: synopsis -->\n{F}bash\nno-such-program --x\n{F}\n", r"runs 'no-such-program', which is not installed"),
    "a clone's extras are pyproject's": (f"<!-- snippet: in a clone -->\n{F}\npip install -e '.[test,nosuch]'\n{F}\n", r"installs extras \['nosuch'\]"),
    "a fragment's undefined names are the ones it gives": (f"<!-- snippet: fragment, given a -->\n{F}python\nprint(a, b)\n{F}\n", r"reads \['a', 'b'\] undefined, its marker gives \['a'\]"),
    "a fragment's imports resolve": (f"<!-- snippet: fragment -->\n{F}python\nimport no_such_module_here\n{F}\n", r"imports that do not resolve"),
    "a fragment may await at the top level": (f"<!-- snippet: fragment, given rt -->\n{F}python\nr = await rt.go()\n{F}\n", None),
    "a python block that needs something names the module it lacks": (
        f"<!-- snippet: needs OTHER_KEY -->\n{F}python\nimport no_such_sdk\n{F}\n", r"imports that do not resolve: .*no_such_sdk \(ModuleNotFoundError"),
    "a python block that needs something reads no undefined name": (f"<!-- snippet: needs no_such_sdk -->\n{F}python\nimport no_such_sdk\nprint(y)\n{F}\n", r"reads names nothing defines: \['y'\]"),
    "a command that needs something is refused without it": (f"<!-- snippet: needs FOO_KEY -->\n{F}bash\ntrue\n{F}\n", r"marked as needing FOO_KEY, but `true` exited 0"),
    "a comment ending in ... is what the command prints": (f"{F}bash\necho 'one two'   # one tw...\n{F}\n", None),
    "a command that prints otherwise than its comment shows fails": (f"{F}bash\necho 'one two'   # two...\n{F}\n", r"printed no line starting 'two'"),
    "a server serves the page's later blocks on the page's port and stops on Ctrl-C": (
        f"{F}python\n{SERVER}{F}\n\n<!-- snippet: server -->\n{F}console\n$ python srv.py\n{F}\n\n"
        f"{F}console\n$ curl -sf localhost:8000/healthz   # ok...\n{F}\n", None),
    "a server that exits before the page is done with it fails": (
        f"<!-- snippet: server -->\n{F}bash\npython -c 'raise SystemExit(3)'\n{F}\n", r"the server `python -c 'raise SystemExit\(3\)'` exited 3"),
    "an export sets the page's environment": (f"{F}console\n$ export GREETING=hi   # for what follows\n$ test \"$GREETING\" = hi\n{F}\n", None),
}


@pytest.mark.parametrize("name", list(RULES))
def test_the_harness_rule(name: str, tmp_path: Path) -> None:
    text, error = RULES[name]
    (tmp_path / "page.md").write_text(text)
    workdir = tmp_path / "reader"
    workdir.mkdir()
    run = snippets.PageRun("page.md", workdir, None, sqlite_copy_of_template, root=tmp_path)
    if error is None:
        run.run()
    else:
        with pytest.raises(snippets.SnippetError, match=error):
            run.run()
