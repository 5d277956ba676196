"""Worker loss: the time from a worker's death to its runs being under way again on a live worker.

    python -m bench --db both --sections takeover --kills 20     (the lease: 5 s)

Per database: one live worker (executor ``live``) serves; then, per kill, a fresh worker under a new
executor id starts a session whose one tool body runs for a few seconds, is SIGKILLed mid-body,
and the clock runs until the live worker's recovery commits the call's second attempt (the run is
under way again) and until the run is at rest. The lease is the dominant term by design: a worker
counts as gone only after ``HELIX_DBOS_TAKEOVER_AFTER`` seconds without renewal; what is left is
detection (the watcher polls every lease/4) and DBOS's re-enqueue and dequeue.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import helix_dbos as hx

ROOT = Path(__file__).resolve().parent.parent


def _app(args: argparse.Namespace) -> int:
    """The worker process (``python -m bench.takeover worker ...``)."""
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    effects = Path(args.effects)

    @hx.tool(replay="safe")
    async def slow(ctx: hx.ToolContext) -> str:
        """A slow, safe body."""
        import asyncio

        with open(effects, "a") as f:
            f.write(json.dumps({"session": ctx.session_id, "attempt": ctx.attempt}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        await asyncio.sleep(3)
        return "done"

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("slow", {}, tool_call_id="c0")])
        return ModelResponse(parts=[TextPart("ok")])

    agent = hx.Agent("taker", FunctionModel(reply), tools=[slow])
    with hx.Runtime([agent], database_url=args.db, executor_id=args.executor) as rt:
        print(json.dumps({"ready": rt.executor_id}), flush=True)
        if args.session:
            rt.start("taker", "go", session_id=args.session).result(timeout=120)
        else:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline and not os.path.exists(args.until):
                time.sleep(0.1)
    return 0


def _spawn(db: str, executor: str, effects: Path, env: dict[str, str], session: str = "", until: str = "") -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.takeover", "worker", "--db", db, "--executor", executor, "--effects", str(effects)]
    cmd += ["--session", session] if session else ["--until", until, "--seconds", "3600"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("{"), "worker did not start"
    return proc


def measure(db: str, kills: int, takeover_after: float, workdir: Path) -> dict[str, Any]:
    from helix_dbos.ledger.engine import create_sync_engine, is_sqlite

    env = {**os.environ, "HELIX_DBOS_TAKEOVER_AFTER": str(takeover_after)}
    workdir.mkdir(parents=True, exist_ok=True)
    effects = workdir / "bodies.jsonl"
    until = workdir / "stop"
    live = _spawn(db, "live", effects, env, until=str(until))
    engine = create_sync_engine(db, poolclass=sa.pool.NullPool)
    prefix = "" if is_sqlite(db) else "helix."
    under_way: list[float] = []
    at_rest: list[float] = []
    try:
        for i in range(kills):
            session = uuid.uuid4().hex
            worker = _spawn(db, f"doomed-{i}-{uuid.uuid4().hex[:4]}", effects, env, session=session)
            deadline = time.monotonic() + 60
            while session not in (effects.read_text() if effects.exists() else ""):
                assert time.monotonic() < deadline and worker.poll() is None, "the body never started"
                time.sleep(0.01)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            killed = time.monotonic()
            second = rest = None
            while rest is None and time.monotonic() < killed + takeover_after + 60:
                with engine.connect() as conn:
                    attempts = conn.execute(
                        sa.text(f"SELECT MAX(c.attempts) FROM {prefix}calls c WHERE c.session_id = :s"), {"s": session}
                    ).scalar()
                    status = conn.execute(sa.text(f"SELECT status FROM {prefix}sessions WHERE session_id = :s"), {"s": session}).scalar()
                now = time.monotonic()
                if second is None and attempts is not None and attempts >= 2:
                    second = now - killed
                if status == "completed":
                    rest = now - killed
                time.sleep(0.02)
            assert second is not None and rest is not None, f"kill {i}: not taken over"
            under_way.append(second)
            at_rest.append(rest)
    finally:
        until.touch()
        live.wait(timeout=60)
        engine.dispose()
    return {
        "kills": kills,
        "takeover_after": takeover_after,
        "under_way_median": statistics.median(under_way),
        "under_way_worst": max(under_way),
        "at_rest_median": statistics.median(at_rest),
        "at_rest_worst": max(at_rest),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        p = argparse.ArgumentParser()
        p.add_argument("--db", required=True)
        p.add_argument("--executor", required=True)
        p.add_argument("--effects", required=True)
        p.add_argument("--session", default="")
        p.add_argument("--until", default="")
        p.add_argument("--seconds", type=float, default=3600)
        return _app(p.parse_args(argv[1:]))
    raise SystemExit("python -m bench.takeover worker ...: the takeover figures are `python -m bench --sections takeover`")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
