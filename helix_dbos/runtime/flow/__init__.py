"""Internal: a run's flow: the workflow and the kinds of work it orders over the floor.

The model request and its planning, call bodies (plain, transactional, local sub-agents),
reconcile checks, remote children, companions, live output. Imports ``process`` and ``floor``;
never the runtime's face. The public surface is ``helix_dbos``'s ``__all__``.
"""

__all__: list[str] = []
