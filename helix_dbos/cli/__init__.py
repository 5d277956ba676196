"""The ``helix-dbos`` command: demo, inspect and operate sessions over the ledger (Typer + Rich)."""
