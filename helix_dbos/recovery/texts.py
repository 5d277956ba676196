"""The words the model reads when recovery answers a call for it.

The first two are the contract's own sentences, verbatim; the others say more where this runtime
knows more (never less).
"""

from __future__ import annotations

from typing import Final

OUTCOME_UNKNOWN: Final = "the tool may have run. Check whether it took effect before repeating it"
REPLAY_LIMIT_REACHED: Final = "It will not be run again automatically"
NOT_STARTED: Final = "it did not run"
RUN_STOPPED: Final = "the run was stopped before this call finished; it was not completed"
DENIED: Final = "the call was denied"
ORDERED_AFTER_DOUBT: Final = (
    " It did not start: it was ordered after a call whose outcome is unknown."
)
NOT_COMMITTED: Final = "it did not take effect: it ran inside a database transaction that never committed"
CHECKED_NOT_APPLIED: Final = "it did not take effect: the outside system reports it was not applied"
NOT_RUN_AGAIN_ORDERED: Final = " It was not run again: it was ordered after a call whose outcome is unknown."
NOT_RUN_AGAIN_SCHEMA: Final = " It was not run again: its saved arguments fail the tool's current schema."
NOT_RUN_AGAIN_REMOVED: Final = " It was not run again: the tool is no longer defined."
REPLAY_LIMIT_NOTHING_COMMITTED: Final = (
    REPLAY_LIMIT_REACHED + ". Nothing took effect: none of its attempts committed its database transaction."
)
REPLAY_LIMIT_NOT_APPLIED: Final = (
    REPLAY_LIMIT_REACHED + ". Nothing took effect: the outside system reports no attempt was applied."
)
#: A transactional body that committed its database transaction itself (through the driver's
#: connection): its effect may exist apart from any result. The code first, so a model (or a person)
#: reading it can tell it from a call that merely died.
TRANSACTION_ESCAPED: Final = (
    "transaction_escaped: the tool's body committed its database transaction itself, apart from its result, so "
    + OUTCOME_UNKNOWN + ". " + REPLAY_LIMIT_REACHED
)

PAIRING_TEXTS: Final = {
    "outcome_unknown": OUTCOME_UNKNOWN,
    "replay_limit_reached": REPLAY_LIMIT_REACHED,
    "not_started": NOT_STARTED,
    "run_stopped": RUN_STOPPED,
    "denied": DENIED,
}
