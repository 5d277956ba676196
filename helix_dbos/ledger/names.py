"""Names the database keeps: each spelled once, here, because a restarted or upgraded process must
find again what an earlier one recorded under it.

DBOS records a workflow's name and resolves it by that name on recovery (a workflow recorded under
a name no function is registered as is never recovered); it records each step's name and refuses a
replay whose step names differ (``DBOSUnexpectedStepError``); it records the queue a workflow waits
on, its partition key, and the keys of its messages and streams. The ledger keys each exactly-once
transaction's output by the transaction's name (``tx_outputs``: ``<name>#<k>``, ``durable.tx``), so
a replay that spells a transaction differently runs it again. The rate table keys its buckets by
name, and every process takes the transactional bodies' Postgres advisory lock on one key.

So none of these is renamed by an edit: ``tests/runtime/test_persisted_names.py`` pins every value, and a
rename is a migration of the recorded rows. Span names are not data (nothing reads them back):
they are ``runtime/process/tracing.py``'s.
"""

from __future__ import annotations

from typing import Final

# --- DBOS workflows (``DBOS.workflow(name=...)``: recovery resolves a pending workflow by it) ----

#: A run's workflow; its id is the run id.
RUN_WORKFLOW: Final = "helix.run"
#: A companion session's long-lived workflow (``runtime/flow/companions.py``).
COMPANION_WORKFLOW: Final = "helix.companion"

# --- DBOS steps (a replay matches each recorded step by its name) -------------------------------

#: The model request as a DBOS step (live output only; otherwise a ledger transaction records it).
MODEL_STEP: Final = "helix.model"
#: One slice of a parent's wait for its child.
CHILD_WAIT_STEP: Final = "helix.child_wait"

# --- DBOS queues, messages and streams -----------------------------------------------------------

#: The runtime's own queue (children, companions, recovery's re-enqueues): ``Runtime(queue_name=)``'s default.
RUNS_QUEUE: Final = "helix_runs"
#: The queue entries wait on when enqueued; an agent with ``max_running`` gets ``helix_entries.<agent>``.
ENTRY_QUEUE: Final = "helix_entries"
#: The entry queues' partition of sessions without an owner (DBOS wants a key on every enqueue).
NO_OWNER_PARTITION: Final = "-"
#: The topic a parent sends a companion its next turn on.
TURN_TOPIC: Final = "helix.turn"
#: The DBOS stream a live run writes its output deltas to.
LIVE_STREAM: Final = "helix.live"

# --- Ledger transactions (``durable.tx``: the output is recorded as ``<name>#<k>``) ------------

#: An entry's preparation: its pairing of the calls it redirects, the run turned ``running``.
PREPARE_TX: Final = "helix.prepare"
#: A model reply's record (``durable.record_reply``).
REPLY_TX: Final = "helix.reply"
#: The append checkpoint of a step that starts bodies.
APPEND_TX: Final = "helix.append"
#: A step's commit (with or without bodies).
COMMIT_TX: Final = "helix.commit"
#: A run's failure.
FAIL_TX: Final = "helix.fail"
#: A run's stop.
STOP_TX: Final = "helix.stop"
#: The read of the calls a step saved, for their gates.
SAVED_CALLS_TX: Final = "helix.saved_calls"
#: A remote child's gate, and its outcome's write.
DELEGATE_TX: Final = "helix.delegate"
DELEGATE_RESULT_TX: Final = "helix.delegate_result"
#: A companion call's gate and result (in the parent), and a companion's turn (in the companion).
COMPANION_GATE_TX: Final = "helix.companion.gate"
COMPANION_RESULT_TX: Final = "helix.companion.result"
COMPANION_CLOSE_TX: Final = "helix.companion.close"
COMPANION_BEGIN_TX: Final = "helix.companion.begin"
COMPANION_END_TX: Final = "helix.companion.end"

# --- Other keys the database holds ---------------------------------------------------------------

#: The prefix of an agent's rate bucket (``ledger/rate.py``): ``agent:<agent name>``.
AGENT_RATE_PREFIX: Final = "agent:"
#: What the transactional bodies' Postgres advisory lock key is derived from (``body_lock.py``):
#: every process, old or new, must take the same key.
TRANSACTIONAL_LOCK: Final = "helix.transactional"


def agent_rate_key(agent_name: str) -> str:
    """The rate bucket of ``agent_name``'s model requests."""
    return f"{AGENT_RATE_PREFIX}{agent_name}"


def agent_entry_queue(agent_name: str) -> str:
    """The entry queue of an agent with ``max_running`` (its DBOS ``global_concurrency``)."""
    return f"{ENTRY_QUEUE}.{agent_name}"
