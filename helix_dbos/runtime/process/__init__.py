"""Internal: the process: what one launched Python process holds and polls, beneath any run.

Settings, DBOS's private door, the executor-id lock, leases and takeovers, the pollers, fault
injection and tracing. Imports nothing from the other runtime groups. The public surface is
``helix_dbos``'s ``__all__``: import from ``helix_dbos`` instead.
"""

__all__: list[str] = []
