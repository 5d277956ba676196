"""Every fenced block of README.md and docs/*.md, run by tests/support/snippets.py as a reader who
pastes them in order into a fresh directory would, on SQLite and on Postgres: one test per page.

A block that cannot run as printed carries a marker saying why (``<!-- snippet: output -->``, ...;
the vocabulary and what each is checked for are in tests/support/snippets.py), so a page added
without markers fails here naming the block until it runs or says why it cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import sqlite_copy_of_template
from tests.support import snippets


def _page(page: str) -> object:
    """A page whose blocks kill a process (a fault point) is a ``kills`` test, as the others are."""
    crashes = any("HELIX_DBOS_CRASH_AT=" in b.text and not b.markers for b in snippets.blocks(page))
    return pytest.param(page, id=page, marks=[pytest.mark.kills] if crashes else [])


@pytest.mark.parametrize("page", [_page(p) for p in snippets.pages()])
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
