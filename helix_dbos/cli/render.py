"""Rich views of the ledger: a session's timeline, its calls, runs and sessions.

The timeline is the ``events`` table itself, so what an operator reads here is what an SSE client
received and what SQL returns: one vocabulary everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from .common import short

STATUS_STYLE = {
    "ok": "green",
    "completed": "green",
    "error": "red",
    "failed": "red",
    "denied": "yellow",
    "outcome_unknown": "bold magenta",
    "replay_limit_reached": "bold magenta",
    "not_started": "yellow",
    "run_stopped": "yellow",
    "interrupted": "yellow",
    "pending": "cyan",
    "suspended_client_tool": "cyan",
    "running": "blue",
    "saved": "blue",
}


def _add(table: Table, *cells: Any) -> None:
    """A row whose strings are plain text: user data (``x[/bold]``) is never read as Rich markup."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def styled(status: str | None) -> Text:
    return Text(status or "-", style=STATUS_STYLE.get(status or "", ""))


def compact(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _time(value: Any) -> str:
    return value.strftime("%H:%M:%S.%f")[:-3] if isinstance(value, datetime) else str(value or "")


def describe(event: Mapping[str, Any], tools: Mapping[str, str]) -> str:
    """One line saying what an event means; ``tools`` names each dispatch id's tool."""
    d: Mapping[str, Any] = event["data"] or {}
    kind = event["type"]
    dispatch = d.get("dispatch_id")
    tool = d.get("tool_name") or tools.get(str(dispatch), "?")
    ref = f"{tool} [{short(dispatch)}]"
    if kind == "run_status":
        extra = f" (entry {d['entry']})" if d.get("entry") else ""
        err = f": {d.get('error_code') or ''} {compact(d.get('error') or '', 80)}".rstrip() if d.get("error_code") else ""
        return f"run {short(event.get('run_id'))} {d.get('status')}{extra}{err}"
    if kind == "model_text":
        return f"model (step {d.get('step')}): {compact(d.get('text', ''), 200)}"
    if kind == "guardrail":
        return f"{d.get('stage')} guardrail {d.get('guardrail')} (step {d.get('step')}): {'tripped' if d.get('tripwire') else 'passed'} {compact(d.get('output_info'), 80)}"
    if kind == "call_saved" and d.get("kind") == "finish":
        return f"output given through {tool}: {compact(d.get('args'), 80)}"
    if kind == "call_saved":
        return f"saved {tool}({compact(d.get('args'), 50)}) dispatch {short(dispatch)}"
    if kind == "approval_requested":
        return f"{ref} awaits approval: {compact(d.get('args'), 50)}"
    if kind == "client_call":
        return f"{ref} awaits the client: {compact(d.get('args'), 50)}"
    if kind == "tool_start":
        return f"{ref} body started, attempt {d.get('attempt')}"
    if kind == "tool_end":
        return f"{ref} attempt {d.get('attempt', '-')} → {d.get('status')}"
    if kind == "call_paired":
        note = f": {d['note']}" if d.get("note") else ""
        return f"{ref} answered {d.get('status')} (by {d.get('paired_by')}){note}{_who_decided(d)}"
    if kind == "recovery":
        by = {"database": " [decided by the database]", "check": " [decided by asking the outside system]"}.get(str(d.get("decided_by")), "")
        return f"{ref} recovery: {d.get('action')} ({d.get('reason')}){by}"
    if kind == "reconciled":
        said = {"applied": "it took effect", "not_applied": "it did not take effect"}.get(str(d.get("verdict")), f"cannot tell: {d.get('reason')}")
        return f"{ref} asked the outside system about attempt {d.get('attempt')}: {said}"
    if kind == "checkpoint":
        return f"{d.get('kind')} checkpoint, step {d.get('step')} ({short(d.get('checkpoint_id'), 11)})"
    if kind == "approval_decided":
        verdict = "approved" if d.get("approved") else "denied"
        by = f" by {d['actor']}" if d.get("actor") else ""
        return f"{ref} {verdict}{by}" + (f": {d['reason']}" if d.get("reason") else "")
    if kind == "stop_requested":
        return f"stop requested ({d.get('kind')})" + (f" by {d['requested_by']}" if d.get("requested_by") else "")
    if kind == "rewind":
        return f"rewound to checkpoint {short(d.get('checkpoint_id'), 11)}"
    if kind == "call_reopened":
        return f"{ref} reopened for retry"
    if kind == "subagent_start":
        return f"{ref} started sub-agent {d.get('agent')} (session {short(d.get('child_session_id'))})"
    return compact(dict(d), 90)


def tool_names(events: Iterable[Mapping[str, Any]], calls: Iterable[Mapping[str, Any]] = ()) -> dict[str, str]:
    names = {str(c["dispatch_id"]): str(c["tool_name"]) for c in calls}
    for e in events:
        d = e["data"] or {}
        if d.get("dispatch_id") and d.get("tool_name"):
            names[str(d["dispatch_id"])] = str(d["tool_name"])
    return names


def _who_decided(d: Mapping[str, Any]) -> str:
    """Which of the three deciders answered a paired call, as the demo's timeline says it."""
    reason = str(d.get("reason") or "")
    if reason.startswith("check") or "; check:" in reason:
        return " [decided by asking the outside system]"
    if "transactional" in reason:
        return " [decided by the database]"
    if d.get("status") == "outcome_unknown":
        return " [the model must decide]"
    return ""


def timeline(events: Sequence[Mapping[str, Any]], tools: Mapping[str, str], title: str | None = None) -> Table:
    table = Table(title=title, show_lines=False, expand=False, title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("time", style="dim")
    table.add_column("event")
    table.add_column("what happened", overflow="fold")
    for e in events:
        status = str((e["data"] or {}).get("status"))
        style = STATUS_STYLE.get(status, "") if e["type"] in ("run_status", "tool_end", "call_paired") else ""
        _add(table, str(e["seq"]), _time(e["created_at"]), e["type"], Text(describe(e, tools), style=style))
    return table


def calls_table(calls: Sequence[Mapping[str, Any]], title: str | None = None, with_session: bool = False) -> Table:
    table = Table(title=title, title_justify="left")
    if with_session:
        table.add_column("session", style="dim")
    for name in ("dispatch", "step", "tool", "replay", "group", "status", "attempts", "outcome / note"):
        table.add_column(name, overflow="fold")
    for c in calls:
        attempts = c["attempts"] if isinstance(c["attempts"], int) else len(c["attempts"])
        note = c.get("outcome_note") or c.get("note") or ""
        if not note and c.get("status") == "denied":
            note = f"denied by {c.get('approval_actor') or '?'}"
        output = c.get("kind") == "finish"  # the run's output tool: not a call, nothing to replay
        row = [
            short(c["dispatch_id"]),
            f"{c['step']}.{c['position']}",
            f"{c['tool_name']} (the run's output)" if output else c["tool_name"],
            "-" if output else c["replay"],
            c.get("concurrency_group") or "",
            styled(c["status"]),
            str(attempts),
            compact(note, 100),
        ]
        _add(table, *([short(c["session_id"])] if with_session else []), *row)
    return table


def sessions_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="sessions (newest first)", title_justify="left")
    for name in ("session", "agent", "owner", "status", "runs", "updated"):
        table.add_column(name)
    for r in rows:
        _add(table, r["session_id"], r["agent_name"], r.get("owner") or "-", styled(r["status"]), str(r["run_count"]), _time(r["updated_at"]))
    return table


def runs_table(runs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="runs", title_justify="left")
    for name in ("#", "run", "entry", "status", "steps", "executor", "error"):
        table.add_column(name, overflow="fold")
    for r in runs:
        _add(table, str(r["seq"]), r["run_id"], r["entry"], styled(r["status"]), str(r["steps"]), r.get("executor_id") or "-", compact(r.get("error_code") or "", 40))
    return table
