"""The Helix ledger as SQLAlchemy Core tables.

Everything an operator audits lives here, as JSON a ``SELECT`` can read (never pickles): the
conversation once per session, every checkpoint as a pointer into it, every call with the policy
its tool had when the model asked for it, one row per body start, and tokens per model request.
On Postgres the tables live in schema ``helix`` beside DBOS's ``dbos``; on SQLite the schema is
translated away (see ``engine.py``) and the same table names stand unqualified in one file.
"""

from __future__ import annotations

import sqlalchemy as sa

from .types import LedgerJson, LedgerString, LedgerText, UtcTimestamp

SCHEMA = "helix"

metadata = sa.MetaData(schema=SCHEMA)

#: JSON readable in SQL on both databases (``jsonb`` on Postgres, JSON text on SQLite); every string
#: in it, like every ``LedgerText``/``LedgerString`` column, is stored through the escape of ``escape.py``.
Json = LedgerJson()
#: Read back as aware UTC on both databases (``types.UtcTimestamp``; the DDL is ``timestamptz``).
Timestamp = UtcTimestamp()

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("agent_name", sa.String(200), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("current_run_id", sa.String(64)),
    # Bumped by every run-start claim: the compare-and-set that lets exactly one entry win.
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("event_seq", sa.Integer, nullable=False, server_default="0"),
    sa.Column("run_count", sa.Integer, nullable=False, server_default="0"),
    # A child session is bound to the delegation (the parent call's dispatch id) that spawned it.
    sa.Column("parent_dispatch_id", sa.String(64)),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    # The authenticated principal that started the session (a child inherits its parent's); NULL
    # when no authentication was on. The service shows a session only to its owner and to the
    # operator and approver roles.
    sa.Column("owner", sa.String(200)),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("agent_name", sa.String(200), nullable=False),
    sa.Column("entry", sa.String(32), nullable=False),
    sa.Column("entry_message", LedgerText),
    sa.Column("checkpoint_id", sa.String(80)),
    sa.Column("previous_run_id", sa.String(64)),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("error_code", sa.String(64)),
    sa.Column("error", LedgerText),
    sa.Column("output", Json),
    sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_steps", sa.Integer, nullable=False),
    sa.Column("recovery", sa.String(16), nullable=False, server_default="full"),
    sa.Column("executor_id", sa.String(128)),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("ended_at", Timestamp),
    # When a worker turned it running (a queued run) or its admission (a run started where admitted).
    sa.Column("started_at", Timestamp),
    sa.UniqueConstraint("session_id", "seq", name="uq_runs_session_seq"),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("step", sa.Integer),
    sa.Column("kind", sa.String(16), nullable=False),  # request | response (pydantic-ai's message kinds)
    sa.Column("body", Json, nullable=False),
    # A rewind (retry or resume from an earlier checkpoint) never deletes history: it marks it.
    sa.Column("superseded_by", sa.String(64)),
    sa.Column("created_at", Timestamp, nullable=False),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("checkpoint_id", sa.String(80), primary_key=True),
    sa.Column("session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # append | step | suspension
    # The message boundary: the active transcript at this checkpoint is every message with seq < this.
    sa.Column("message_seq", sa.Integer, nullable=False),
    sa.Column("superseded_by", sa.String(64)),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.UniqueConstraint("run_id", "step", "kind", name="uq_checkpoints_run_step_kind"),
)

calls = sa.Table(
    "calls",
    metadata,
    sa.Column("dispatch_id", sa.String(64), primary_key=True),
    sa.Column("session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("checkpoint_id", sa.String(80), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("tool_call_id", LedgerString(200)),
    sa.Column("tool_name", LedgerString(200), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("args", Json),
    sa.Column("replay", sa.String(8), nullable=False),  # the policy its tool had when the model called it
    sa.Column("concurrency_group", sa.String(200)),
    sa.Column("sequential", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("requires_approval", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("result", Json),
    sa.Column("error", Json),
    sa.Column("outcome_note", LedgerText),
    sa.Column("paired_by", sa.String(16)),
    sa.Column("settled_run_id", sa.String(64)),
    sa.Column("approved", sa.Boolean),
    sa.Column("approval_reason", LedgerText),
    sa.Column("approval_actor", sa.String(200)),
    sa.Column("answered_at", Timestamp),
    sa.Column("child_session_id", sa.String(64)),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp),
    sa.Column("ended_at", Timestamp),
    # Every body started so far ran inside the transaction that records its result (a transactional
    # tool): no result means no effect. Saved from the tool's policy; cleared if a body ever ran without.
    sa.Column("transactional", sa.Boolean, nullable=False, server_default=sa.false()),
    # What proved the outcome when recovery, not the body, answered: "database" or "check".
    sa.Column("decided_by", sa.String(16)),
    # The reconcile check's last answer: {"verdict", "attempt", "result"?, "reason"?, "at"}.
    sa.Column("check_outcome", Json),
    sa.UniqueConstraint("checkpoint_id", "position", name="uq_calls_checkpoint_position"),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("dispatch_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.calls.dispatch_id"), primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("executor_id", sa.String(128)),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("ended_at", Timestamp),
    # ok | error | refused (a late body whose write was fenced off) | lost (the call was answered
    # without this body's result) | NULL while running, or lost by a crash not yet recovered
    # rolled_back (a transactional body that never committed), applied / not_applied (a check said)
    sa.Column("outcome", sa.String(16)),
    # The gate execution that opened it: a gate retried after a lost commit acknowledgement finds
    # its own attempt by this token instead of taking it for a crashed one (migration 0004).
    sa.Column("token", sa.String(32)),
)

usage = sa.Table(
    "usage",
    metadata,
    sa.Column("session_id", sa.String(64), nullable=False),
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("model_name", LedgerString(200)),
    sa.Column("input_tokens", sa.Integer, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.Integer, nullable=False, server_default="0"),
    sa.Column("total_tokens", sa.Integer, nullable=False, server_default="0"),
    sa.Column("details", Json),
    sa.Column("created_at", Timestamp, nullable=False),
)

stops = sa.Table(
    "stops",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("session_id", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # interrupt | abort
    sa.Column("requested_by", sa.String(200)),
    sa.Column("requested_at", Timestamp, nullable=False),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    # Assigned under the session row's lock, so a reader that has seen seq N has seen every seq < N.
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String(64)),
    sa.Column("type", sa.String(48), nullable=False),
    sa.Column("data", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)

# What each ledger transaction of a workflow returned, committed with its work (migration 0010):
# a replayed or concurrent execution of the workflow reads it instead of writing again.
tx_outputs = sa.Table(
    "tx_outputs",
    metadata,
    sa.Column("workflow_id", sa.String(64), primary_key=True),
    sa.Column("op", sa.String(120), primary_key=True),
    sa.Column("output", Json),
    sa.Column("created_at", Timestamp, nullable=False),
)

# A transactional body's marker (migration 0015): written first inside the body's own transaction,
# deleted by the result write in that transaction. Committed without a result, it proves the body
# committed its transaction itself (its effect may exist): recovery never runs that call again.
tx_marks = sa.Table(
    "tx_marks",
    metadata,
    sa.Column("dispatch_id", sa.String(64), primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("marked_at", Timestamp, nullable=False),
)

# A persistent companion: one child session per (parent session, companion agent), kept across the
# parent's calls. Each call is one turn: a run of the companion session whose run id is the call's
# dispatch id. ``workflow_id`` is the live incarnation of its long-lived DBOS workflow (turns arrive by
# DBOS.send); an incarnation that idles out is ``closed`` and the next call starts the next one.
companions = sa.Table(
    "companions",
    metadata,
    sa.Column("companion_session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), primary_key=True),
    sa.Column("parent_session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), nullable=False),
    sa.Column("agent_name", sa.String(200), nullable=False),
    sa.Column("tool_name", sa.String(200), nullable=False),
    sa.Column("incarnation", sa.Integer, nullable=False),
    sa.Column("workflow_id", sa.String(140), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # live | closed | lost
    sa.Column("first_dispatch_id", sa.String(64), nullable=False),
    # The last turn the companion answered (each turn's outcome is its run row: run id = dispatch id).
    sa.Column("last_dispatch_id", sa.String(64)),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.UniqueConstraint("parent_session_id", "agent_name", name="uq_companions_parent_agent"),
)

sa.Index("ix_sessions_owner", sessions.c.owner)

# The deps input of a session's runs (``runtime.start(..., deps=...)``): JSON, never a pickle, so a
# recovered run in a fresh process rebuilds its deps with the agent's registered factory.
session_deps = sa.Table(
    "session_deps",
    metadata,
    sa.Column("session_id", sa.String(64), sa.ForeignKey(f"{SCHEMA}.sessions.session_id"), primary_key=True),
    sa.Column("data", Json),
    sa.Column("run_id", sa.String(64), nullable=False),  # the run whose start stored it
    sa.Column("updated_at", Timestamp, nullable=False),
)

sa.Index("ix_runs_session", runs.c.session_id)
sa.Index("ix_checkpoints_session", checkpoints.c.session_id, checkpoints.c.step)
sa.Index("ix_calls_session", calls.c.session_id)
# no index on calls.status alone (migration 0014): a status change then rewrites no index entry, so
# a call's updates are HOT on Postgres (calls also has fillfactor 80 there)
sa.Index("ix_calls_run", calls.c.run_id)
sa.Index("ix_usage_session", usage.c.session_id)
# A session's superseded messages alone (migration 0012): each model request counts them
sa.Index("ix_messages_superseded", messages.c.session_id, postgresql_where=messages.c.superseded_by.is_not(None), sqlite_where=messages.c.superseded_by.is_not(None))

#: One row per executor id: its lease (renewed while its process holds the executor lock) and the
#: last takeover of its runs (migration 0006). Times are epoch seconds from the database's clock.
executors = sa.Table(
    "executors",
    metadata,
    sa.Column("executor_id", sa.String(200), primary_key=True),
    sa.Column("host", sa.String(255)),
    sa.Column("pid", sa.Integer),
    sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_seconds", sa.Float, nullable=False),
    sa.Column("started_epoch", sa.Float, nullable=False),
    sa.Column("renewed_epoch", sa.Float, nullable=False),
    sa.Column("released_epoch", sa.Float),
    sa.Column("taken_over_by", sa.String(200)),
    sa.Column("taken_over_epoch", sa.Float),
    sa.Column("taken_runs", sa.Integer),
)

#: Every takeover, once per (executor id, generation): the database decides the one taker.
executor_takeovers = sa.Table(
    "executor_takeovers",
    metadata,
    sa.Column("executor_id", sa.String(200), primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True),
    sa.Column("taken_by", sa.String(200), nullable=False),
    sa.Column("taken_epoch", sa.Float, nullable=False),
    sa.Column("why", sa.String(16), nullable=False),
    sa.Column("workflow_ids", sa.JSON),
)

#: An agent's model requests granted in its sliding window (``ledger/rate.py``), on the database's clock.
rate_grants = sa.Table(
    "rate_grants",
    metadata,
    sa.Column("grant_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("rate_key", sa.String(200), nullable=False),
    sa.Column("granted_epoch", sa.Float, nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Index("ix_rate_grants_key_epoch", "rate_key", "granted_epoch"),
)

#: The agents' limits as the fleet agreed on them, per application version (``ledger/agent_limits.py``):
#: written by the first process of that version that defines the agent, compared by every later one.
agent_limits = sa.Table(
    "agent_limits",
    metadata,
    sa.Column("application_version", sa.String(200), primary_key=True),
    sa.Column("agent_name", sa.String(200), primary_key=True),
    sa.Column("max_running", sa.Integer),
    sa.Column("model_requests", sa.Integer),
    sa.Column("model_requests_period", sa.Float),
    sa.Column("recorded_by", sa.String(200), nullable=False),
    sa.Column("recorded_at", Timestamp, nullable=False),
)
