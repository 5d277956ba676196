"""A concierge that needs a human's approval to book, and the client's hand to add a calendar entry.

It shows both answer round trips of the API: ``book_table`` waits for an approval
(``requires_approval=True``) and ``add_to_calendar`` is a client tool the caller executes and
answers with its result. The scripted model reacts to what it is told (approved, denied, unknown).
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models import Model

import helix_dbos as hx

from .scripted import calls, returns, scripted_model, status_of, text, user_text

INSTRUCTIONS = (
    "You book restaurant tables. Search first, then book the best match for two with book_table, "
    "then add the booking to the user's calendar with add_to_calendar."
)


@hx.tool(replay="safe")
def search_restaurants(city: str) -> list[dict[str, Any]]:
    """Find restaurants in a city (a read: safe to repeat)."""
    return [{"name": "Luigi's", "city": city, "rating": 4.7}, {"name": "Casa Nova", "city": city, "rating": 4.4}]


@hx.tool(requires_approval=True)
def book_table(ctx: hx.ToolContext, restaurant: str, seats: int) -> dict[str, Any]:
    """Book a table (needs a human's approval; never repeated by recovery)."""
    return {"restaurant": restaurant, "seats": seats, "confirmation": f"BK-{ctx.require_dispatch_id()[:8]}"}


class CalendarEntry(pydantic.BaseModel):
    title: str
    when: str


add_to_calendar = hx.client_tool(
    name="add_to_calendar", description="Add an entry to the user's calendar (done by the client app).", input_schema=CalendarEntry
)


def _reply(last: ModelRequest) -> ModelResponse:
    said = user_text(last)
    results = returns(last)
    if said is not None:  # a new user message redirects the conversation: start over from a search
        city = said.rsplit(" in ", 1)[-1].strip(" .?!") if " in " in said else "Lisbon"
        return calls("Let me look.", ("search_restaurants", {"city": city}), prefix="search")
    if "add_to_calendar" in results:
        if status_of(results["add_to_calendar"]) == "ok":
            return text("Your table is booked and in your calendar.")
        return text("Your table is booked, but the calendar entry failed.")
    if "book_table" in results:
        status = status_of(results["book_table"])
        if status == "ok":
            booking: dict[str, Any] = results["book_table"].content  # type: ignore[assignment]
            return calls(None, ("add_to_calendar", {"title": f"Dinner at {booking['restaurant']}", "when": "Friday 20:00"}), prefix="cal")
        if status == "denied":
            return text("Understood: I did not book anything.")
        return text(f"The booking's outcome is {status}; please check with the restaurant before booking again.")
    if "search_restaurants" in results:
        found: list[dict[str, Any]] = results["search_restaurants"].content  # type: ignore[assignment]
        best = found[0]["name"]
        return calls(f"{best} looks best; booking it needs your approval.", ("book_table", {"restaurant": best, "seats": 2}), prefix="book")
    return text("How can I help?")


def concierge_agent(model: Model | str | None = None) -> hx.Agent:
    return hx.Agent(
        name="concierge",
        model=model or scripted_model("scripted-concierge", _reply),
        instructions=INSTRUCTIONS,
        tools=[search_restaurants, book_table, add_to_calendar],
        max_steps=8,
    )
