"""Internal: the ``helix-dbos`` command (demo, inspect and operate sessions over the ledger; Typer + Rich).

Its surface is the command line (docs/cli.md), not these modules; the public surface is ``helix_dbos``'s ``__all__``.
"""

__all__: list[str] = []
