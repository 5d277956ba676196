"""``helix-dbos``: the demo, ledger reads, entries and answers, migrations and recovery, from a shell.

Every command takes ``--db URL`` (default: the runtime's own resolution order) and, but ``serve``, ``--json``.
Commands that need the agents load the same app as the service (``HELIX_DBOS_APP``).
Exit status: 0 done, 1 a typed refusal (printed with its code), 2 a usage error.
"""

from __future__ import annotations

import getpass
import json
import logging
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.panel import Panel
from rich.text import Text

from .. import apikeys
from ..errors import NotFoundError, RunTimeoutError, ValidationError
from . import reads, serving
from .common import (
    DbOption,
    JsonOption,
    TimeoutOption,
    check_priority,
    check_session_id,
    console,
    database_url,
    err_console,
    esc,
    executor_ever_ran,
    launched,
    model_json,
    print_json,
    resolve_ids,
    short,
    tolerant_streams,
    typed_errors,
    workflow_done,
)
from .render import (
    styled,
)

if TYPE_CHECKING:
    from ..runtime import RunHandle, RunResult, Runtime

# Only typer, rich and the light parts of helix_dbos load at import: ``--help`` (and a typo) answer
# at once. DBOS, SQLAlchemy, pydantic-ai and the runtime load inside the commands that use them
# (tests/processes/test_cli_imports.py holds the line; bench/imports.py times it).

