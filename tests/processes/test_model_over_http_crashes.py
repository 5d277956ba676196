"""Crashes, cut streams and a provider that dies, with pydantic-ai's own model classes over HTTP
(``OpenAIChatModel``, ``OpenAIResponsesModel``, ``AnthropicModel``) through helix, both databases.

The provider (``tests/support/provider_server.py``) logs every request as it arrives, so a test
counts the requests per conversation step as the provider saw them; the app
(``tests/scenarios/wire_app.py``) is a real process SIGKILLed at a moment the test observes (a
request held at the provider, a body blocked on a file) and relaunched with the same executor id,
so recovery runs; its tool bodies count themselves in a file outside the runtime.

What must hold: nothing runs twice, a saved reply is never asked for again, a request that was in
flight when the process died has no saved reply and is asked again, an unsafe body killed midway
is answered ``outcome_unknown`` to the model, a stream cut midway and a provider SIGKILLed and
restarted are ridden out by the step's retry budget, and usage per step is what the provider sent
for the request that was answered.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai import Agent

import helix_dbos as hx
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.support.effects import read_effects
from tests.support.procs import Outcome, child_env, free_port, popen_python_m, run_module, spawn_module
from tests.support.provider_server import (
    WIRES,
    Calls,
    Cut,
    Failed,
    Held,
    Incomplete,
    Logged,
    Status,
    Text,
    model_for,
    provider_server,
    quick_retries,
    read_log,
    sdk_model_at,
)
from tests.support.waiting import wait_for

#: Step 1's reply: an unsafe ``charge`` (index 0) and a safe ``lookup`` (index 1).
STEP1 = Calls([("charge", {"card": "c1", "amount": 5}), ("lookup", {"card": "c1"})], usage=(120, 17))


def tool_results(body: dict[str, Any], wire: str) -> dict[int, str]:
    """The tool results a request carries, by the index of the call in the reply that asked for it
    (the provider's call ids end with it), as text, in each wire's words."""
    found: dict[str, Any] = {}
    if wire == "chat":
        found = {m["tool_call_id"]: m["content"] for m in body.get("messages", []) if m.get("role") == "tool"}
    elif wire == "responses":
        found = {i["call_id"]: i["output"] for i in body.get("input", []) if isinstance(i, dict) and i.get("type") == "function_call_output"}
    else:
        for m in body.get("messages", []):
            for block in m.get("content") if isinstance(m.get("content"), list) else []:
                if block.get("type") == "tool_result":
                    found[block["tool_use_id"]] = block.get("content")
    return {int(k.rsplit("_", 1)[1]): _text(v) for k, v in found.items()}


def _text(content: Any) -> str:
    """A tool result's content as text: a string, or the texts of its blocks (Anthropic's form)."""
    if isinstance(content, list):
        return "".join(b["text"] if isinstance(b, dict) and b.get("type") == "text" else json.dumps(b) for b in content)
    return content if isinstance(content, str) else json.dumps(content)


def step_of(r: Logged | dict[str, Any]) -> int:
    """0 for the first request (no tool results yet), 1 for the one that answers step 1's calls."""
    body, wire = (r.body, r.wire) if isinstance(r, Logged) else (r["body"], r["wire"])
    return 1 if tool_results(body, wire) else 0


def usage_rows(db_url: str, run_id: str) -> list[tuple[int, int, int]]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(t.usage.c.step, t.usage.c.input_tokens, t.usage.c.output_tokens)
                                .where(t.usage.c.run_id == run_id).order_by(t.usage.c.step)).all()
    finally:
        engine.dispose()
    return [(int(a), int(b), int(c)) for a, b, c in rows]


