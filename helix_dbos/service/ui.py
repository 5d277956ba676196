"""The operator's page at ``/ui`` (filled in below)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

STATIC = "/ui/static"
router = APIRouter(include_in_schema=False)


def static_dir() -> str:
    return str(Path(__file__).with_name("static"))