app = typer.Typer(
    name="helix-dbos",
    help="LLM agents as DBOS workflows over the Helix ledger: demo, inspect and operate sessions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

@app.callback()
def _before_every_command() -> None:
    tolerant_streams()


class ResumeMode(str, Enum):
    continue_ = "continue"
    with_message = "with_message"
    from_checkpoint = "from_checkpoint"


class StopKind(str, Enum):
    interrupt = "interrupt"
    abort = "abort"


class WorkerMode(str, Enum):
    start = "start"
    wake = "wake"


# --- output helpers ----------------------------------------------------------------------------------


def _run_json(result: RunResult) -> dict[str, Any]:
    from .. import wire

    return model_json(wire.run_out(result))  # type: ignore[no-any-return]


def _print_run(result: RunResult, as_json: bool) -> None:
    if as_json:
        print_json(_run_json(result))
        return
    console.print(f"run [cyan]{esc(result.run_id)}[/] of session [cyan]{esc(result.session_id)}[/]: ", styled(result.status))
    if result.output is not None:
        console.print(Panel(Text(str(result.output) if isinstance(result.output, str) else json.dumps(result.output, indent=2)), title="output", expand=False))
    if result.error_code:
        console.print(f"[red]{esc(result.error_code)}[/]: {esc(result.error or '')}")
    if result.status == "suspended_client_tool":  # the status names every wait: approvals and client tools alike
        kinds = sorted({"an approval" if p.kind == "approval" else "a client tool" for p in result.pending})
        console.print(f"  suspended, waiting for {' and '.join(kinds) or 'answers'}")
    for p in result.pending:
        verb = f"approve {result.session_id} {p.dispatch_id} [--deny]" if p.kind == "approval" else f"submit {result.session_id} {p.dispatch_id} --result JSON"
        console.print(f"  waiting: {esc(p.tool_name)}({esc(json.dumps(p.args))}) → [bold]helix-dbos {esc(verb)}[/]")


LiveOption = Annotated[bool, typer.Option("--live", help="Print the model's output as it streams (best-effort).")]
PriorityOption = Annotated[
    int | None,
    typer.Option("--priority", help="Where an enqueued run waits among its owner's queued runs: lower goes first, 1 to 2147483647 (docs/scaling.md)."),
]


def _wait_live(runtime: Runtime, handle: RunHandle, timeout: float, live: bool) -> RunResult:
    """``_wait``, printing the run's text deltas and tool calls as they stream, then a newline."""
    if not live:
        return _wait(runtime, handle, timeout)
    import threading

    def show() -> None:
        try:
            for value in runtime.live(handle.run_id, timeout=timeout):
                for d in value.get("deltas", []):
                    if d["kind"] == "text":
                        console.print(d["text"], end="", soft_wrap=True, highlight=False, markup=False)
                    elif d.get("tool_name"):
                        console.print(f"\n→ {d['tool_name']}", end="", highlight=False, markup=False)
                if value.get("type") == "end":
                    console.print()
        except Exception:  # best effort: the result below is what counts; say why the live view stopped
            logging.getLogger("helix_dbos").debug("live output display stopped", exc_info=True)

    printer = threading.Thread(target=show, daemon=True)
    printer.start()
    result = _wait(runtime, handle, timeout)
    printer.join(5)
    return result


def _wait(runtime: Runtime, handle: RunHandle, timeout: float) -> RunResult:
    """The run once at rest; on timeout, its state now and a word on where it will go on."""
    try:
        result = handle.result(timeout=timeout)
        workflow_done(handle.run_id)
        return result
    except RunTimeoutError:
        err_console.print(
            f"[yellow]still running after {timeout:g} s; it goes on when executor {esc(repr(runtime.executor_id))} is next launched "
            f"(or: helix-dbos recover --executor {esc(runtime.executor_id)})[/]"
        )
        return runtime.get_run(handle.run_id)


# --- the demo ----------------------------------------------------------------------------------------


@app.command()
@typed_errors
def demo(
    model: Annotated[str | None, typer.Option("--model", help="A real pydantic-ai model ('provider:name'); needs its credentials.")] = None,
    db: Annotated[str | None, typer.Option("--db", help="Database URL. Default: HELIX_DBOS_DATABASE_URL, else a SQLite file in the demo's folder.")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Keep the demo's folder (effect logs, SQLite file) here. Default: a temporary folder, removed at the end.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each of the demo's two workers may take (a busy machine or a real model may need more).")] = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Kill a worker in the middle of a tool call, relaunch it, and show what recovery did (offline; a throwaway SQLite file by default)."""
    from . import demo as demo_mod

    out = demo_mod.run_demo(model, db, as_json, workdir, timeout)
    if not out["status"]:
        raise typer.Exit(1)


@app.command("_demo-worker", hidden=True)
def demo_worker(
    mode: WorkerMode,
    db: Annotated[str, typer.Option("--db")],
    executor: Annotated[str, typer.Option("--executor")],
    session: Annotated[str, typer.Option("--session")],
    model: Annotated[str | None, typer.Option("--model")] = None,
    timeout: Annotated[float, typer.Option("--timeout")] = 300.0,
) -> None:
    from . import demo as demo_mod

    demo_mod.worker(mode.value, db, executor, session, model, timeout)


# --- reads -------------------------------------------------------------------------------------------


reads.register(app)  # here, so `--help` lists them where they always were


# --- entries and answers ------------------------------------------------------------------------------


@app.command()
@typed_errors
def start(
    agent: str,
    message: str,
    session: Annotated[str | None, typer.Option("--session", help="An existing session: a new turn of it.")] = None,
    timeout: TimeoutOption = 120.0,
    db: DbOption = None,
    as_json: JsonOption = False,
    live: LiveOption = False,
    priority: PriorityOption = None,
) -> None:
    """Start a session of AGENT (or a new turn of --session) and wait until it is at rest."""
    if not message:
        raise ValidationError("the message must not be empty", detail={"field": "message"})  # before launching
    check_priority(priority)
    if session is not None:
        check_session_id(session)  # before launching: a refusal costs no DBOS launch
    with launched(db, live_output=live) as rt:
        handle = rt.start(agent, message, session_id=session, priority=priority)
        _print_run(_wait_live(rt, handle, timeout, live and not as_json), as_json)


@app.command()
@typed_errors
def resume(
    session_id: str,
    mode: Annotated[ResumeMode, typer.Option("--mode")] = ResumeMode.continue_,
    message: Annotated[str | None, typer.Option("--message")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="A saved append checkpoint (mode from_checkpoint).")] = None,
    timeout: TimeoutOption = 120.0,
    db: DbOption = None,
    as_json: JsonOption = False,
    live: LiveOption = False,
    priority: PriorityOption = None,
) -> None:
    """Resume a session: recover its saved step (continue), redirect it (with_message) or rewind (from_checkpoint)."""
    check_priority(priority)
    if mode is ResumeMode.continue_ and (message is not None or checkpoint is not None):
        raise ValidationError("--mode continue takes neither --message nor --checkpoint (it recovers the saved step as it is)")
    if mode is ResumeMode.with_message and (not message or checkpoint is not None):
        raise ValidationError("--mode with_message needs --message (and takes no --checkpoint; that is --mode from_checkpoint)")
    if mode is ResumeMode.from_checkpoint and (not checkpoint or message is not None):
        raise ValidationError("--mode from_checkpoint needs --checkpoint (a saved append, see `helix-dbos show`) and takes no --message")
    check_session_id(session_id)
    session_id, _ = resolve_ids(db, session_id)
    with launched(db, live_output=live) as rt:
        handle = rt.resume(session_id, mode=mode.value, message=message, checkpoint_id=checkpoint, priority=priority)
        _print_run(_wait_live(rt, handle, timeout, live and not as_json), as_json)


@app.command()
@typed_errors
def retry(
    session_id: str,
    message: Annotated[str | None, typer.Option("--message")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint")] = None,
    timeout: TimeoutOption = 120.0,
    db: DbOption = None,
    as_json: JsonOption = False,
    priority: PriorityOption = None,
) -> None:
    """Retry after a failed or interrupted run (recovery), or redirect it with --message."""
    check_priority(priority)
    if checkpoint is not None and not message:
        raise ValidationError("--checkpoint needs --message: the message redirects the saved step")
    if message is not None and not message:
        raise ValidationError("--message must not be empty")
    check_session_id(session_id)
    session_id, _ = resolve_ids(db, session_id)
    with launched(db) as rt:
        _print_run(_wait(rt, rt.retry(session_id, message=message, checkpoint_id=checkpoint, priority=priority), timeout), as_json)


@app.command()
@typed_errors
def stop(
    session_id: str,
    kind: Annotated[StopKind, typer.Option("--kind")] = StopKind.interrupt,
    by: Annotated[str | None, typer.Option("--by", help="Who asked (kept in the ledger).")] = None,
    timeout: TimeoutOption = 60.0,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop the session's run: finished calls keep their results, calls not started are answered run_stopped."""
    check_session_id(session_id)
    session_id, _ = resolve_ids(db, session_id)
    with launched(db) as rt:
        receipt = rt.stop(session_id, kind=kind.value, requested_by=by or getpass.getuser())
        try:
            result = rt.wait(session_id, timeout=timeout)
        except RunTimeoutError:
            result = rt.get_run(receipt.run_id)
    if as_json:
        print_json({**model_json(receipt), "run": _run_json(result)})
    else:
        console.print(f"stop recorded for run [cyan]{esc(receipt.run_id)}[/] ({esc(receipt.status)})")
        _print_run(result, False)


def _answer_output(receipt: Any, rt: Runtime, timeout: float, as_json: bool) -> None:
    run = _wait(rt, receipt.run, timeout) if receipt.run is not None else None
    if as_json:
        print_json({"session_id": receipt.session_id, "dispatch_id": receipt.dispatch_id, "remaining": receipt.remaining, "run": _run_json(run) if run else None})
        return
    console.print(f"answer recorded for call [cyan]{esc(receipt.dispatch_id)}[/]")
    if receipt.remaining:
        console.print(f"still waiting for: {esc(', '.join(receipt.remaining))}")
    if run is not None:
        _print_run(run, False)


@app.command()
@typed_errors
def approve(
    session_id: str,
    dispatch_id: str,
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve.")] = False,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Who decided (default: your user name).")] = None,
    timeout: TimeoutOption = 120.0,
    db: DbOption = None,
    as_json: JsonOption = False,
    priority: PriorityOption = None,
) -> None:
    """Approve (or --deny) a call waiting for approval; the last answer continues the run here.

    SESSION_ID and DISPATCH_ID may be any unique prefix (tables print the first 8 characters).
    """
    check_priority(priority)
    check_session_id(session_id)
    session_id, dispatch = resolve_ids(db, session_id, dispatch_id)
    dispatch_id = dispatch or dispatch_id
    with launched(db) as rt:
        receipt = rt.approve(session_id, dispatch_id, approved=not deny, reason=reason, actor=actor or getpass.getuser(), priority=priority)
        _answer_output(receipt, rt, timeout, as_json)


@app.command()
@typed_errors
def submit(
    session_id: str,
    dispatch_id: str,
    result: Annotated[str | None, typer.Option("--result", help="The client tool's result, as JSON.")] = None,
    error: Annotated[str | None, typer.Option("--error", help="The client tool's error instead of a result.")] = None,
    timeout: TimeoutOption = 120.0,
    db: DbOption = None,
    as_json: JsonOption = False,
    priority: PriorityOption = None,
) -> None:
    """Answer a client-tool call with exactly one of --result (JSON) or --error.

    SESSION_ID and DISPATCH_ID may be any unique prefix (tables print the first 8 characters).
    """
    if (result is None) == (error is None):
        raise ValidationError("give exactly one of --result JSON or --error MESSAGE" + (" (not both)" if result is not None else ""))
    if error is not None and not error:
        raise ValidationError("--error must not be empty")
    check_priority(priority)
    check_session_id(session_id)
    try:
        value = json.loads(result) if result is not None else None
    except ValueError as exc:
        raise ValidationError(f"--result must be JSON: {exc}") from None
    session_id, dispatch = resolve_ids(db, session_id, dispatch_id)
    dispatch_id = dispatch or dispatch_id
    with launched(db) as rt:
        _answer_output(rt.submit_tool_result(session_id, dispatch_id, result=value, error=error, priority=priority), rt, timeout, as_json)


# --- operations ---------------------------------------------------------------------------------------


@app.command()
@typed_errors
def migrate(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Bring the ledger's tables and audit views to the newest revision (what `dbos migrate` runs)."""
    from . import admin

    url = database_url(db)
    rev = admin.migrate(url)
    from sqlalchemy.engine import make_url

    shown = make_url(url).render_as_string(hide_password=True)
    if as_json:
        print_json({"database": shown, "revision": rev})
    else:
        console.print(f"helix ledger at revision [bold]{esc(rev)}[/] in {esc(shown)}")


@app.command()
@typed_errors
def recover(
    executor: Annotated[str, typer.Option("--executor", help="The dead executor whose pending runs to take over.")],
    timeout: TimeoutOption = 300.0,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Take over a dead executor's pending runs and run them to rest here (its process must be gone)."""
    if not executor_ever_ran(db, executor):
        raise NotFoundError(f"no run in this ledger ever ran on executor {executor!r}; check the id (`helix-dbos show SESSION` lists each run's executor)")
    with launched(db) as rt:
        ids = rt.recover_executor(executor)
        done: list[dict[str, Any]] = []
        for run_id in ids:
            try:
                done.append(_run_json(rt.wait_run(run_id, timeout=timeout)))
                workflow_done(run_id)
            except RunTimeoutError:
                done.append({"run_id": run_id, "status": "running"})
    if as_json:
        print_json({"executor_id": executor, "runs": done})
        return
    if not ids:
        console.print(f"executor [cyan]{esc(executor)}[/] has no pending runs to take over (they finished, or were recovered already)")
        return
    console.print(f"recovered {len(ids)} run(s) of executor [cyan]{esc(executor)}[/]")
    for r in done:
        console.print(f"  run {esc(r['run_id'])} ({esc(short(r.get('session_id')))}): ", styled(r["status"]))


@app.command("audit-role")
@typed_errors
def audit_role(
    name: str,
    password: Annotated[str | None, typer.Option("--password", help="Login password (omit for trust/peer auth).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a read-only Postgres role for auditors: SELECT on schemas helix and dbos, nothing else."""
    from . import admin

    statements = admin.create_audit_role(database_url(db), name, password)
    if as_json:
        print_json({"role": name, "statements": statements})
    else:
        console.print(f"role [bold]{esc(name)}[/] can now read schemas helix and dbos (read-only):")
        for s in statements:
            console.print(f"  [dim]{esc(s)};[/]")


class Role(str, Enum):
    operator = "operator"
    approver = "approver"


@app.command("api-key")
@typed_errors
def api_key(
    principal: Annotated[str, typer.Argument(help="Who the key authenticates (owner of the sessions it starts).")],
    role: Annotated[list[Role] | None, typer.Option("--role", help="operator (every session: stop, resume, retry) or approver (decide approvals on any session); repeatable.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Mint an API key for the service: give the key to its holder, put the entry in HELIX_DBOS_API_KEYS.

    The service stores only the entry (a SHA-256 digest), so a leaked environment leaks no key.
    """
    roles = {r.value for r in role or []}
    try:
        apikeys.check_principal(principal)
        apikeys.parse(apikeys.entry_line("probe", principal, roles))  # the same rules the service applies
    except ValueError as exc:
        raise ValidationError(str(exc).replace("entry 1: ", "")) from None
    key = apikeys.new_key()
    entry = apikeys.entry_line(key, principal, roles)
    if as_json:
        print_json({"principal": principal, "roles": sorted(roles), "key": key, "entry": entry})
        return
    console.print(f"key for [bold]{esc(principal)}[/] (shown once; hand it over, do not store it):\n  {esc(key)}")
    console.print(f"add this entry to {apikeys.ENV} (comma- or newline-separated):\n  {esc(entry)}")


serving.register(app)  # last, so `--help` lists them where they always were


if __name__ == "__main__":
    app()
