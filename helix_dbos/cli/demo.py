"""``helix-dbos demo``: kill a real worker mid-tool, relaunch it, and show what recovery did.

The demo never fakes the crash. It spawns a worker process with ``HELIX_DBOS_CRASH_AT`` set to
``after_body:send_email``: the unsafe email body really runs (its effect is written to a file
outside the runtime) and the process exits before the result reaches the ledger. A second worker
with the same executor id relaunches, DBOS recovers the run, and the ledger shows what the
contract promises: the reply was saved first, safe calls keyed on their dispatch id ran again,
the email was not sent twice but answered ``outcome_unknown``, and the model was told so. Two calls
never leave doubt: the transactional booking (its row commits with its result, so the database
decides: the interrupted booking left nothing and ran again) and the reconciled deposit (recovery
asks the payments provider by dispatch id, which says it went through: answered ok, not charged twice).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ToolReturnPart
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import ConfigurationError, HelixError, RunTimeoutError
from ..examples import effects, payments
from ..ledger.engine import check_sqlite_folder, is_sqlite
from ..runtime.floor import transcript
from ..runtime.process.faults import CRASH_EXIT_CODE
from .common import console, ledger, print_json, short, workflow_done
from .render import compact, styled, timeline, tool_names

CRASH_AT = "after_body:send_email"
MESSAGE = "Book me an aisle seat for two at the venue and let them know."
#: How long one demo worker may take (``--timeout``): a cold start on a busy machine, or a real model,
#: can take minutes; the default leaves room for both.
WORKER_TIMEOUT = 300.0


@dataclass
class Demo:
    db_url: str
    workdir: Path
    model: str | None = None
    timeout: float = WORKER_TIMEOUT
    executor: str = field(default_factory=lambda: f"demo-{uuid.uuid4().hex[:6]}")
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def effects_path(self) -> Path:
        return self.workdir / "effects.jsonl"

    @property
    def payments_path(self) -> Path:
        return self.workdir / "payments.jsonl"

    def spawn(self, mode: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
        """One worker process: ``start`` the session, or ``wake`` (relaunch and wait for recovery)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_DBOS_CRASH_AT", "HELIX_DBOS_FAIL_AT", "DBOS__"))}
        env[effects.ENV] = str(self.effects_path)
        env[payments.ENV] = str(self.payments_path)
        if crash_at:
            env["HELIX_DBOS_CRASH_AT"] = crash_at
        args = [sys.executable, "-m", "helix_dbos.cli", "_demo-worker", mode, "--db", self.db_url, "--executor", self.executor, "--session", self.session_id]
        if self.model:
            args += ["--model", self.model]
        args += ["--timeout", str(self.timeout)]
        # the worker's own waits end a little before this, so a slow run is its typed error, not a kill
        try:
            return subprocess.run(args, env=env, check=False, capture_output=True, text=True, timeout=self.timeout + 30)
        except subprocess.TimeoutExpired:
            raise RunTimeoutError(
                f"the demo's worker ({mode}) did not finish within {self.timeout:g} s; the machine may be busy "
                "or the model slow: run it again with a longer --timeout",
                detail=f"session {self.session_id}",
            ) from None


def check_model(model: str | None) -> None:
    """Fail before spawning anything when a real model cannot be built (usually: no API key)."""
    if not model:
        return
    from pydantic_ai.models import infer_model

    try:
        infer_model(model)
    except Exception as exc:  # noqa: BLE001  (pydantic-ai raises several types for unknown providers / missing keys)
        raise ConfigurationError(
            f"cannot use model {model!r}: is the provider's package installed and its API key set?", detail=str(exc)
        ) from None


def worker(mode: str, db_url: str, executor: str, session_id: str, model: str | None, timeout: float = WORKER_TIMEOUT) -> None:
    """Runs inside the spawned process; a crash at ``HELIX_DBOS_CRASH_AT`` exits it mid-call."""
    import helix_dbos as hx

    from ..examples import errands_agent

    runtime = hx.Runtime([errands_agent(model)], database_url=db_url, executor_id=executor)
    runtime.launch()
    try:
        if mode == "start":
            result = runtime.start("errands", MESSAGE, session_id=session_id).result(timeout=timeout)
        else:
            result = runtime.wait(session_id, timeout=timeout)
        workflow_done(result.run_id)
    finally:
        runtime.shutdown()


def _read(demo: Demo) -> dict[str, Any]:
    with ledger(demo.db_url) as reader:
        events = reader.events(demo.session_id, 0, limit=100_000).events
        calls = reader.calls(session_id=demo.session_id, limit=1000)
        runs = reader.session(demo.session_id).runs
        messages = reader.messages(demo.session_id)
    return {"events": events, "calls": calls, "runs": runs, "messages": messages}