class App:
    """``wire_app`` for one session: started (to be killed) and woken (recovery), same executor id."""

    def __init__(self, db_url: str, tmp_path: Path, provider_root: str, wire: str, module: str = "wire_app", extra: tuple[str, ...] = ()) -> None:
        self.effects = tmp_path / "effects"
        self.effects.mkdir(exist_ok=True)
        self.module = f"tests.scenarios.{module}"
        self.args = ["--db", db_url, "--effects", str(self.effects), "--provider", provider_root, "--wire", wire, *extra]
        if module == "wire_app":
            self.args += ["--executor", f"wire-{uuid.uuid4().hex[:8]}"]
        self.session = uuid.uuid4().hex
        self.tmp_path = tmp_path

    def spawn(self) -> subprocess.Popen[str]:
        log = open(self.tmp_path / f"app-{uuid.uuid4().hex[:6]}.stderr", "w")
        return spawn_module(self.module, [*self.args, "start", "--session", self.session], child_env(), stderr=log)

    def wake(self) -> Outcome:
        out = run_module(self.module, [*self.args, "wake", "--session", self.session], child_env(), timeout=240)
        assert out.code == 0 and out.result is not None, out.stderr[-3000:]
        return out

    def bodies(self) -> Counter[str]:
        return Counter(line["tool"] for line in read_effects(self.effects, "bodies"))

    def alive(self, proc: subprocess.Popen[str]) -> bool:
        assert proc.poll() is None, f"the app ended (exit {proc.returncode}) before the moment of the kill"
        return True


def killed_mid_charge(db_url: str, tmp_path: Path, wire: str, *, started: tuple[str, ...] = ("charge",),
                      **app_options: Any) -> tuple[App, dict[str, Any] | None, list[Logged]]:
    """The app SIGKILLed while ``charge``'s body is held, then relaunched with the body let go: the
    app, what the relaunch printed, and every request the provider saw. The kill waits until every
    body named in ``started`` has begun once, so a count the caller asserts does not depend on how
    far a concurrently scheduled sibling got before the signal."""
    with provider_server() as server:
        server.script(STEP1)
        server.always(Text("done", usage=(200, 30)))
        app = App(db_url, tmp_path, server.root, wire, **app_options)
        (app.effects / "hold_charge").touch()
        proc = app.spawn()
        wait_for(f"{', '.join(started)} to start", lambda: app.alive(proc) and all(app.bodies()[t] == 1 for t in started))
        kill(proc)
        (app.effects / "hold_charge").unlink()
        out = app.wake().result
        return app, out, server.requests()


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


#: The OpenAI Agents SDK's own model classes on the same wires (``wire_app --sdk openai_agents``).
SDK_WIRES = [("chat", "openai_agents"), ("responses", "openai_agents")]


@pytest.mark.parametrize(("wire", "live", "sdk"), [*((w, False, "pydantic_ai") for w in WIRES), ("chat", True, "pydantic_ai"),
                                                   ("messages", True, "pydantic_ai"), *((w, False, sdk) for w, sdk in SDK_WIRES)],
                         ids=[*WIRES, "chat-live", "messages-live", "openai_agents-chat", "openai_agents-responses"])
