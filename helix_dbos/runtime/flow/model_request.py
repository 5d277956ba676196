"""The model request; its reply is recorded by the ledger, once, before anything acts on it.

Recovery never asks the model again for a reply that was recorded. The reply is not a DBOS step
(whose lookup and record cost two transactions): ``durable.record_reply`` writes it as the
workflow's ``helix.reply#k`` in one ledger transaction, and a replay reads it back before asking
(``durable.replayed_reply``); retries of a provider error are this module's own (``ask``). Live
output streams its deltas on the run's DBOS stream, which needs a step's context, so with
``live_output`` the request stays a DBOS step and DBOS records the reply.

The transcript is read from the ledger at each request and is never an input or an output:
recording it per step would make storage grow with the square of the conversation. The stop
record is read in the same breath, so a stop lands before the next model request is paid for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

import sqlalchemy as sa

from ...definitions import Agent
from ...errors import StoreUnavailableError
from ...ledger import rate
from ...ledger import usage as usage_rows
from ...ledger.names import agent_rate_key
from ...ledger.user_json import JsonObject
from ..floor import codec, fence, transcript
from ..floor.durable import plain_tx
from ..floor.records import ModelReply, PlannedCall, Preread, Reply, ReplyUsage, StoppedReply
from ..floor.registry import Env
from ..process import tracing
from . import provider_errors, scopes
from .planning import plan_calls

log = logging.getLogger("helix_dbos")

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelResponse


def _usage(response: ModelResponse) -> ReplyUsage:
    u = response.usage
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": getattr(u, "cache_read_tokens", 0),
        "cache_write_tokens": getattr(u, "cache_write_tokens", 0),
    }


def _read(conn: sa.Connection, run_id: str, session_id: str, after_seq: int) -> tuple[str | None, int, list[tuple[int, Any]]]:
    """The fence, the stop record, how many of the session's messages are superseded (a rewind
    since the cache was filled changes it), and the active messages after ``after_seq``: one
    statement, whether or not anything was added (``fence.new_messages``)."""
    stop, rows = fence.new_messages(conn, run_id, session_id, after_seq, "model request")
    if stop is not None:
        return stop, 0, []
    return None, int(rows[0].superseded), [(int(r.seq), r.body) for r in rows if r.seq is not None]


def final_output(agent: Agent, response: ModelResponse, planned: Sequence[PlannedCall]) -> tuple[bool, Any]:
    """Whether this reply gives the run its final output, and that output as the run will store it:
    a ``final_result`` that passed validation, or (an agent without ``output_type``) a reply with
    no call at all, whose text is the output (``commits.commit_without_bodies``)."""
    finish = next((p for p in planned if p.kind == "finish" and p.status == "ok"), None)
    if finish is not None:
        return True, finish.result
    if agent.output_type is None and not planned:
        return True, transcript.reply_text(response)
    return False, None


def check_usage_limits(limits: Any, used: Mapping[str, int], reply: ModelReply) -> None:
    """pydantic-ai's ``UsageLimits`` over a run: its recorded requests plus this reply; the request
    count is ``max_steps``. Raised inside the model step, so the reply that went over is recorded
    with the failure, as pydantic-ai raises after the response."""
    from ...errors import UsageLimitExceededError

    u = reply.usage
    inp, out = used["input_tokens"] + int(u["input_tokens"] or 0), used["output_tokens"] + int(u["output_tokens"] or 0)
    this = int(u["input_tokens"] or 0) + int(u["output_tokens"] or 0)
    totals = {"input_tokens_limit": inp, "output_tokens_limit": out, "total_tokens_limit": used["total_tokens"] + this}
    totals["tool_calls_limit"] = used["tool_calls"] + sum(1 for p in reply.planned if p.kind == "tool")
    for name, value in totals.items():
        limit = getattr(limits, name, None)
        if limit is not None and value > limit:
            raise UsageLimitExceededError(f"the run exceeded its {name} of {limit} ({value})", detail={name: limit, "used": value})


class RecordedFailure(Exception):
    """A replay of a model request that failed: the failure as it was recorded, never asked again."""

    def __init__(self, code: str, error: str) -> None:
        super().__init__(error)
        self.code, self.error = code, error


class ModelRequestFailed(Exception):
    """Asking the model (after its read) raised ``cause``: the failure is recorded as the step's reply.

    The typed form of what was an attribute set on the foreign exception. It never leaves the model
    request: ``cause`` is raised again, unchanged, where the outcome has been recorded (``reraise``).
    ``cause`` is an argument as well, so the wrapper survives a pickle with it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause

    def reraise(self) -> NoReturn:
        """Raise what the model request raised, with its own ``__cause__`` kept."""
        raise self.cause from self.cause.__cause__


