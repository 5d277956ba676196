"""Internal: the durable-transaction floor: every ledger transaction a run makes, and the fence they all pass.

The registry a launch hands down, ``tx`` and its retry, the fence, the attempt gate, the step
commits, the pairings, group commit, and the typed records they answer. Of the runtime's layers it
imports only ``process``; never the run's flow above it. The public surface is ``helix_dbos``'s ``__all__``.
"""

__all__: list[str] = []