@pytest.mark.kills
def test_killed_with_the_next_request_in_flight_asks_only_that_request_again(db_url: str, tmp_path: Path, wire: str, live: bool, sdk: str) -> None:
    """Step 1's reply asked for an unsafe ``charge`` and a safe ``lookup``; both ran and were saved;
    the app is SIGKILLed while the step-2 request is held at the provider. A request in flight has
    no saved reply, so the relaunch asks step 2 again (with the same tool results) and nothing
    else: step 1 is not asked again, no body runs again, and usage holds what the provider sent for
    the two requests it answered, not the one whose answer went to a dead process. The same with
    ``live_output`` (the request streams, as a DBOS step; the provider streams chat and messages)."""
    with provider_server() as server:
        held = Held(Text("done", usage=(190, 23)))
        server.script(STEP1, held)
        server.always(Text("done", usage=(200, 30)))
        app = App(db_url, tmp_path, server.root, wire, extra=("--sdk", sdk, *(("--live",) if live else ())))
        proc = app.spawn()
        wait_for("the step-2 request at the provider", lambda: app.alive(proc) and len(server.requests()) == 2)
        kill(proc)
        held.release.set()  # its answer goes nowhere: the client is dead
        out = app.wake().result
        requests = server.requests()
    assert out is not None and (out["status"], out["output"]) == ("completed", "done"), out
    assert all(bool(r.body.get("stream")) == (live or wire == "messages") for r in requests)
    assert [step_of(r) for r in requests] == [0, 1, 1]  # step 1 asked once, step 2 twice (one in flight at the kill)
    assert tool_results(requests[2].body, wire) == tool_results(requests[1].body, wire) == {0: "charged 5 to c1", 1: "c1: active"}
    assert app.bodies() == Counter({"charge": 1, "lookup": 1})  # counted by the bodies themselves
    assert {k: (c["status"], c["attempts"]) for k, c in out["calls"].items()} == {"charge": ("ok", 1), "lookup": ("ok", 1)}
    assert usage_rows(db_url, out["run_id"]) == [(0, 120, 17), (1, 200, 30)]


@pytest.mark.kills
@pytest.mark.parametrize(("wire", "sdk"), [*((w, "pydantic_ai") for w in WIRES), *SDK_WIRES],
                         ids=[*WIRES, "openai_agents-chat", "openai_agents-responses"])
def test_killed_mid_unsafe_body_tells_the_model_outcome_unknown(db_url: str, tmp_path: Path, wire: str, sdk: str) -> None:
    """The app is SIGKILLed while ``charge`` (unsafe) blocks mid-body: the relaunch never runs it again,
    and the model, asked step 2 once, reads ``outcome_unknown`` as the call's result (read from the
    request body at the provider); step 1 is not asked again. For pydantic-ai's model classes and for
    the OpenAI Agents SDK's own (the same agent as an ``agents.Agent``)."""
    app, out, requests = killed_mid_charge(db_url, tmp_path, wire, extra=("--sdk", sdk))
    assert out is not None and (out["status"], out["output"]) == ("completed", "done"), out
    assert [step_of(r) for r in requests] == [0, 1]
    told = tool_results(requests[1].body, wire)
    assert "outcome_unknown" in told[0] and told[1] == "c1: active", told
    assert app.bodies()["charge"] == 1 and app.bodies()["lookup"] in (1, 2)  # lookup is safe: it may run again
    assert (out["calls"]["charge"]["status"], out["calls"]["charge"]["attempts"]) == ("outcome_unknown", 1)
    assert usage_rows(db_url, out["run_id"]) == [(0, 120, 17), (1, 200, 30)]


@pytest.mark.parametrize(("sdk", "wire"), [("pydantic_ai", "chat"), ("pydantic_ai", "messages"), ("openai_agents", "chat"), ("openai_agents", "responses")],
                         ids=lambda v: str(v))
def test_a_stream_cut_midway_is_asked_again_by_the_steps_budget(make_runtime: Any, db_url: str, sdk: str, wire: str) -> None:
    """Live output on: the provider sends the first events of the stream, then closes the connection.
    The step's budget asks again (2 requests, both streamed) and the run completes with the whole
    answer; usage is the answered request's, and the one request that streamed to its end is the
    reply saved. For pydantic-ai's model classes and the OpenAI Agents SDK's (``stream_response``)."""
    from helix_dbos.runtime.flow import live

    with provider_server() as server:
        name = f"cut_{sdk}_{wire}"
        if sdk == "pydantic_ai":
            agent = hx.from_pydantic_ai(Agent(model_for(wire, server), name=name), model_retries=quick_retries())
        else:
            from agents import Agent as SdkAgent

            agent = hx.from_openai_agents(SdkAgent(name=name, model=sdk_model_at(wire, server.root)), model_retries=quick_retries())
        rt = make_runtime([agent], live_output=True)
        server.script(Cut(Text("the whole answer", usage=(11, 3)), events=2), Text("the whole answer", usage=(12, 4)))
        result = rt.start(name, "go").result(timeout=180)
        requests = server.requests()
    assert (result.status, result.output) == ("completed", "the whole answer"), result
    assert len(requests) == 2 and all(r.body.get("stream") is True for r in requests)
    assert usage_rows(db_url, result.run_id) == [(0, 12, 4)]
    values = list(live.read(result.run_id, timeout=5))
    ended = [v["request"] for v in values if v["type"] == "end"]
    assert len(ended) == 1 and len({v["request"] for v in values}) <= 2
    streamed = "".join(d["text"] for v in values if v["request"] == ended[0] and v["type"] == "deltas" for d in v["deltas"] if d["kind"] == "text")
    assert streamed == result.output


