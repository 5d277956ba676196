"""``helix-dbos``'s read commands: ``sessions``, ``executors``, ``show`` and ``calls``, each a read of
the ledger through a ``Reader`` (``--db``), printed as a table or, with ``--json``, as the service's
JSON. Registered on the app by ``main.py`` (``register``), where ``--help`` always listed them.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.panel import Panel
from rich.text import Text

from ..errors import ValidationError
from .common import (
    MAX_LIMIT,
    DbOption,
    JsonOption,
    check_session_id,
    check_text,
    console,
    esc,
    int_range,
    ledger,
    model_json,
    print_json,
    resolve_session,
    typed_errors,
)
from .render import calls_table, runs_table, sessions_table, styled, timeline, tool_names


@typed_errors
def sessions(
    limit: Annotated[int, typer.Option("--limit", callback=int_range("--limit", 1, MAX_LIMIT), help=f"How many, newest first (at most {MAX_LIMIT:,}).")] = 20,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List sessions, most recently active first."""
    from .. import wire

    with ledger(db) as reader:
        rows = reader.sessions(limit)
    if as_json:
        print_json([wire.summary_out(r) for r in rows])
    else:
        console.print(sessions_table(rows))


@typed_errors
def executors(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Executors with their lease (live, lapsed, released, taken_over), pending runs and takeovers."""
    from rich.markup import escape
    from rich.table import Table

    from .. import wire

    with ledger(db) as reader:
        rows = reader.executors()
    if as_json:
        print_json([wire.executor_out(r) for r in rows])
        return
    table = Table("executor", "host", "pid", "status", "renewed", "lease s", "pending runs", "taken over by", "took over")
    for r in rows:
        table.add_row(
            escape(str(r["executor_id"])), escape(str(r["host"] or "")), str(r["pid"] or ""), str(r["status"]), str(r["renewed_at"]),
            f"{r['lease_seconds']:g}", str(r["pending_runs"]), escape(str(r["taken_over_by"] or "")), escape(", ".join(r["took_over"])),
        )
    console.print(table)


@typed_errors
def show(session_id: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """A session as a readable timeline: every ledger event, its runs and its calls."""
    from .. import wire

    check_session_id(session_id)

    with ledger(db) as reader:
        session_id = resolve_session(reader, session_id)
        view = reader.session(session_id)
        events = reader.events(session_id, 0, limit=1_000_000).events
        calls = reader.calls(session_id=session_id, limit=100_000)
    if as_json:
        print_json({"session": model_json(wire.session_out(view)), "events": events})
        return
    owner = f"  owner [cyan]{esc(view.owner)}[/]" if view.owner else ""
    console.print(f"session [cyan]{esc(view.session_id)}[/]  agent [cyan]{esc(view.agent_name)}[/]{owner}  status ", styled(view.status))
    console.print(runs_table(view.runs))
    console.print(timeline(events, tool_names(events, calls), title="timeline"))
    if calls:
        console.print(calls_table(calls, title="calls"))
    last = view.runs[-1] if view.runs else None
    if last and last["output"] is not None:
        console.print(Panel(Text(str(last["output"])), title="output of the latest run", expand=False))


@typed_errors
def calls(
    status: Annotated[str | None, typer.Option("--status", help="e.g. outcome_unknown, running, pending.")] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="Only calls of this tool.")] = None,
    session: Annotated[str | None, typer.Option("--session", help="Only calls of this session.")] = None,
    limit: Annotated[int, typer.Option("--limit", callback=int_range("--limit", 1, MAX_LIMIT), help=f"At most this many (up to {MAX_LIMIT:,}).")] = 200,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Calls across sessions, filtered by status and tool (oldest first)."""
    from typing import get_args

    from ..ledger.statuses import CallStatus

    if session is not None:
        check_session_id(session)
    known = get_args(CallStatus)
    if status is not None and status not in known:
        raise ValidationError(f"unknown call status {status!r}; one of: {', '.join(known)}")
    check_text("--tool", tool)  # an argument that is not UTF-8 arrives as lone surrogates: no store holds them
    with ledger(db) as reader:
        rows = reader.calls(session_id=session, status=status, tool_name=tool, limit=limit)
    if as_json:
        print_json(rows)
    else:
        console.print(calls_table(rows, title=f"{len(rows)} call(s)", with_session=True))


def register(app: typer.Typer) -> None:
    """Add the read commands to ``app``, in ``--help``'s order."""
    for command in (sessions, executors, show, calls):
        app.command()(command)


__all__ = ["calls", "executors", "register", "sessions", "show"]