async def ask(e: Env, run_id: str, session_id: str, agent_name: str, step: int) -> Reply:
    """The model request with its retries, outside any DBOS step (see the module's docstring);
    ``e``: the launch's agents, transcript cache, rate limits and live-output switch.

    One budget per step (the agent's ``ModelRetries``), counted in requests as the provider sees
    them: the provider SDK's own retries are off (``_settings``). A retryable provider error waits
    at least what the provider asked for (``Retry-After``/``retry-after-ms``), with jitter; when the
    budget is spent, or the provider asks to wait past ``max_retry_after``, the step fails with the
    provider error's typed code (``provider_errors.typed``). Which errors are worth another request
    is the agent's to say (``is_retryable``): its adapter knows its SDK's errors."""
    agent = e.agent(agent_name)
    policy = agent.retry_policy()
    started = time.monotonic()
    attempt = 0
    checked = Checked()  # the step's input checks run once, whichever request of the budget runs them
    while True:
        attempt += 1
        try:
            return await one_request(e, run_id, session_id, agent_name, step, checked)
        except ModelRequestFailed as failed:
            cause = failed.cause
            wait = policy.wait(attempt, provider_errors.retry_after(cause)) if attempt < policy.attempts and agent.is_retryable(cause) else None
            if wait is None:
                typed = provider_errors.typed(cause, attempt, time.monotonic() - started)
                if typed is None:
                    raise
                raise ModelRequestFailed(typed) from cause
            log.warning("run %s step %s: model request %s of %s failed (%s), asking again in %.1f s",
                        run_id, step, attempt, policy.attempts, cause, wait)
            stop = await _wait_unless_stopped(run_id, wait)
            if stop is not None:  # a stop during the wait is honoured before the next request is paid for
                return StoppedReply(stop)


