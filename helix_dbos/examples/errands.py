"""The demo agent: one reply that calls a safe tool, an unsafe tool, a grouped pair, a transactional
booking and a reconciled payment.

It is built to show the recovery contract when a worker dies mid-tool: the safe calls (keyed on
``ctx.dispatch_id``) may run again, the unsafe ``send_email`` never does and is answered
``outcome_unknown`` (the model must decide), the grouped ``reserve_seat`` pair keeps its order, the
transactional ``book_venue`` is decided by the database (its row commits with its result, so an
interrupted booking left nothing and runs again), and ``pay_deposit`` is decided by asking the
payments provider by dispatch id.
Delays are real so a crash lands while bodies are in flight: ``HELIX_DBOS_DEMO_SLOW`` sets the
seconds of seat A2's and the payment's first attempts (default 2; a repeat after a crash is quick,
as a warmed-up venue API would be), ``HELIX_DBOS_DEMO_BOOK_SEC`` the booking's first transaction
(1.5), ``HELIX_DBOS_DEMO_EMAIL_SEC`` the email's (0.4).
The booking is chained after ``set_preference`` (``sequential``), so it opens its transaction after
the email started: on SQLite, one writer at a time, a long transaction opened first would hold back
the email's attempt record.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import sqlalchemy as sa
from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models import Model

import helix_dbos as hx

from . import effects, payments
from .scripted import calls, returns, scripted_model, status_of, text, user_text

INSTRUCTIONS = (
    "You run errands. For each request, in one reply: call set_preference(key='seat', value='aisle'), "
    "send_email(to='venue@example.com', subject='Table for two'), reserve_seat twice (seat 'A1', then 'A2'), "
    "book_venue(party=2) and pay_deposit(amount_cents=2000). "
    "When the results come back, summarise them. If a result has status outcome_unknown, never call that "
    "tool again: tell the user to check whether it took effect."
)


def _slow(attempt: int) -> float:
    return float(os.environ.get("HELIX_DBOS_DEMO_SLOW", "2")) if attempt == 1 else 0.05


@hx.tool(replay="safe", sequential=True)
async def set_preference(ctx: hx.ToolContext, key: str, value: str) -> dict[str, Any]:
    """Save one of the user's preferences (an upsert: running it twice leaves the same state)."""
    idempotency_key = f"{ctx.session_id}:{ctx.require_dispatch_id()}"
    effects.record("set_preference", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=idempotency_key)
    await asyncio.sleep(0.2 if ctx.attempt == 1 else 0)
    return {"saved": {key: value}, "idempotency_key": idempotency_key}


@hx.tool  # replay="unsafe" by default: an email sent twice is two emails
async def send_email(ctx: hx.ToolContext, to: str, subject: str) -> dict[str, Any]:
    """Send an email to a venue."""
    effects.record("send_email", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, to=to)
    await asyncio.sleep(float(os.environ.get("HELIX_DBOS_DEMO_EMAIL_SEC", "0.4")))
    return {"sent_to": to, "subject": subject}


@hx.tool(replay="safe", concurrency_group="venue")
async def reserve_seat(ctx: hx.ToolContext, seat: str) -> dict[str, Any]:
    """Hold a seat at the venue (keyed on the dispatch id, so a repeat holds the same seat)."""
    effects.record("reserve_seat", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, seat=seat)
    await asyncio.sleep(0.05 if seat == "A1" else _slow(ctx.attempt))
    return {"held": seat, "hold_id": f"hold-{ctx.require_dispatch_id()[:8]}"}


#: The restaurant's bookings, in the same database as the ledger. A real app creates this table with
#: its own Alembic migration (docs/writing-tools.md); the example creates it on first use, inside the
#: booking's own transaction, so it runs anywhere with nothing to set up.
booking_meta = sa.MetaData()
bookings = sa.Table(
    "demo_bookings",
    booking_meta,
    sa.Column("dispatch_id", sa.String(64), primary_key=True),
    sa.Column("session_id", sa.String(64), nullable=False),
    sa.Column("party", sa.Integer, nullable=False),
)


@hx.tool(transactional=True, sequential=True, sql_allows=["CREATE TABLE"])  # its own table, made on first use
def book_venue(ctx: hx.ToolContext, party: int) -> dict[str, Any]:
    """Book a table: one row in the bookings table, committed together with this call's result."""
    effects.record("book_venue", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, party=party)
    conn = ctx.require_connection()
    conn.execute(sa.schema.CreateTable(bookings, if_not_exists=True))
    conn.execute(bookings.insert().values(dispatch_id=ctx.require_dispatch_id(), session_id=ctx.session_id, party=party))
    # the venue's system is slow the first time: the row is not committed yet
    time.sleep(float(os.environ.get("HELIX_DBOS_DEMO_BOOK_SEC", "1.5")) if ctx.attempt == 1 else 0.05)
    return {"booked_for": party, "booking": ctx.dispatch_id[:8] if ctx.dispatch_id else None}


def deposit_made(ctx: hx.CheckContext) -> hx.Applied | hx.NotApplied | None:
    """Ask the payments provider whether the deposit keyed on this call went through."""
    receipt = payments.find(f"{ctx.session_id}:{ctx.dispatch_id}")
    return hx.Applied(receipt) if receipt is not None else hx.NotApplied()


@hx.tool(reconcile=deposit_made, reconcile_timeout=5)
async def pay_deposit(ctx: hx.ToolContext, amount_cents: int) -> dict[str, Any]:
    """Pay the venue's deposit (unsafe: a repeat would charge twice, so recovery asks the provider)."""
    effects.record("pay_deposit", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, amount_cents=amount_cents)
    receipt = payments.charge(f"{ctx.session_id}:{ctx.require_dispatch_id()}", amount_cents)
    await asyncio.sleep(_slow(ctx.attempt))  # the provider's confirmation is slow to come back
    return receipt


def _reply(last: ModelRequest) -> ModelResponse:
    if user_text(last) is not None:
        return calls(
            "I'll save your seat preference, email the venue, hold two seats, book the table and pay the deposit.",
            ("set_preference", {"key": "seat", "value": "aisle"}),
            ("send_email", {"to": "venue@example.com", "subject": "Table for two"}),
            ("reserve_seat", {"seat": "A1"}),
            ("reserve_seat", {"seat": "A2"}),
            ("book_venue", {"party": 2}),
            ("pay_deposit", {"amount_cents": 2000}),
            prefix="errand",
        )
    results = returns(last)
    doubtful = sorted(name for name, part in results.items() if status_of(part) in ("outcome_unknown", "replay_limit_reached"))
    if doubtful:
        return text(
            f"Done, except {', '.join(doubtful)}: it may have run before the crash, so I will not repeat it. "
            "Please check whether it took effect."
        )
    return text("Done: preference saved, email sent, seats A1 and A2 held, table booked, deposit paid.")


def errands_agent(model: Model | str | None = None) -> hx.Agent:
    """The demo agent; ``model`` swaps the scripted model for a real one ("provider:name")."""
    return hx.Agent(
        name="errands",
        model=model or scripted_model("scripted-errands", _reply),
        instructions=INSTRUCTIONS,
        tools=[set_preference, send_email, reserve_seat, book_venue, pay_deposit],
        max_steps=6,
    )
