"""Bring the ledger's tables to the newest revision (idempotent, safe to call from every launch)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config


def migrations_dir() -> Path:
    """The Alembic scripts: top-level ``migrations/`` in a checkout, ``_migrations`` in a wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("helix_dbos migrations not found (expected migrations/env.py)")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation would choke on '%' in passwords.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)
