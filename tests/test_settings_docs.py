"""docs/operations.md's settings table against the code, so the docs cannot drift from it again
(its ``HELIX_DBOS_RECOVERY_POLL`` default once did): each ``HELIX_DBOS_*`` row's default is the
code's constant and says what it does, and every ``HELIX_DBOS_*`` variable the package reads is
documented (docs/ or the README)."""

from __future__ import annotations

import re
from pathlib import Path

from helix_dbos.runtime.process import config, executor_lock, leases

ROOT = Path(__file__).resolve().parent.parent
#: The table's variables and the constants their defaults are.
DEFAULTS = {
    "HELIX_DBOS_TAKEOVER_AFTER": executor_lock.DEFAULT_LEASE,
    "HELIX_DBOS_LEASE_RENEW": leases.DEFAULT_RENEW_INTERVAL,
    "HELIX_DBOS_RECOVERY_POLL": config.DEFAULT_RECOVERY_POLL,
    "HELIX_DBOS_STORE_RETRY_WINDOW": config.DEFAULT_STORE_RETRY_WINDOW,
}


def _settings_table() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`(HELIX_DBOS_[A-Z_]+)`", cells[0]) if len(cells) == 3 else []
        for name in names:
            rows[name] = (cells[1], cells[2])
    return rows


def test_the_settings_table_gives_the_codes_defaults_and_meanings() -> None:
    rows = _settings_table()
    assert set(DEFAULTS) <= set(rows), sorted(set(DEFAULTS) - set(rows))
    for name, value in DEFAULTS.items():
        default, meaning = rows[name]
        number = re.match(r"([0-9.]+) s\b", default)
        assert number is not None and float(number.group(1)) == value, (name, default, value)
        assert len(meaning) > 20, (name, meaning)


def test_every_variable_the_package_reads_is_documented() -> None:
    read = set()
    for path in (ROOT / "helix_dbos").rglob("*.py"):
        read |= set(re.findall(r"\"(HELIX_DBOS_[A-Z0-9_]+)\"", path.read_text()))
    documented = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    assert len(read) > 15  # the scan saw them
    assert sorted(v for v in read if v not in documented) == []
