"""Internal: recovery: what to do with each call of a saved step. Pure; the runtime does the I/O.

``__all__`` names what the runtime imports from the package; the public surface is ``helix_dbos``'s ``__all__`` (docs/recovery.md describes the rules).
"""

from .decide import MAX_BODIES, Decision, Entry, Profile, SavedCall, ToolNow, decide
from .lanes import lanes
from .texts import NOT_STARTED, OUTCOME_UNKNOWN, PAIRING_TEXTS, REPLAY_LIMIT_REACHED, RUN_STOPPED

__all__ = [
    "MAX_BODIES",
    "NOT_STARTED",
    "OUTCOME_UNKNOWN",
    "PAIRING_TEXTS",
    "REPLAY_LIMIT_REACHED",
    "RUN_STOPPED",
    "Decision",
    "Entry",
    "Profile",
    "SavedCall",
    "ToolNow",
    "decide",
    "lanes",
]