@pytest.mark.parametrize("sdk", ["pydantic_ai", "openai_agents"])
def test_a_response_failed_mid_stream_is_classified_as_pydantic_ai_classifies_it(make_runtime: Any, db_url: str, sdk: str) -> None:
    """Live output on, the Responses wire: the provider answers 200 and then ends the stream with
    ``response.failed``. A ``server_error`` is asked again within the step's budget (the run
    completes); a ``context_length_exceeded`` is not, and the run fails ``model_request_invalid``. The same for
    pydantic-ai's ``OpenAIResponsesModel`` and the SDK's (``stream_response``)."""
    with provider_server() as server:
        name = f"failed_{sdk}"
        if sdk == "pydantic_ai":
            agent = hx.from_pydantic_ai(Agent(model_for("responses", server), name=name), model_retries=quick_retries())
        else:
            from agents import Agent as SdkAgent

            agent = hx.from_openai_agents(SdkAgent(name=name, model=sdk_model_at("responses", server.root)), model_retries=quick_retries())
        rt = make_runtime([agent], live_output=True)
        server.script(Failed("server_error"), Text("the whole answer", usage=(12, 4)))
        recovered = rt.start(name, "go").result(timeout=180)
        asked = len(server.requests())
        server.script(Failed("context_length_exceeded", "the prompt is too long"))
        refused = rt.start(name, "go").result(timeout=180)
        requests = server.requests()
    assert (recovered.status, recovered.output) == ("completed", "the whole answer"), recovered
    assert asked == 2 and len(requests) == 3 and all(r.body.get("stream") is True for r in requests)
    assert (refused.status, refused.error_code) == ("failed", "model_request_invalid"), refused


@pytest.mark.parametrize("sdk", ["pydantic_ai", "openai_agents"])
def test_an_incomplete_response_is_what_its_sdk_says_and_never_asked_again(make_runtime: Any, db_url: str, sdk: str) -> None:
    """Live output on, the Responses wire: the reply ends with ``response.incomplete`` (the
    provider's token limit) after some text. pydantic-ai records it as a reply (the run's output
    is the text that streamed); the OpenAI Agents SDK's model raises ``ModelBehaviorError`` for it,
    streamed or not, and the run fails ``run_error``. Either way it is asked once."""
    from helix_dbos.runtime.flow import live

    with provider_server() as server:
        name = f"incomplete_{sdk}"
        if sdk == "pydantic_ai":
            agent = hx.from_pydantic_ai(Agent(model_for("responses", server), name=name), model_retries=quick_retries())
        else:
            from agents import Agent as SdkAgent

            agent = hx.from_openai_agents(SdkAgent(name=name, model=sdk_model_at("responses", server.root)), model_retries=quick_retries())
        rt = make_runtime([agent], live_output=True)
        server.script(Incomplete("the whole", usage=(12, 4)))
        result = rt.start(name, "go").result(timeout=180)
        requests = server.requests()
    assert len(requests) == 1 and requests[0].body.get("stream") is True
    if sdk == "pydantic_ai":
        assert (result.status, result.output) == ("completed", "the whole"), result
        values = list(live.read(result.run_id, timeout=5))
        assert "".join(d["text"] for v in values if v["type"] == "deltas" for d in v["deltas"] if d["kind"] == "text") == "the whole"
        assert usage_rows(db_url, result.run_id) == [(0, 12, 4)]
    else:
        assert (result.status, result.error_code) == ("failed", "run_error"), result
        assert "ModelBehaviorError" in str(result.error) and "incomplete" in str(result.error)


