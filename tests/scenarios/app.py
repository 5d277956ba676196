"""A real application process for crash tests: launched, crashed with ``HELIX_DBOS_CRASH_AT``, relaunched.

Side effects are counted outside the runtime, in append-only files under ``--effects`` (one line per
body start, one per model request), fsynced so a line written before ``os._exit`` survives it.

    python -m tests.scenarios.app --db URL --effects DIR --executor ID start --session SID
    python -m tests.scenarios.app ... wake --session SID          # relaunch: recovery of pending runs
    python -m tests.scenarios.app ... entry --session SID --kind retry [--message M] [--checkpoint CP]

Each command prints one JSON line: the run result and the session's calls.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from opentelemetry import trace
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import helix_dbos as hx
from tests.scenarios import effects

EFFECTS: Path = Path(".")


def effect(kind: str, **data: Any) -> None:
    """Append one fsynced line: the test's own record of what really happened."""
    effects.append(EFFECTS, kind, data)


def _body(name: str, delay: float = 0.0) -> Any:
    async def run(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        # the app's own span inside a body (a no-op unless tracing is on): it belongs to the run's trace
        with trace.get_tracer("tests.scenarios").start_as_current_span("scenario.body", attributes={"tool": name}):
            effect("bodies", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key, pid=os.getpid(), t=time.time())
        if delay:
            import asyncio

            release = os.environ.get("SCENARIO_RELEASE")  # a file the test creates when the body may end
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and not (release and os.path.exists(release)):
                await asyncio.sleep(min(0.05, delay) if release else delay)
            effect("body_ends", tool=name, attempt=ctx.attempt, pid=os.getpid(), t=time.time())
        return {"tool": name, "key": key, "dispatch_id": ctx.dispatch_id, "attempt": ctx.attempt}

    run.__name__ = name
    run.__doc__ = f"The {name} tool."
    return run


# Which tools a scenario's first reply calls, in order. Names encode the policy: safe_*, unsafe_*.
SCENARIOS: dict[str, list[str]] = {
    "safe": ["safe_set"],
    "unsafe": ["unsafe_send"],
    "mixed": ["safe_set", "unsafe_send", "group_a", "group_b", "seq_a", "seq_b"],
    "group": ["group_unsafe", "group_b"],
    "sequential": ["seq_unsafe", "seq_b"],
    "slow": ["slow_safe"],
    "cancel": ["slow_seq", "seq_b"],
    # transactional and reconciled tools
    "tx": ["tx_book"],
    "tx_rogue": ["tx_rogue"],  # a transactional body that tries to end its own transaction (SCENARIO_ROGUE)
    "tx_escape": ["tx_escape"],  # a transactional body that commits its transaction through the driver (SCENARIO_ESCAPE)
    "reconcile": ["rec_charge"],
    "reconcile_seq": ["rec_seq", "seq_b"],
    "seq_reconcile": ["seq_unsafe", "rec_seq"],  # an unsafe call ahead of a reconciled one, in one lane
    "full": ["safe_set", "unsafe_send", "group_a", "group_b", "seq_a", "seq_b", "tx_book", "rec_charge"],
    "odd": ["safe_set", "unsafe_send"],  # with ODD in the reply's text and in every call's arguments
    "slow_pair": ["slow_safe", "slow_unsafe"],
    "slow_one": ["slow_unsafe"],  # one unsafe body that sleeps: DBOS cancels and signals land during it
    "slow_one_then_seq": ["slow_seq_unsafe", "seq_b"],  # an unsafe body that sleeps, and a call behind it
    "stuck": ["stuck_sync"],  # a sync body that never returns (unless SCENARIO_STUCK=0)
    "stuck_tx": ["stuck_tx"],  # the same, transactional: it never returns inside its transaction
    "outage": ["slow_safe", "slow_unsafe"],
    "model_error": [],  # the first model request fails for good (HTTP 400): the failure is the step's reply  # two bodies in flight while a test cuts the database
}

#: What scenario "odd" puts in the model's text and arguments: NUL, lone surrogates, the ledger's escape.
ODD = "nul:\x00 high:\ud800 low:\udfff esc:\u241b0000 end"

#: The transactional tool's own table, in the ledger's database (an app would create it with its own
#: Alembic migration; the scenario creates it at launch).
tx_meta = sa.MetaData()
tx_effects = sa.Table(
    "scenario_tx_effects",
    tx_meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dispatch_id", sa.String(64), nullable=False),
    sa.Column("key", sa.String(64), nullable=False),
)


def _tx_book(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """Book a slot: one row in the app's own table, through the call's transaction."""
    effect("bodies", tool="tx_book", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key)
    conn = ctx.require_connection()
    conn.execute(tx_effects.insert().values(dispatch_id=ctx.require_dispatch_id(), key=key))
    if os.environ.get("SCENARIO_TX_FAIL"):
        raise RuntimeError("the booking system refused the slot")
    booked = conn.execute(sa.select(sa.func.count()).select_from(tx_effects).where(tx_effects.c.dispatch_id == ctx.dispatch_id)).scalar()
    return {"tool": "tx_book", "key": key, "rows_seen": booked}


#: Rogue bodies that reach past ``ctx.connection`` to the driver (no refusal expected: the driver is
#: Python's to call), each changing only what the call's discarded connection holds.
RAW_ROGUES = frozenset({"raw_read_only", "raw_search_path"})


def _steal_owner(conn: Any, sqlite: bool, table: str) -> None:
    """Give another principal's session to a new owner through ``table`` (a view over the ledger)."""
    conn.exec_driver_sql(f"UPDATE {table} SET owner = 'thief'")


def _reach_attempts(conn: Any, sqlite: bool) -> dict[str, Any]:
    """What a body must not reach (settings, the ledger's schema, DBOS's, the private lock table),
    each as a body would try it through ``ctx.connection`` or the driver's connection below it."""

    def driver() -> Any:  # the driver's connection, reached through a result's cursor
        return conn.execute(sa.select(sa.literal(1))).cursor.connection

    def temp_view() -> None:
        conn.exec_driver_sql(f"CREATE TEMP VIEW stolen AS SELECT * FROM {'sessions' if sqlite else 'helix.sessions'}")
        _steal_owner(conn, sqlite, "stolen")

    def raw_read_only() -> None:
        raw = driver()
        if sqlite:
            raw.set_authorizer(None)  # Python can: the guard stops at the driver
            raw.execute("PRAGMA query_only = ON")
        else:
            import psycopg

            psycopg.Cursor(raw).execute("SET default_transaction_read_only = on")  # a cursor built by hand: no guard

    def raw_search_path() -> None:
        raw = driver()
        if sqlite:
            raw.set_authorizer(None)
            raw.execute("PRAGMA foreign_keys = ON")
        else:
            import psycopg

            psycopg.Cursor(raw).execute("SET search_path = helix, public")

    common: dict[str, Any] = {
        "read_only": lambda: conn.exec_driver_sql("PRAGMA query_only = ON" if sqlite else "SET default_transaction_read_only = on"),
        "driver_read_only": lambda: driver().execute("PRAGMA query_only = ON" if sqlite else "SET default_transaction_read_only = on"),
        "temp_view": temp_view,
        "raw_read_only": raw_read_only,
        "raw_search_path": raw_search_path,
    }
    if sqlite:
        return {
            **common,
            "writable_schema": lambda: (  # the schema made writable, then a ledger index entry deleted
                conn.exec_driver_sql("PRAGMA writable_schema = ON"),
                conn.exec_driver_sql("DELETE FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls'"),
            ),
            "sqlite_master": lambda: conn.exec_driver_sql("DELETE FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls'"),
        }
    return {
        **common,
        "alter_schema": lambda: conn.exec_driver_sql("ALTER SCHEMA helix RENAME TO helix_moved"),
        "set_schema": lambda: conn.exec_driver_sql("ALTER TABLE helix.sessions SET SCHEMA public"),
        "alter_database": lambda: conn.exec_driver_sql(
            f"ALTER DATABASE {conn.exec_driver_sql('SELECT current_database()').scalar()} SET search_path = helix, public"
        ),
        "private_lock": lambda: conn.exec_driver_sql("UPDATE helix_private.executor_locks SET lock_key = lock_key + 1"),
        "dbos_enqueue": lambda: conn.exec_driver_sql("SELECT dbos.enqueue_workflow('forged', 'forged')"),
        "driver_set_config": lambda: driver().execute("SELECT set_config('default_transaction_read_only', 'on', false)"),
    }


def _tx_rogue(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """Book a row, then do what a body must not (``SCENARIO_ROGUE``: commit, sql_commit, rollback,
    helix_write), swallow the refusal, and hold the transaction open ``SCENARIO_ROGUE_HOLD`` seconds
    (a test SIGKILLs the process then)."""
    effect("bodies", tool="tx_rogue", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key)
    conn: Any = ctx.require_connection()
    conn.execute(tx_effects.insert().values(dispatch_id=ctx.require_dispatch_id(), key=key))
    how = os.environ.get("SCENARIO_ROGUE", "commit")
    sqlite = conn.dialect.name == "sqlite"
    attempt = {
        "commit": lambda: conn.commit(),
        "rollback": lambda: conn.rollback(),
        "sql_commit": lambda: conn.exec_driver_sql("COMMIT"),
        "helix_write": lambda: conn.exec_driver_sql("UPDATE sessions SET status = 'completed'" if sqlite else "UPDATE helix.sessions SET status = 'completed'"),
        **_reach_attempts(conn, sqlite),
    }[how]
    refused = None
    try:
        attempt()
    except Exception as exc:  # noqa: BLE001 - what refused it (the guard, the driver, SQLite itself)
        refused = type(exc).__name__
    effect("rogue", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, how=how, refused=refused, pid=os.getpid())
    hold = float(os.environ.get("SCENARIO_ROGUE_HOLD", "0"))
    if hold and ctx.attempt == 1:
        time.sleep(hold)
    return {"tool": "tx_rogue", "key": key, "refused": refused}


def _driver_connection_in_frames() -> Any:
    """The runtime's SQLAlchemy connection, found by walking up the body's frame stack."""
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, sa.Connection):
                return value
        frame = frame.f_back  # type: ignore[assignment]
    raise LookupError("no connection in the frames")


def _tx_escape(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """Book a row, then commit the transaction by reaching past ``ctx.connection`` (``SCENARIO_ESCAPE``):
    ``root`` (the result's SQLAlchemy root connection), ``cursor`` (the driver connection of the
    result's cursor), ``frames`` (the runtime's connection found on the frame stack). On SQLite the
    body first turns the runtime's authorizer off through the driver connection (Python can)."""
    effect("bodies", tool="tx_escape", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key)
    conn: Any = ctx.require_connection()
    how = os.environ.get("SCENARIO_ESCAPE", "root")
    result = conn.execute(tx_effects.insert().values(dispatch_id=ctx.require_dispatch_id(), key=key).returning(tx_effects.c.id))
    cursor = result.cursor  # the driver's cursor (RETURNING keeps it open)
    driver = cursor.connection
    result.all()
    if conn.dialect.name == "sqlite":
        driver.set_authorizer(None)
    if how == "root":
        result.context.root_connection.commit()
    elif how == "cursor":
        driver.commit()
    else:
        _driver_connection_in_frames().commit()
    effect("escaped", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, how=how, pid=os.getpid())
    return {"tool": "tx_escape", "key": key}


def _charge(name: str) -> Any:
    def charge(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
        """Charge a card: the outside system's ledger is the charges file, keyed on the dispatch id."""
        effect("bodies", tool=name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key)
        receipt = {"charge_id": f"ch-{ctx.require_dispatch_id()[:8]}", "key": key, "attempt": ctx.attempt}
        effect("charges", dispatch_id=ctx.dispatch_id, receipt=receipt)
        return receipt

    charge.__name__ = name
    return charge


def check_charge(ctx: hx.CheckContext) -> hx.Applied | hx.NotApplied | None:
    """Ask the outside system (the charges file) whether the charge keyed on the dispatch id exists."""
    effect("checks", tool=ctx.tool_name, dispatch_id=ctx.dispatch_id, attempts=ctx.attempts)
    how = os.environ.get("SCENARIO_CHECK", "")
    if how == "raise":
        raise ConnectionError("the payments API is down")
    if how == "timeout":
        time.sleep(5)
    if how == "forever":  # a check that never returns: answered outcome_unknown, its thread never ends
        while True:
            time.sleep(0.5)
    if how == "none":
        return None
    path = EFFECTS / "charges.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else []):
        row = json.loads(line)
        if row["dispatch_id"] == ctx.dispatch_id:
            return hx.Applied(row["receipt"])
    effect("not_applied", tool=ctx.tool_name, dispatch_id=ctx.dispatch_id)  # the verdict that lets the body run again
    return hx.NotApplied()


def stuck_sync(ctx: hx.ToolContext, key: str) -> dict[str, Any]:
    """A sync body that never returns: only the process's exit ends it."""
    effect("bodies", tool=ctx.tool_name, dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key, pid=os.getpid(), t=time.time())
    while os.environ.get("SCENARIO_STUCK", "1") != "0":
        time.sleep(0.5)
    return {"tool": ctx.tool_name, "key": key}


def build_tools(variant: str) -> list[hx.Tool]:
    safe_now = "safe" if variant != "unsafe_now" else "unsafe"
    tools = [
        hx.tool(replay=safe_now, name="safe_set")(_body("safe_set")),
        hx.tool(name="unsafe_send")(_body("unsafe_send")),
        hx.tool(replay="safe", concurrency_group="g", name="group_a")(_body("group_a")),
        hx.tool(replay="safe", concurrency_group="g", name="group_b")(_body("group_b")),
        hx.tool(concurrency_group="g", name="group_unsafe")(_body("group_unsafe")),
        hx.tool(replay="safe", sequential=True, name="seq_a")(_body("seq_a")),
        hx.tool(replay="safe", sequential=True, name="seq_b")(_body("seq_b")),
        hx.tool(sequential=True, name="seq_unsafe")(_body("seq_unsafe")),
        hx.tool(replay="safe", name="slow_safe")(_body("slow_safe", delay=float(os.environ.get("SCENARIO_DELAY", "3")))),
        hx.tool(replay="safe", sequential=True, name="slow_seq")(_body("slow_seq", delay=float(os.environ.get("SCENARIO_DELAY", "3")))),
        hx.tool(transactional=True, name="tx_book")(_tx_book),
        hx.tool(transactional=True, name="tx_rogue")(_tx_rogue),
        hx.tool(transactional=True, name="tx_escape")(_tx_escape),
        hx.tool(reconcile=check_charge, reconcile_timeout=0.5, name="rec_charge")(_charge("rec_charge")),
        hx.tool(reconcile=check_charge, reconcile_timeout=0.5, sequential=True, name="rec_seq")(_charge("rec_seq")),
        hx.tool(name="slow_unsafe")(_body("slow_unsafe", delay=float(os.environ.get("SCENARIO_DELAY", "3")))),
        hx.tool(name="stuck_sync")(stuck_sync),
        hx.tool(transactional=True, name="stuck_tx")(stuck_sync),
        hx.tool(sequential=True, name="slow_seq_unsafe")(_body("slow_seq_unsafe", delay=float(os.environ.get("SCENARIO_DELAY", "3")))),
    ]
    if variant == "removed":
        tools = [t for t in tools if t.name != "safe_set"]
    if variant == "schema_changed":

        async def safe_set(ctx: hx.ToolContext, key: int) -> dict[str, Any]:
            """The safe_set tool, after a deploy changed its schema."""
            effect("bodies", tool="safe_set", dispatch_id=ctx.dispatch_id, attempt=ctx.attempt, key=key)
            return {}

        tools = [t for t in tools if t.name != "safe_set"] + [hx.tool(replay="safe")(safe_set)]
    return tools


def model_function(scenario: str) -> Any:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        responses = sum(isinstance(m, ModelResponse) for m in messages)
        last = messages[-1]
        seen = [p.content for p in getattr(last, "parts", []) if isinstance(p, ToolReturnPart)]
        effect("model", step=responses, pid=os.getpid(), t=time.time(), seen=seen, history=[p.content for m in messages for p in getattr(m, "parts", []) if isinstance(p, TextPart)])
        if scenario == "model_error":
            from pydantic_ai.exceptions import ModelHTTPError

            raise ModelHTTPError(status_code=400, model_name="scripted", body={"error": "bad request"})
        if scenario == "odd":
            # usage given: FunctionModel's token estimate JSON-encodes the messages, which pydantic cannot
            # do for a lone surrogate; arguments as JSON text, as providers send them
            usage = RequestUsage(input_tokens=1, output_tokens=1)
            if responses == 0:
                calls = [ToolCallPart(name, json.dumps({"key": f"{ODD}{i}"}), tool_call_id=f"call-{i}") for i, name in enumerate(SCENARIOS[scenario])]
                return ModelResponse(parts=[TextPart("on it " + ODD), *calls], usage=usage)
            return ModelResponse(parts=[TextPart("done " + ODD)], usage=usage)
        if responses == 0:
            return ModelResponse(
                parts=[TextPart("on it")]
                + [ToolCallPart(name, {"key": f"k{i}"}, tool_call_id=f"call-{i}") for i, name in enumerate(SCENARIOS[scenario])]
            )
        return ModelResponse(parts=[TextPart(f"done after {responses} steps")])

    return reply


def freeze_at(spec: str) -> None:
    """``SCENARIO_FREEZE_AT=<crash point>[:<tool>]``: the process stops itself (SIGSTOP) at that
    boundary, as a VM pause or a starved host would stop it, and goes on where it was when the test
    sends SIGCONT. A test cannot time an outside SIGSTOP between two statements; this one is exact.
    It records a ``frozen`` effect first, so the test knows the process reached the point."""
    from helix_dbos.runtime.flow import bodies

    crash = bodies.crash_point
    want_point, _, want_tool = spec.partition(":")

    def crash_point(point: str, tool_name: str | None = None) -> None:
        if point == want_point and (not want_tool or want_tool == tool_name):
            effect("frozen", point=point, tool=tool_name, pid=os.getpid(), t=time.time())
            # to this very thread: a process-directed SIGSTOP may be taken by another thread, and
            # this one would run on for a moment (into the body) before the group stop reached it
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        crash(point, tool_name)

    bodies.crash_point = crash_point  # type: ignore[assignment]  (the module's name for the fault hook)


def build_agent(scenario: str, variant: str) -> Any:
    """The scenario's agent in the SDK the test asks for (``SCENARIO_SDK``): an ``hx.Agent`` over a
    pydantic-ai ``FunctionModel`` (the default), or an OpenAI Agents SDK ``agents.Agent`` with the same
    tools and script (``tests/scenarios/openai_agents_app.py``)."""
    if os.environ.get("SCENARIO_SDK", "pydantic_ai") == "openai_agents":
        from tests.scenarios import openai_agents_app

        return openai_agents_app.build_agent(scenario, build_tools(variant), SCENARIOS[scenario], effect)
    return hx.Agent("crashy", FunctionModel(model_function(scenario)), tools=build_tools(variant))


def build_runtime(args: argparse.Namespace) -> hx.Runtime:
    agent = build_agent(args.scenario, args.variant)
    # SCENARIO_MAX_RUNNING=N: entries go through the agent's entry queue (their run starts `queued`),
    # and this process takes over no other executor's runs
    queued = os.environ.get("SCENARIO_MAX_RUNNING")
    extra: dict[str, Any] = {"limits": {"crashy": hx.AgentLimits(max_running=int(queued))}, "takeover": False} if queued else {}
    return hx.Runtime([agent], database_url=args.db, executor_id=args.executor, recovery=args.recovery, **extra)


def cli_runtime() -> hx.Runtime:
    """``HELIX_DBOS_APP=tests.scenarios.app:cli_runtime``: the scenario's agent for ``helix-dbos`` commands
    (``SCENARIO``, ``SCENARIO_EFFECTS``), so an operator command can take over this app's runs."""
    global EFFECTS
    EFFECTS = Path(os.environ["SCENARIO_EFFECTS"])
    scenario = os.environ.get("SCENARIO", "mixed")
    return hx.Runtime([build_agent(scenario, "v1")])


def report(rt: hx.Runtime, result: hx.RunResult) -> dict[str, Any]:
    view = rt.session(result.session_id)
    return {
        "status": result.status,
        "output": result.output,
        "run_id": result.run_id,
        "session_id": result.session_id,
        "error_code": result.error_code,
        "calls": [
            {"tool": c.tool_name, "status": c.status, "attempts": len(c.attempts), "note": c.note, "dispatch_id": c.dispatch_id, "step": c.step}
            for c in view.calls
        ],
        "checkpoints": [{"id": c["checkpoint_id"], "kind": c["kind"], "step": c["step"], "superseded": c["superseded_by"]} for c in view.checkpoints],
        "runs": [{"run_id": r["run_id"], "entry": r["entry"], "status": r["status"]} for r in view.runs],
    }


def main(argv: list[str] | None = None) -> int:
    global EFFECTS
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--scenario", default="mixed")
    p.add_argument("--variant", default="v1")
    p.add_argument("--recovery", default="full")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--session", required=True)
    w = sub.add_parser("wake")
    w.add_argument("--session", required=True)
    e = sub.add_parser("entry")
    e.add_argument("--session", required=True)
    e.add_argument("--kind", required=True)
    e.add_argument("--message")
    e.add_argument("--checkpoint")
    v = sub.add_parser("serve", help="stay launched (serving DBOS's queues) until --until exists or --seconds pass")
    v.add_argument("--session", required=True)
    v.add_argument("--seconds", type=float, default=60)
    v.add_argument("--until")
    args = p.parse_args(argv)
    EFFECTS = Path(args.effects)
    EFFECTS.mkdir(parents=True, exist_ok=True)
    if os.environ.get("SCENARIO_FREEZE_AT"):
        freeze_at(os.environ["SCENARIO_FREEZE_AT"])
    from helix_dbos.ledger.engine import create_sync_engine

    engine = create_sync_engine(args.db, poolclass=sa.pool.NullPool)
    for tries_left in (2, 1, 0):
        # Workers spawned together race create_all's check-then-create: on Postgres an advisory lock
        # serialises them; on SQLite the loser sees "already exists" and its next check finds the table.
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(7245001)"))
                tx_meta.create_all(conn)
            break
        except sa.exc.DBAPIError:
            if not tries_left:
                raise
            time.sleep(0.2)
    engine.dispose()
    rt = build_runtime(args).launch()
    try:
        if args.cmd == "serve":
            deadline = time.monotonic() + args.seconds
            print(json.dumps({"serving": rt.executor_id}), flush=True)  # noqa: T201 - the line the test waits for
            while time.monotonic() < deadline and not (args.until and os.path.exists(args.until)):
                time.sleep(0.1)
            return 0
        if args.cmd == "start":
            result = rt.start("crashy", "go", session_id=args.session).result(timeout=60)
        elif args.cmd == "wake":
            result = rt.wait(args.session, timeout=60)
        else:
            kind = args.kind
            if kind == "retry":
                handle = rt.retry(args.session, message=args.message, checkpoint_id=args.checkpoint)
            elif kind == "turn":
                handle = rt.start("crashy", args.message, session_id=args.session)
            else:
                handle = rt.resume(args.session, mode=kind, message=args.message, checkpoint_id=args.checkpoint)
            result = handle.result(timeout=60)
        print(json.dumps(report(rt, result)), flush=True)  # noqa: T201 - the result line the test reads
    finally:
        rt.shutdown()
    return 0


if __name__ == "__main__":
    t0 = time.time()
    code = main(sys.argv[1:])
    sys.exit(code)
