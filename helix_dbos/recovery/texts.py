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

PAIRING_TEXTS: Final = {
    "outcome_unknown": OUTCOME_UNKNOWN,
    "replay_limit_reached": REPLAY_LIMIT_REACHED,
    "not_started": NOT_STARTED,
    "run_stopped": RUN_STOPPED,
    "denied": DENIED,
}