def _told(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """What the model read for step 0's calls: the tool results of the request answering them."""
    for m in messages:
        if m["kind"] == "request" and m["step"] == 0:
            request = transcript.load([m["body"]])[0]
            assert isinstance(request, ModelRequest)
            return [(p.tool_name, p.content) for p in request.parts if isinstance(p, ToolReturnPart)]
    return []


def decided_by(call: dict[str, Any]) -> str:
    """Who decided the call's answer: its own body, the database, the outside system, or the model."""
    if call["decided_by"] == "database":
        return "the database"
    if call["decided_by"] == "check":
        return "asking the outside system"
    if call["status"] in ("outcome_unknown", "replay_limit_reached"):
        return "the model must decide"
    return "its result"


def _verdict(call: dict[str, Any], bodies: int, split: int, events: list[dict[str, Any]]) -> str:
    ended = [e["seq"] for e in events if e["type"] == "tool_end" and (e["data"] or {}).get("dispatch_id") == call["dispatch_id"]]
    if call["decided_by"] == "database" and call["status"] == "ok":
        return f"its first transaction never committed, so it provably did nothing and ran again (attempt {call['attempts']})"
    if call["decided_by"] == "check" and call["status"] == "ok" and call["paired_by"] != "body":
        return "the payments provider says it went through: answered ok with its receipt, not run again"
    if call["decided_by"] == "check":
        return f"the provider says it did not happen: ran again (attempt {call['attempts']})"
    if call["status"] in ("outcome_unknown", "replay_limit_reached"):
        return f"paired {call['status']}: its body ran {bodies}× and will not run again"  # noqa: RUF001 (a times sign, on purpose)
    if call["attempts"] > 1:
        return f"ran again after the crash (attempt {call['attempts']}, same dispatch id)"
    if ended and ended[0] <= split:
        return "result saved before the crash: kept, not run again"
    if call["status"] == "not_started":
        return "never started: answered not_started"
    return "ran after the relaunch (first attempt)"


def summary(demo: Demo, data: dict[str, Any], split: int, crash_code: int) -> dict[str, Any]:
    per_call = effects.bodies_by_call(demo.effects_path)
    step0 = [c for c in data["calls"] if c["step"] == 0]
    latest = data["runs"][-1] if data["runs"] else None
    return {
        "session_id": demo.session_id,
        "database": demo.db_url,
        "executor_id": demo.executor,
        "crash_at": CRASH_AT,
        "crashed": crash_code == CRASH_EXIT_CODE,
        "worker_exit_code": crash_code,
        "events_before_crash": split,
        "calls": [
            {
                "tool": c["tool_name"],
                "dispatch_id": c["dispatch_id"],
                "replay": c["replay"],
                "concurrency_group": c["concurrency_group"],
                "status": c["status"],
                "attempts": c["attempts"],
                "bodies_started": per_call.get(c["dispatch_id"], 0),
                "note": c["outcome_note"],
                "decided_by": decided_by(c),
                "check_outcome": c["check_outcome"],
                "verdict": _verdict(c, per_call.get(c["dispatch_id"], 0), split, data["events"]),
            }
            for c in step0
        ],
        "model_was_told": [{"tool": name, "content": content} for name, content in _told(data["messages"])],
        "status": latest["status"] if latest else None,
        "output": latest["output"] if latest else None,
        "recovery_events": [e["data"] for e in data["events"] if e["type"] == "recovery"],
    }


def render(demo: Demo, data: dict[str, Any], split: int, crash: subprocess.CompletedProcess[str], out: dict[str, Any]) -> None:
    events, tools = data["events"], tool_names(data["events"], data["calls"])
    before, after = [e for e in events if e["seq"] <= split], [e for e in events if e["seq"] > split]
    where = demo.db_url if not is_sqlite(demo.db_url) else demo.db_url.removeprefix("sqlite:///")
    console.print(Panel.fit(
        f"[bold]helix-dbos demo[/]: a worker is killed in the middle of a tool call, then relaunched.\n"
        f"database [cyan]{where}[/]  executor [cyan]{demo.executor}[/]  session [cyan]{demo.session_id}[/]",
        border_style="blue",
    ))

    console.print("\n[bold]1. Worker 1 starts the session[/] [dim](HELIX_DBOS_CRASH_AT=" + CRASH_AT + ")[/]")
    console.print(timeline(before, tools))
    append = next((e for e in before if e["type"] == "checkpoint" and e["data"].get("kind") == "append"), None)
    first_body = next((e for e in before if e["type"] == "tool_start"), None)
    if append is not None:
        console.print(
            f"[bold green]Saved first:[/] the reply and its {len(out['calls'])} calls, each with a fresh dispatch id, "
            f"were committed in append checkpoint {short(append['data']['checkpoint_id'], 11)} (event #{append['seq']}) "
            f"before any tool body started (first body: event #{first_body['seq'] if first_body else '-'})."
        )
    if out["crashed"]:
        console.print(
            f"[bold red]✖ worker 1 killed[/] (exit {crash.returncode}) right after send_email's body returned: "
            "the email went out, but its result never reached the ledger."
        )
    else:
        console.print(f"[yellow]worker 1 did not crash (exit {crash.returncode}): the model never called send_email.[/]")

    console.print("\n[bold]2. Worker 2 relaunches with the same executor id; DBOS recovers the run from the ledger[/]")
    console.print(timeline(after, tools))

    table = Table(title="3. What recovery did with each saved call", title_justify="left")
    for name in ("tool", "replay", "group", "dispatch id", "bodies run", "status", "decided by", "what happened"):
        table.add_column(name, overflow="fold")
    for c in out["calls"]:
        table.add_row(c["tool"], c["replay"], c["concurrency_group"] or "", short(c["dispatch_id"]), str(c["bodies_started"]), styled(c["status"]), c["decided_by"], c["verdict"])
    console.print()
    console.print(table)
    console.print("[dim]bodies run = body starts counted by the tools themselves, outside the runtime.[/]")
    for who, label, what in (
        ("the database", "Decided by the database", "transactional: its writes commit with its result, so no result means no effect"),
        ("asking the outside system", "Decided by asking the outside system", "reconciled: recovery asked its check by dispatch id"),
        ("the model must decide", "The model must decide", "the runtime cannot know; the model is told to check before repeating"),
    ):
        names = sorted({c["tool"] for c in out["calls"] if c["decided_by"] == who})
        if names:
            console.print(f"[bold]{label}:[/] {', '.join(names)} [dim]({what})[/]")

    told = Table(title="4. What the model was told (the step's tool results)", title_justify="left")
    told.add_column("tool")
    told.add_column("result", overflow="fold")
    for item in out["model_was_told"]:
        content = item["content"]
        if isinstance(content, dict) and set(content) == {"status", "message"}:  # an answer the runtime gave for the tool
            told.add_row(item["tool"], Text(f'{content["status"]}: "{content["message"]}"', style="bold magenta"))
        else:
            told.add_row(item["tool"], compact(content, 110))
    console.print()
    console.print(told)
    console.print(Text.assemble(("The model's next step: ", "bold"), (str(out["output"]), "italic"), f"  (run {out['status']})"))
    if out["kept"]:
        console.print(f"\n[dim]Explore: helix-dbos show {demo.session_id} --db {demo.db_url}[/]")
    else:
        console.print("\n[dim]The demo's temporary folder and its SQLite database are removed; to keep them and explore the "
                      "session with helix-dbos show, run it with --workdir DIR (or --db URL).[/]")


def run_demo(model: str | None, db: str | None, as_json: bool, workdir: Path | None = None, timeout: float = WORKER_TIMEOUT) -> dict[str, Any]:
    """The demo on ``db`` (else ``HELIX_DBOS_DATABASE_URL``, else a SQLite file in its folder).

    Its folder (the effect logs, and that SQLite file) is ``workdir``, kept; or a temporary
    ``helix-demo-*`` folder, removed at the end, crash or not.
    """
    check_model(model)
    from ..settings import from_environ

    db = db or from_environ().database_url or None
    if db is not None:
        check_sqlite_folder(db)  # here, not as a worker's traceback inside "the demo's first worker failed"
    folder = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="helix-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if not timeout > 0:
            raise ConfigurationError(f"--timeout must be a positive number of seconds, not {timeout!r}")
        return _run(Demo(db_url=db or f"sqlite:///{folder / 'helix_demo.sqlite'}", workdir=folder, model=model, timeout=timeout), as_json, kept=workdir is not None or db is not None)
    finally:
        if workdir is None:
            shutil.rmtree(folder, ignore_errors=True)


def _worker_failed(which: str, proc: subprocess.CompletedProcess[str]) -> HelixError:
    """A worker's typed error (its last stderr line, as the CLI prints one) keeps its code: a slow
    run is ``run_timeout`` here too, not a generic failure."""
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    if "run_timeout" in last or "RunTimeoutError" in last:
        return RunTimeoutError(f"the demo's {which} worker did not see its run end in time; the machine may be busy "
                               "or the model slow: run it again with a longer --timeout", detail=last)
    return HelixError(f"the demo's {which} worker failed", detail=proc.stderr[-3000:])


def _run(demo: Demo, as_json: bool, kept: bool) -> dict[str, Any]:
    started = time.monotonic()
    if not as_json:
        console.print(f"[dim]starting worker 1 (it will be killed at {CRASH_AT}) …[/]")
    crash = demo.spawn("start", CRASH_AT)
    if crash.returncode not in (0, CRASH_EXIT_CODE):
        raise _worker_failed("first", crash)
    with ledger(demo.db_url) as reader:
        split = max((e["seq"] for e in reader.events(demo.session_id, 0, limit=100_000).events), default=0)
    if crash.returncode == CRASH_EXIT_CODE:
        if not as_json:
            console.print("[dim]relaunching worker 2 with the same executor id …[/]")
        wake = demo.spawn("wake", None)
        if wake.returncode != 0:
            raise _worker_failed("relaunched", wake)
    data = _read(demo)
    out = summary(demo, data, split, crash.returncode)
    out["seconds"] = round(time.monotonic() - started, 2)
    out["kept"] = kept
    if as_json:
        print_json(out)
    else:
        render(demo, data, split, crash, out)
        console.print(f"[dim]done in {out['seconds']} s[/]")
    return out