async def _wait_unless_stopped(run_id: str, seconds: float) -> str | None:
    """Wait ``seconds`` (a provider's ``Retry-After`` may ask for a minute), reading the run's stop
    record every ``_STOP_POLL`` s: the stop's kind as soon as one is found, else ``None``."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        await asyncio.sleep(min(left, _STOP_POLL))
        stop = await plain_tx(_stop_kind, run_id)
        if stop is not None:
            return stop
    return None


async def live_model_request_step(e: Env, run_id: str, session_id: str, agent_name: str, step: int) -> Reply:
    """The model request as a DBOS step (live output), with the same retry budget as ``ask`` inside
    it (DBOS's own step retries are off): DBOS records the reply, or what the request raised in the
    end. ``e`` is bound by the workflow (``functools.partial``): DBOS hands the step only the
    arguments it was started with."""
    try:
        return await ask(e, run_id, session_id, agent_name, step)
    except ModelRequestFailed as failed:
        failed.reraise()


class Checked:
    """The input checks of one step (``Agent.check_input``), once they ran: a request asked again
    within the step's budget records the same results with its reply instead of running them again."""

    __slots__ = ("input",)

    def __init__(self) -> None:
        self.input: list[JsonObject] | None = None


async def one_request(e: Env, run_id: str, session_id: str, agent_name: str, step: int, checked: Checked | None = None) -> Reply:
    """One model request, no retry, inside its ``helix.model_request`` span (not a DBOS step: ``ask``
    retries it, ``live_model_request_step`` makes it one)."""
    with tracing.span(tracing.MODEL_REQUEST_SPAN, run_id, session_id=session_id, agent=agent_name, step=step) as s:
        reply = await _model_request(e, run_id, session_id, agent_name, step, checked or Checked())
        if isinstance(reply, ModelReply):
            usage = reply.usage
            tracing.annotate(s, model=reply.model_name, calls=len(reply.planned),
                             input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"])
        else:
            tracing.annotate(s, stopped=reply.stopped)
        return reply


def preread(conn: sa.Connection, e: Env, run_id: str, session_id: str, step: int) -> Preread:
    """What ``_model_request`` reads first, read now, inside the transaction that just prepared the
    run (its fence passed there): the request then pays no transaction of its own for it. A stop
    that lands between this commit and the request is seen by the append's fence instead, as one
    landing during the request is."""
    last_seq, seen_superseded, _ = e.transcripts.get(session_id)
    stop, superseded, rows = _read(conn, run_id, session_id, last_seq)
    if stop is None and last_seq >= 0 and superseded != seen_superseded:
        last_seq = -1
        stop, superseded, rows = _read(conn, run_id, session_id, last_seq)
    return Preread(step, last_seq, stop, superseded, rows)


async def _model_request(e: Env, run_id: str, session_id: str, agent_name: str, step: int, checked: Checked) -> Reply:
    agent = e.agent(agent_name)
    last_seq, seen_superseded, loaded = e.transcripts.get(session_id)
    pre = e.prereads.take(run_id)
    if pre is not None and pre.step == step and pre.base in (last_seq, -1):
        if pre.base == -1:
            last_seq, loaded = -1, []
        stop, superseded, rows = pre.stop, pre.superseded, pre.rows
    else:
        stop, superseded, rows = await plain_tx(_read, run_id, session_id, last_seq)
        if stop is None and last_seq >= 0 and superseded != seen_superseded:  # rewound since: read it whole
            last_seq, loaded = -1, []
            stop, superseded, rows = await plain_tx(_read, run_id, session_id, last_seq)
    if stop is not None:
        return StoppedReply(stop)
    try:
        return await _asked(e, agent, run_id, session_id, step, last_seq, superseded, loaded, rows, checked)
    except _StoppedWhileWaiting as stopped:
        return StoppedReply(stopped.kind)
    except Exception as exc:
        if fence.is_fenced(exc) or isinstance(exc, StoreUnavailableError):  # the run's or the store's, not the model's
            raise
        raise ModelRequestFailed(exc) from exc


#: How long a granted request may take to reach the wire (seconds). A provider counts requests as they
#: arrive, so the window is counted over ``period + SEND_ALLOWANCE + SEND_MARGIN`` at grant time and a request that
#: is not on its way within the allowance of its grant's transaction starting takes a fresh grant:
#: then no ``period`` of send times holds more than ``n`` (two sends n grants apart are at least
#: ``period + allowance`` apart at grant time and at most ``allowance`` later each).
SEND_ALLOWANCE: Final = 0.25
#: The time a request may still take after its last check, from there to the provider (the first
#: request's lazy imports in the provider SDK, a loaded machine's scheduling): the window is also
#: counted over it, so a request that passed its check and was then held back does not arrive in the
#: next window's company. Measured: 0.2-0.55 s on a 2-core machine at load 8-30.
SEND_MARGIN: Final = 0.5


async def _rate_turn(e: Env, agent_name: str, run_id: str) -> float | None:
    """Wait for this request's turn in the agent's model-request rate (``AgentLimits.model_requests``),
    counted across every process on the database (``ledger/rate.py``); the ``monotonic`` time the
    grant's transaction began (no later than the grant on any clock), or None with no rate. Over the
    rate, it waits: it never fails. Only a request that is really about to be made takes a grant
    (a replay asks nothing)."""
    lim = e.limits.get(agent_name)
    if lim is None or lim.model_requests is None:
        return None
    n, period = lim.model_requests
    while True:
        began = time.monotonic()
        grant = await plain_tx(rate.try_grant, agent_rate_key(agent_name), n, period + SEND_ALLOWANCE + SEND_MARGIN, run_id)
        if grant.epoch is not None:
            return began
        # a stop requested during the wait (which may last a whole period) is honoured within a
        # second, before the model is paid for, as at the request's first read
        until = time.monotonic() + grant.wait
        while (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(left, _STOP_POLL))
            stop = await plain_tx(_stop_kind, run_id)
            if stop is not None:
                raise _StoppedWhileWaiting(stop)


async def _sendable(e: Env, agent_name: str, run_id: str, began: float | None) -> None:
    """Just before the request goes out: a grant older than ``SEND_ALLOWANCE`` (a loaded process, a
    slow parameter build) is spent, and the request waits for a fresh one. A process so loaded that
    even a fresh grant is stale by the time it returns sends on its third (logged): re-granting for
    ever would spend the whole rate on nothing."""
    for _ in range(_REGRANTS):
        if began is None or time.monotonic() - began <= SEND_ALLOWANCE:
            return
        began = await _rate_turn(e, agent_name, run_id)
    if began is not None and time.monotonic() - began > SEND_ALLOWANCE:
        log.warning("run %s: agent %r's model request is sent %.2f s after its rate grant (allowance %.2f s): "
                    "the process is too loaded to keep the rate exact at the provider", run_id, agent_name,
                    time.monotonic() - began, SEND_ALLOWANCE)


_REGRANTS: Final = 3


#: How often a request waiting for its rate reads the run's stop record (seconds).
_STOP_POLL: Final = 1.0


class _StoppedWhileWaiting(Exception):
    """A stop record found while waiting for the rate: the request answers a ``StoppedReply``."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _stop_kind(conn: sa.Connection, run_id: str) -> str | None:
    return fence.check(conn, run_id, "model request")["stop_kind"]


async def _asked(e: Env, agent: Agent, run_id: str, session_id: str, step: int, last_seq: int, superseded: int, loaded: list[Any], rows: list[tuple[int, Any]],
                 checked: Checked) -> ModelReply:
    loaded += transcript.load([body for _, body in rows])
    e.transcripts.put(session_id, rows[-1][0] if rows else last_seq, superseded, loaded)
    scope = await scopes.scope_of(agent, run_id, session_id, step)
    await agent.refresh(scope)  # an adapter's agent lists its tools for this run
    messages = transcript.for_model(list(loaded))
    instructions = await agent.instructions_for(scope)
    # The agent's checks on the run's input (an SDK's input guardrails), before the model is paid
    # for: their results are recorded with this step's reply, a tripwire as the step's outcome.
    if checked.input is None:
        checked.input = list(await agent.check_input(messages, scope))
    agent.check_model()  # before the grant: a model's first build (a provider's import) is not paid between grant and send
    # Asked through the agent (helix_dbos/adapters/base.py): how the model is asked and its reply
    # read is its adapter's; the reply is a pydantic-ai ``ModelResponse`` whatever the SDK. The
    # request is built before the grant, so only its sending follows it.
    send = None if e.live_output else agent.prepare(messages, instructions, scope)
    began = await _rate_turn(e, agent.name, run_id)
    await _sendable(e, agent.name, run_id, began)
    if send is None:  # deltas to the run's DBOS stream as they come (runtime/flow/live.py)
        from .live import streamed_request

        response = await streamed_request(agent, messages, instructions, scope, step)
    else:
        response = await send()
    # Planned here, with the reply, so the plan is recorded with it: a replay after a deploy
    # that changed or removed a tool follows the same path, and recovery judges the tool as it is now.
    # The agent's ``review_plan`` hook is public API: it sees the plan as plain dicts, the keys a
    # recorded plan has, and what it hands back is read as the plan (``codec``).
    planned = codec.planned_calls(await agent.review_plan(codec.planned_dicts(plan_calls(agent, response)), scope))
    checks = list(checked.input)
    ends, output = final_output(agent, response, planned)
    if ends:  # the agent's checks on the run's final output (an SDK's output guardrails)
        checks += await agent.check_output(output, scope)
    reply = ModelReply(transcript.dump(response), _usage(response), response.model_name, step, planned, tuple(checks))
    limits = getattr(agent, "usage_limits", None)
    if limits is not None:
        check_usage_limits(limits, await plain_tx(usage_rows.used_by_run, run_id), reply)
    return reply
