"""Internal: the runtime's face: ``Runtime``, its entries (the run-start gate), and the one ``Reader``.

What users, the service and the CLI call. The names users need are re-exported by
``helix_dbos``; the modules here are internal: the public surface is ``helix_dbos``'s ``__all__``.
"""

__all__: list[str] = []