def _provider_process(port: int, log: Path, script: list[dict[str, Any]], always: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tests.support.provider_server", "--port", str(port), "--log", str(log),
            "--script", json.dumps(script), "--always", always]
    proc = popen_python_m(argv, child_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None and "serving" in proc.stdout.readline(), "the provider did not come up"
    return proc


#: How long the provider stays down between its SIGKILL and its restart (seconds): longer than the
#: SDK's own retries wait (about 1.5 s), shorter than helix's default budget does (1 + 2 + 4 s).
OUTAGE = 3.0


def provider_killed_mid_run(port: int, log: Path, script: list[dict[str, Any]]) -> Iterator[None]:
    """A provider in a process of its own with ``script`` (its second answer held); once the test has
    started its run (at the ``yield``), SIGKILL the provider when the step-2 request is held there,
    leave the port closed for ``OUTAGE`` s, start a provider again on it answering "done"; stop both
    at the end. A generator the test drives with ``next``, so the run starts while it serves."""
    first = _provider_process(port, log, script, always="unused")
    second = None
    try:
        yield
        wait_for("the step-2 request at the provider", lambda: len(read_log(str(log))) == 2)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        time.sleep(OUTAGE)  # the outage itself, not a wait for a condition
        second = _provider_process(port, log, [], always="done")
        yield
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)


@pytest.mark.kills
def test_a_provider_sigkilled_and_restarted_mid_run_is_ridden_out(make_runtime: Any, db_url: str, tmp_path: Path) -> None:
    """The provider runs in a process of its own; it answers step 1 and is SIGKILLed while it holds
    the step-2 request, then started again on the same port 3 s later. The default budget (4
    requests, 1 + 2 + 4 s apart) rides the outage out (the refused connections cost requests the
    provider never sees); the run completes, with step 1 asked once and usage from each provider
    that answered."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    port, log = free_port(), tmp_path / "provider.jsonl"
    outage = provider_killed_mid_run(port, log, [{"calls": [["lookup", {"card": "c1"}]], "usage": [120, 17]}, {"held": {"text": "lost"}}])
    next(outage)
    try:
        model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(api_key="k", base_url=f"http://127.0.0.1:{port}/v1"))
        agent: Agent[None, str] = Agent(model, name="outage")

        @agent.tool_plain(metadata={"replay": "safe"})
        def lookup(card: str) -> str:
            return f"{card}: active"

        rt = make_runtime([agent])  # the runtime's default budget
        handle = rt.start("outage", "go")
        next(outage)
        result = handle.result(timeout=180)
    finally:
        outage.close()
    logged = read_log(str(log))
    assert (result.status, result.output) == ("completed", "done"), result
    assert [step_of(r) for r in logged] == [0, 1, 1]  # step 1 once; step 2 at the first provider, then the second
    assert usage_rows(db_url, result.run_id) == [(0, 120, 17), (1, 10, 5)]


def test_three_500s_are_ridden_out_by_the_default_budget(make_runtime: Any) -> None:
    """A plain pydantic-ai agent with the runtime's defaults (4 requests per step): three 500s, then
    the reply; the run completes on the provider's fourth request."""
    with provider_server() as server:
        rt = make_runtime([Agent(model_for("chat", server), name="five")])
        server.script(*[Status(500, headers={"retry-after-ms": "100"})] * 3, Text("done"))
        result = rt.start("five", "go").result(timeout=180)
        assert (result.status, result.output) == ("completed", "done"), result
        assert len(server.requests()) == 4
