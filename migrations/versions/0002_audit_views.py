"""Audit views over the ledger: one row per call, per attempt, per run, per message.

Operators answer their questions with plain ``SELECT``s over these (see docs/audit.md): what may
have run twice, what is ``outcome_unknown``, who approved what, what each session cost. The views
only read; they add no state, so dropping them loses nothing.

Postgres gets them in schema ``helix``; on SQLite (no schemas) they stand unqualified beside the
tables. The SQL differs only where the dialects do: interval arithmetic for durations.

A later migration that rebuilds a table these views read on SQLite (Alembic's batch mode copies the
table and renames it back) must drop the views first and create them again afterwards: SQLite
refuses to rename a table while a view names a table that does not exist at that moment.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = ("message_audit", "run_audit", "attempt_audit", "call_audit")


def _millis_pg(start: str, end: str) -> str:
    return f"CAST(EXTRACT(EPOCH FROM ({end} - {start})) * 1000 AS BIGINT)"


def _millis_sqlite(start: str, end: str) -> str:
    return f"CAST(ROUND((julianday({end}) - julianday({start})) * 86400000.0) AS INTEGER)"


def view_sql(s: str, ms: Callable[[str, str], str]) -> dict[str, str]:
    """The views' bodies; ``s`` is the schema prefix (``helix.`` or empty), ``ms`` a duration in milliseconds."""
    return {
        # One row per call: what the model asked (tool, args, the policy its tool had), the dispatch id
        # that keys its effects, how many bodies started, how it was answered and by whom, and the
        # tokens of the model request whose reply made the call.
        "call_audit": f"""
            SELECT
                c.session_id,
                s.agent_name,
                c.run_id,
                r.seq AS run_seq,
                r.entry AS run_entry,
                c.step,
                c.position,
                c.tool_name,
                c.kind,
                c.args,
                c.replay AS policy,
                c.concurrency_group,
                c.sequential,
                c.dispatch_id,
                c.tool_call_id,
                c.checkpoint_id,
                c.attempts,
                (SELECT count(*) FROM {s}attempts a
                  WHERE a.dispatch_id = c.dispatch_id AND a.outcome IS NULL
                    AND NOT (c.status = 'running' AND a.attempt = c.attempts)) AS lost_attempts,
                (SELECT count(*) FROM {s}attempts a WHERE a.dispatch_id = c.dispatch_id AND a.outcome = 'refused') AS refused_attempts,
                c.status,
                c.outcome_note AS note,
                c.paired_by,
                c.settled_run_id,
                c.result,
                c.error,
                c.requires_approval,
                c.approved,
                c.approval_actor,
                c.approval_reason,
                c.answered_at,
                c.child_session_id,
                c.created_at AS saved_at,
                c.started_at,
                c.ended_at,
                {ms("c.started_at", "c.ended_at")} AS duration_ms,
                u.model_name,
                u.input_tokens AS step_input_tokens,
                u.output_tokens AS step_output_tokens,
                u.total_tokens AS step_total_tokens
            FROM {s}calls c
            JOIN {s}sessions s ON s.session_id = c.session_id
            JOIN {s}runs r ON r.run_id = c.run_id
            LEFT JOIN {s}usage u ON u.run_id = c.run_id AND u.step = c.step
        """,
        # One row per body start. ``outcome`` is ok/error/refused as recorded, 'running' for the live
        # attempt of a running call, and 'lost' for a body whose process died before its result was
        # written: exactly the bodies whose effect is in doubt.
        "attempt_audit": f"""
            SELECT
                a.dispatch_id,
                c.session_id,
                c.tool_name,
                c.replay AS policy,
                a.attempt,
                a.run_id,
                a.executor_id,
                a.started_at,
                a.ended_at,
                COALESCE(a.outcome, CASE WHEN c.status = 'running' AND a.attempt = c.attempts THEN 'running' ELSE 'lost' END) AS outcome,
                {ms("a.started_at", "a.ended_at")} AS duration_ms,
                c.status AS call_status
            FROM {s}attempts a
            JOIN {s}calls c ON c.dispatch_id = a.dispatch_id
        """,
        # One row per run (each execute, resume, retry, recovery entry) with its model usage.
        "run_audit": f"""
            SELECT
                r.run_id,
                r.session_id,
                r.seq,
                r.agent_name,
                r.entry,
                r.entry_message,
                r.previous_run_id,
                r.status,
                r.error_code,
                r.error,
                r.steps,
                r.recovery,
                r.executor_id,
                r.created_at,
                r.ended_at,
                {ms("r.created_at", "r.ended_at")} AS duration_ms,
                COALESCE(u.requests, 0) AS model_requests,
                COALESCE(u.input_tokens, 0) AS input_tokens,
                COALESCE(u.output_tokens, 0) AS output_tokens,
                COALESCE(u.total_tokens, 0) AS total_tokens,
                (SELECT count(*) FROM {s}calls c WHERE c.run_id = r.run_id) AS calls
            FROM {s}runs r
            LEFT JOIN (
                SELECT run_id, count(*) AS requests, sum(input_tokens) AS input_tokens,
                       sum(output_tokens) AS output_tokens, sum(total_tokens) AS total_tokens
                FROM {s}usage GROUP BY run_id
            ) u ON u.run_id = r.run_id
        """,
        # The whole conversation, superseded (rewound) messages included and marked.
        "message_audit": f"""
            SELECT
                m.session_id,
                m.seq,
                m.run_id,
                m.step,
                m.kind,
                m.superseded_by,
                CASE WHEN m.superseded_by IS NULL THEN 1 ELSE 0 END AS active,
                m.body,
                m.created_at
            FROM {s}messages m
        """,
    }


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    views = view_sql("helix." if postgres else "", _millis_pg if postgres else _millis_sqlite)
    for name, body in views.items():
        op.execute(f"CREATE VIEW {'helix.' if postgres else ''}{name} AS {body}")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {'helix.' if postgres else ''}{name}")
