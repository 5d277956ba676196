"""What the numbers were measured on: they mean nothing without the machine and the versions."""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform
import subprocess
import sys
from typing import Any

import sqlalchemy as sa


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def _meminfo_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return float("nan")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=os.path.dirname(__file__), check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "helix_dbos"], capture_output=True, text=True, timeout=5, cwd=os.path.dirname(__file__), check=False).stdout.strip()
        return f"{rev}{' + uncommitted helix_dbos changes' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return "?"


def postgres_version(url: str) -> str:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SHOW server_version")).scalar())
    except Exception as exc:  # noqa: BLE001 - the report says why instead of failing the whole bench
        return f"unreachable ({type(exc).__name__})"
    finally:
        engine.dispose()


def describe(pg_url: str | None) -> dict[str, Any]:
    import sqlite3

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(_meminfo_gib(), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "dbos": _version("dbos"),
        "pydantic-ai-slim": _version("pydantic-ai-slim"),
        "sqlalchemy": _version("sqlalchemy"),
        "psycopg": _version("psycopg"),
        "sqlite": sqlite3.sqlite_version,
        "postgres": postgres_version(pg_url) if pg_url else "not used",
        "helix_dbos": f"{_version('helix-dbos')} (git {_git_rev()})",
        "load_at_start": " ".join(f"{x:.2f}" for x in load),
    }
