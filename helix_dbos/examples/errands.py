"""The demo agent: one reply that calls a safe tool, an unsafe tool and a grouped pair.

It is built to show the recovery contract when a worker dies mid-tool: the safe calls (keyed on
``ctx.dispatch_id``) may run again, the unsafe ``send_email`` never does and is answered
``outcome_unknown``, and the grouped ``reserve_seat`` pair keeps its order.
Delays are real (``asyncio.sleep``) so a crash lands while bodies are in flight:
``HELIX_DBOS_DEMO_SLOW`` sets the seconds of seat A2's first attempt (default 2; a repeat after a
crash is quick, as a warmed-up venue API would be), ``HELIX_DBOS_DEMO_EMAIL_SEC`` the email's (0.4).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models import Model

import helix_dbos as hx

from . import effects
from .scripted import calls, returns, scripted_model, status_of, text, user_text

INSTRUCTIONS = (
    "You run errands. For each request, in one reply: call set_preference(key='seat', value='aisle'), "
    "send_email(to='venue@example.com', subject='Table for two'), and reserve_seat twice (seat 'A1', then 'A2'). "
    "When the results come back, summarise them. If a result has status outcome_unknown, never call that "
    "tool again: tell the user to check whether it took effect."
)


def _slow(attempt: int) -> float:
    return float(os.environ.get("HELIX_DBOS_DEMO_SLOW", "2")) if attempt == 1 else 0.05


@hx.tool(replay="safe")
async def set_preference(ctx: hx.ToolContext, key: str, value: str) -> dict[str, Any]:
    """Save one of the user's preferences (an upsert: running it twice leaves the same state)."""
    idempotency_key = f"{ctx.session_id}:{ctx.require_dispatch_id()}"
    effects.record("set_preference", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=idempotency_key)
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


def _reply(last: ModelRequest) -> ModelResponse:
    if user_text(last) is not None:
        return calls(
            "I'll save your seat preference, email the venue and hold two seats.",
            ("set_preference", {"key": "seat", "value": "aisle"}),
            ("send_email", {"to": "venue@example.com", "subject": "Table for two"}),
            ("reserve_seat", {"seat": "A1"}),
            ("reserve_seat", {"seat": "A2"}),
            prefix="errand",
        )
    results = returns(last)
    doubtful = sorted(name for name, part in results.items() if status_of(part) in ("outcome_unknown", "replay_limit_reached"))
    if doubtful:
        return text(
            f"Done, except {', '.join(doubtful)}: it may have run before the crash, so I will not repeat it. "
            "Please check whether it took effect."
        )
    return text("Done: preference saved, email sent, seats A1 and A2 held.")


def errands_agent(model: Model | str | None = None) -> hx.Agent:
    """The demo agent; ``model`` swaps the scripted model for a real one ("provider:name")."""
    return hx.Agent(
        name="errands",
        model=model or scripted_model("scripted-errands", _reply),
        instructions=INSTRUCTIONS,
        tools=[set_preference, send_email, reserve_seat],
        max_steps=6,
    )
