"""OpenAI Agents SDK handoffs and agents-as-tools, the app a real process SIGKILLed mid the unsafe
body of the agent handed to (or of the agent tool's child) and relaunched (both databases).

``tests/scenarios/handoff_app.py`` runs the agents with the SDK's own ``OpenAIChatCompletionsModel``
against the loopback provider; which agent was asked is read from each request's instructions, how
many bodies ran from the bodies' own count outside the runtime.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.processes.test_model_over_http_crashes import App
from tests.runtime.test_openai_agents_handoffs import instructions_of, told
from tests.support.provider_server import Calls, Text, provider_server
from tests.support.waiting import wait_for


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def scripted(entry: Any) -> Any:
    """triage hands off; boss asks its agent tool; cashier charges once, then says what it was told."""
    said, answers = instructions_of(entry), told(entry)
    if said == "You are triage.":
        return Calls([("transfer_to_cashier", {})])
    if said == "You lead.":
        return Text(f"boss: {answers['ask_cashier']}") if "ask_cashier" in answers else Calls([("ask_cashier", {"message": "charge c1 5"})])
    return Text("done: " + json.loads(answers["charge"])["status"]) if "charge" in answers else Calls([("charge", {"card": "c1", "amount": 5})])


def killed_mid_charge(db_url: str, tmp_path: Path, shape: str) -> tuple[App, dict[str, Any], list[Any]]:
    with provider_server() as server:
        server.always(scripted)
        app = App(db_url, tmp_path, server.root, "chat", module="handoff_app", extra=("--executor", f"handoff-{uuid.uuid4().hex[:8]}", "--shape", shape))
        (app.effects / "hold_charge").touch()
        proc = app.spawn()
        wait_for("charge's body to start", lambda: app.alive(proc) and app.bodies()["charge"] == 1)
        kill(proc)
        (app.effects / "hold_charge").unlink()
        out = app.wake().result
        assert out is not None
        return app, out, server.requests()


@pytest.mark.kills
def test_killed_mid_the_handed_to_agents_unsafe_tool(db_url: str, tmp_path: Path) -> None:
    """triage handed off to cashier (the handoff's step committed), then the app was SIGKILLed while
    cashier's unsafe ``charge`` ran. The relaunch continues the same run with cashier: triage is
    never asked again (the handoff is not re-asked), ``charge`` is answered ``outcome_unknown`` and
    ran once, and the run's output is cashier's."""
    app, out, requests = killed_mid_charge(db_url, tmp_path, "handoff")
    assert (out["status"], out["output"]) == ("completed", "done: outcome_unknown"), out
    asked = [instructions_of(r) for r in requests]
    assert asked == ["You are triage.", "Charge the card, then say done.", "Charge the card, then say done."], asked
    assert json.loads(told(requests[2])["charge"])["status"] == "outcome_unknown"
    assert app.bodies() == Counter({"charge": 1})  # counted by the body itself
    calls = {c["tool"]: c for c in out["calls"]}
    assert (calls["transfer_to_cashier"]["status"], calls["transfer_to_cashier"]["attempts"], calls["transfer_to_cashier"]["result"]) == (
        "ok", 1, {"assistant": "cashier"})
    assert (calls["charge"]["status"], calls["charge"]["attempts"]) == ("outcome_unknown", 1)
    assert {c["run_id"] for c in out["calls"]} == {out["run_id"]}  # one run, relaunched, not a new one


@pytest.mark.kills
def test_killed_mid_an_agent_tools_unsafe_tool(db_url: str, tmp_path: Path) -> None:
    """boss called ``ask_cashier`` (``cashier.as_tool``), a remote child run; the app was SIGKILLed
    while the child's unsafe ``charge`` ran. The relaunch re-attaches to the child (never a second
    one): ``charge`` ran once and is ``outcome_unknown`` in the child, the child's answer is the
    outer call's one answer, and boss is asked once more with it."""
    app, out, requests = killed_mid_charge(db_url, tmp_path, "agent_tool")
    assert (out["status"], out["output"]) == ("completed", "boss: done: outcome_unknown"), out
    asked = [instructions_of(r) for r in requests]
    assert asked.count("You lead.") == 2 and asked.count("Charge the card, then say done.") == 2, asked
    assert app.bodies() == Counter({"charge": 1})
    outer = [c for c in out["calls"] if not c.get("child")]
    inner = [c for c in out["calls"] if c.get("child")]
    assert [(c["tool"], c["kind"], c["status"], c["result"]) for c in outer] == [("ask_cashier", "remote", "ok", "done: outcome_unknown")]
    assert [(c["tool"], c["status"], c["attempts"]) for c in inner] == [("charge", "outcome_unknown", 1)]
