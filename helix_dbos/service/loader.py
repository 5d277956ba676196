"""Moved to ``helix_dbos/loader.py`` (the CLI loads the app too, and imports nothing from the service)."""

from __future__ import annotations

from ..loader import DEFAULT_APP, ENV, app_spec, load_runtime

__all__ = ["DEFAULT_APP", "ENV", "app_spec", "load_runtime"]
