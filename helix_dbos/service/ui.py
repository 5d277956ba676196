"""The operator's page at ``/ui``: server-rendered HTML, a little JavaScript, nothing from a CDN.

Every page is rendered from the ledger on request, behind the same authentication and ownership
rules as the API (``auth.py``); the buttons call the same API endpoints with ``fetch``, so the page
can do nothing a client could not. A browser cannot put a key in an ``EventSource`` header, so the
login form trades the key for an ``HttpOnly``, ``SameSite=Strict`` cookie that the API also accepts
(``Secure`` whenever the service is not bound to loopback). ``SameSite=Strict`` keeps other sites'
pages from riding on it, but not another page of the same site (another port on the host): so the
API takes only JSON bodies, and a state-changing request authenticated by the cookie must carry the
CSRF token each page is rendered with (``auth.py``).
The session page follows the session's SSE stream and appends each event as it arrives, reloading
itself when the state it renders (runs, calls, pending answers) has changed.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from .. import apikeys
from ..errors import AuthenticationError, HelixError, ValidationError
from . import auth
from .routes import json_only, known_query
from .settings import is_loopback

STATIC = "/ui/static"
router = APIRouter(include_in_schema=False, dependencies=[Depends(json_only), Depends(known_query)])
#: Events after which the rendered state is stale: the page reloads itself (after appending them).
RELOAD_ON = ("run_status", "run_cancelled", "approval_requested", "approval_decided", "client_call", "call_paired", "tool_end", "checkpoint", "recovery")


def static_dir() -> str:
    return str(Path(__file__).with_name("static"))


_UNPRINTABLE = re.compile("[\x00\ud800-\udfff]")


def e(value: Any) -> str:
    """``value`` as HTML text. NUL and lone surrogates a tool or a model produced (the ledger keeps
    them) show as their ``\\uXXXX`` escapes: UTF-8 cannot carry a surrogate, and a browser would
    turn a NUL into U+FFFD."""
    text = html.escape("" if value is None else str(value))
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def compact(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def page(title: str, body: str, principal: auth.Principal | None, data: dict[str, Any] | None = None, csrf: str | None = None) -> HTMLResponse:
    who = ""
    if principal is not None and principal.authenticated:
        roles = f" ({', '.join(sorted(principal.roles))})" if principal.roles else ""
        who = f'<span id="who">{e(principal.name)}{e(roles)}</span> <button id="logout" type="button">log out</button>'
    elif principal is not None:
        who = '<span id="who">no authentication configured</span>'
    attrs = f" data-page='{e(json.dumps({**(data or {}), **({'csrf': csrf} if csrf else {})}))}'"
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)} · helix-dbos</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{STATIC}/ui.css"></head>
<body{attrs}><header><a href="/ui" class="brand">helix-dbos</a> <span class="crumb">{e(title)}</span><span class="right">{who}</span></header>
<main>{body}</main><p id="flash" role="status"></p>
<script src="{STATIC}/ui.js"></script></body></html>"""
    return HTMLResponse(doc, headers={"Cache-Control": "no-store", "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'", "X-Frame-Options": "DENY"})


def status_tag(status: Any) -> str:
    return f'<span class="st st-{e(status)}">{e(status)}</span>'


def _waiting_for(status: str, calls: list[Any]) -> str:
    """What a suspended session waits for, in words: ``suspended_client_tool`` is the ledger's one
    status for both kinds of wait (a client tool's result, and an approval)."""
    if status != "suspended_client_tool":
        return ""
    pending = [c for c in calls if c["status"] == "pending"]
    approvals = sum(c["kind"] != "client" for c in pending)
    clients = len(pending) - approvals
    waits = [f"{n} approval{'s' if n > 1 else ''}" for n in [approvals] if n] + [f"{n} client tool result{'s' if n > 1 else ''}" for n in [clients] if n]
    return f' <span class="waiting">waiting for {" and ".join(waits)}</span>' if waits else ""


def _run_status(run: Any, next_seq: Any, calls: list[Any]) -> str:
    """A suspended run ends there: the answer that settles its wait starts the session's next run,
    so an earlier run keeps ``suspended_client_tool`` and says which run went on."""
    tag = status_tag(run["status"])
    if run["status"] == "suspended_client_tool" and next_seq is not None:
        return f'{tag} <span class="waiting">the session went on in run {e(next_seq)}</span>'
    return tag


async def _caller(request: Request) -> auth.Principal | None:
    try:
        return await auth.authenticate(request, request.app.state.service_settings)
    except AuthenticationError:
        return None


def _csrf(request: Request) -> str | None:
    """The token this page's buttons send with the cookie (``auth.check_csrf``)."""
    key = request.cookies.get(auth.COOKIE)
    return auth.csrf_token(key) if key else None


def login_page() -> HTMLResponse:
    body = """<section class="login"><h1>Sign in</h1>
<form id="login"><label>API key <input id="key" name="key" type="password" autocomplete="current-password" required></label>
<button type="submit" id="signin">Sign in</button></form>
<p class="hint">Keys are minted with <code>helix-dbos api-key NAME</code>; the page keeps yours in an HttpOnly cookie.</p></section>"""
    response = page("sign in", body, None)
    response.status_code = 401
    return response


class Login(BaseModel):
    key: str = Field(min_length=1, max_length=500)


@router.post("/ui/login")
async def login(request: Request, req: Login) -> Response:
    """Trade an API key for the page's cookie (the key is checked here, and again on every request)."""
    settings = request.app.state.service_settings
    if not settings.auth_enabled:
        return JSONResponse({"ok": True})
    if not settings.keys:
        raise ValidationError("this service authenticates through its gateway (HELIX_DBOS_AUTHENTICATE), not with API keys")
    entry = apikeys.match(settings.keys, req.key)
    if entry is None:
        raise AuthenticationError("The credentials are not valid.")
    response = JSONResponse({"ok": True, "principal": entry.principal})
    secure = request.url.scheme == "https" or not is_loopback(settings.host)
    response.set_cookie(auth.COOKIE, req.key, httponly=True, samesite="strict", secure=secure, path="/")
    return response


@router.post("/ui/logout")
async def logout() -> Response:
    response = JSONResponse({"ok": True})
    response.delete_cookie(auth.COOKIE, path="/")
    return response


def _list(request: Request, principal: auth.Principal, status: str | None, agent: str | None) -> list[Any]:
    owner = None if principal.sees_all else principal.name
    return list(request.app.state.runtime.reader.sessions(200, owner=owner, status=status or None, agent_name=agent or None))


@router.get("/ui", response_class=HTMLResponse)
async def sessions_page(request: Request, status: str | None = Query(default=None, max_length=32), agent: str | None = Query(default=None, max_length=200)) -> HTMLResponse:
    principal = await _caller(request)
    if principal is None:
        return login_page()
    rows = await asyncio.to_thread(_list, request, principal, status, agent)
    agents = sorted(request.app.state.runtime.agents)
    statuses = ["running", "suspended_client_tool", "completed", "failed", "interrupted", "new"]

    def options(values: list[str], chosen: str) -> str:
        return "".join(f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(v) or "any"}</option>' for v in ["", *values])

    body = [
        '<h1>Sessions</h1><form class="filters" method="get" action="/ui">',
        f'<label>status <select name="status" id="f-status">{options(statuses, status or "")}</select></label>',
        f'<label>agent <select name="agent" id="f-agent">{options(agents, agent or "")}</select></label>',
        '<button type="submit" id="filter">Filter</button></form>',
        '<table id="sessions"><thead><tr><th>session</th><th>agent</th><th>owner</th><th>status</th><th>runs</th><th>updated</th></tr></thead><tbody>',
    ]
    for r in rows:
        sid = str(r["session_id"])
        body.append(
            f'<tr data-session="{e(sid)}"><td><a href="/ui/sessions/{e(sid)}">{e(sid)}</a></td><td>{e(r["agent_name"])}</td><td>{e(r.get("owner") or "-")}</td>'
            f'<td>{status_tag(r["status"])}</td><td>{e(r["run_count"])}</td><td>{e(str(r["updated_at"])[:19])}</td></tr>'
        )
    if not rows:
        body.append('<tr><td colspan="6" class="empty">No sessions.</td></tr>')
    body.append("</tbody></table>")
    return page("sessions", "".join(body), principal, csrf=_csrf(request))


def _read(request: Request, session_id: str) -> dict[str, Any]:
    """The page's data, through the runtime's reader (``summary`` raises ``SessionNotFoundError``)."""
    reader = request.app.state.runtime.reader
    return {
        "row": reader.summary(session_id),
        "runs": reader.runs(session_id),
        "calls": reader.calls(session_id=session_id, limit=100_000),
        "events": reader.events(session_id, 0, limit=100_000).events,
    }


def _event_text(ev: dict[str, Any], tools: dict[str, str]) -> str:
    """One line saying what an event means (the same vocabulary as ``helix-dbos show``)."""
    d = ev.get("data") or {}
    kind = ev["type"]
    dispatch = d.get("dispatch_id")
    ref = f"{d.get('tool_name') or tools.get(str(dispatch), '?')} [{str(dispatch)[:8]}]" if dispatch else ""
    if kind == "run_status":
        entry = f" (entry {d['entry']})" if d.get("entry") else ""
        error = f": {d.get('error_code')} {compact(d.get('error') or '', 120)}" if d.get("error_code") else ""
        return f"run {str(ev.get('run_id') or '')[:8]} {d.get('status')}{entry}{error}"
    if kind == "model_text":
        return f"model (step {d.get('step')}): {compact(d.get('text', ''), 300)}"
    if kind == "call_saved" and d.get("kind") == "finish":  # the run's output tool: not a call, nothing to replay
        return f"output given through {ref} {compact(d.get('args'), 120)}"
    if kind == "call_saved":
        return f"saved {ref} {compact(d.get('args'), 120)}: dispatch id {dispatch}"
    if kind == "checkpoint":
        return f"{d.get('kind')} checkpoint, step {d.get('step')}"
    if kind == "tool_start":
        return f"{ref} body started, attempt {d.get('attempt')}"
    if kind == "tool_end":
        return f"{ref} attempt {d.get('attempt', '-')} → {d.get('status')}"
    if kind == "call_paired":
        return f"{ref} answered {d.get('status')} (by {d.get('paired_by')})" + (f": {d['note']}" if d.get("note") else "")
    if kind == "recovery":
        return f"{ref} recovery: {d.get('action')} ({d.get('reason')})"
    if kind == "approval_requested":
        return f"{ref} awaits approval: {compact(d.get('args'), 120)}"
    if kind == "client_call":
        return f"{ref} awaits the client: {compact(d.get('args'), 120)}"
    if kind == "approval_decided":
        return f"{ref} {'approved' if d.get('approved') else 'denied'}" + (f" by {d['actor']}" if d.get("actor") else "") + (f": {d['reason']}" if d.get("reason") else "")
    if kind == "stop_requested":
        return f"stop requested ({d.get('kind')})" + (f" by {d['requested_by']}" if d.get("requested_by") else "")
    return compact(dict(d), 300)


def _call_rows(calls: list[dict[str, Any]], decisions: dict[str, list[str]], attempts: dict[str, list[dict[str, Any]]], session_id: str) -> str:
    out = []
    for c in calls:
        did = str(c["dispatch_id"])
        told = c.get("outcome_note") or (compact(c["error"]) if c.get("error") else compact(c.get("result")) if c.get("result") is not None else "")
        approval = ""
        if c.get("requires_approval") or c.get("approved") is not None:
            if c.get("approved") is None:
                approval = "awaiting approval"
            else:
                approval = ("approved" if c["approved"] else "denied") + (f" by {c.get('approval_actor')}" if c.get("approval_actor") else "") + (f": {c.get('approval_reason')}" if c.get("approval_reason") else "")
        output = c.get("kind") == "finish"  # the run's output tool (as helix-dbos calls shows it): no body, no replay
        tool_text = f"{c['tool_name']} (the run's output)" if output else str(c["tool_name"])
        tries = attempts.get(did, [])
        attempt_text = ", ".join(f"#{a['attempt']} {a.get('outcome') or 'lost'} on {a.get('executor_id') or '?'}" for a in tries) or "none"
        actions = ""
        if c["status"] == "pending" and c["kind"] != "client" and c.get("approved") is None:
            actions = (
                f'<input class="reason" placeholder="reason" data-for="{e(did)}">'
                f'<button class="approve" data-dispatch="{e(did)}">Approve</button><button class="deny" data-dispatch="{e(did)}">Deny</button>'
            )
        elif c["status"] == "pending" and c["kind"] == "client":
            actions = (
                f'<textarea class="result" placeholder="JSON result" data-for="{e(did)}"></textarea>'
                f'<button class="submit-result" data-dispatch="{e(did)}">Submit result</button><button class="submit-error" data-dispatch="{e(did)}">Submit as error</button>'
            )
        out.append(
            f'<tr class="call" data-dispatch="{e(did)}" data-tool="{e(c["tool_name"])}" data-status="{e(c["status"])}">'
            f'<td><code title="{e(did)}">{e(did)}</code></td><td>{e(c["step"])}, {e(c["position"])}</td><td>{e(tool_text)}</td><td class="args">{e(compact(c["args"]))}</td>'
            f'<td>{e("-" if output else c["replay"])}</td><td>{status_tag(c["status"])}</td><td class="attempts">{e(attempt_text)}</td>'
            f'<td class="recovery">{e("; ".join(decisions.get(did, [])) or "-")}</td><td class="told">{e(told)}</td><td class="approval">{e(approval)}</td><td>{actions}</td></tr>'
        )
    return "".join(out) or '<tr><td colspan="11" class="empty">No calls.</td></tr>'


@router.get("/ui/sessions/{session_id}", response_class=HTMLResponse)
async def session_page(request: Request, session_id: str) -> HTMLResponse:
    principal = await _caller(request)
    if principal is None:
        return login_page()
    try:
        data = await asyncio.to_thread(_read, request, session_id)
        auth.check(principal, data["row"].get("owner"), "read", session_id)
        view = await request.app.state.runtime.session_async(session_id)
    except HelixError as exc:
        response = page("not found", f'<h1>Not found</h1><p class="error">{e(exc.message)}</p><p><a href="/ui">All sessions</a></p>', principal)
        response.status_code = exc.status
        return response
    row, runs, calls, events = data["row"], data["runs"], data["calls"], data["events"]
    attempts = {c.dispatch_id: c.attempts for c in view.calls}
    decisions: dict[str, list[str]] = {}
    for ev in events:
        d = ev.get("data") or {}
        if ev["type"] == "recovery" and d.get("dispatch_id"):
            decisions.setdefault(str(d["dispatch_id"]), []).append(f"{d.get('action')} ({d.get('reason')})")
        elif ev["type"] == "call_paired" and d.get("paired_by") == "recovery" and d.get("dispatch_id"):
            decisions.setdefault(str(d["dispatch_id"]), []).append(f"answered {d.get('status')} by recovery")
    last_seq = int(events[-1]["seq"]) if events else 0
    status = str(row["status"])
    controls = []
    if status in ("running", "suspended_client_tool"):
        controls.append('<button id="stop" class="danger">Stop</button>')
    if status in ("failed", "interrupted"):
        controls.append('<button id="retry">Retry</button>')
    body = [
        f'<h1>Session <code id="sid">{e(session_id)}</code></h1>',
        f'<p class="meta">agent <b>{e(row["agent_name"])}</b> · owner <b>{e(row.get("owner") or "-")}</b> · status <span id="status">{status_tag(status)}{_waiting_for(status, calls)}</span> · <span id="live">connecting…</span></p>',
        f'<p class="controls">{"".join(controls)}</p>',
        '<h2>Runs</h2><table id="runs"><thead><tr><th>#</th><th>run</th><th>entry</th><th>status</th><th>steps</th><th>recovery</th><th>executor</th><th>error</th></tr></thead><tbody>',
    ]
    later = {r["seq"]: next((n["seq"] for n in runs if n["seq"] > r["seq"]), None) for r in runs}
    for r in runs:
        body.append(
            f'<tr><td>{e(r["seq"])}</td><td><code>{e(r["run_id"])}</code></td><td>{e(r["entry"])}</td><td>{_run_status(r, later[r["seq"]], calls)}</td><td>{e(r["steps"])}</td>'
            f'<td>{e(r["recovery"])}</td><td>{e(r.get("executor_id") or "-")}</td><td>{e(((r.get("error_code") or "") + " " + (r.get("error") or "")).strip())}</td></tr>'
        )
    body.append("</tbody></table>")
    body.append(
        '<h2>Calls</h2><table id="calls"><thead><tr><th>dispatch id</th><th title="the model step, and the call&#39;s position in that step&#39;s reply (the ledger&#39;s step and position, from 0)">step, position</th><th>tool</th><th>args</th><th>replay</th><th>status</th><th>attempts</th>'
        '<th>recovery decision</th><th>what the model was told</th><th>approval</th><th></th></tr></thead><tbody>'
    )
    body.append(_call_rows(calls, decisions, attempts, session_id))
    body.append("</tbody></table>")
    body.append('<h2>Timeline</h2><table id="events"><thead><tr><th>#</th><th>time</th><th>event</th><th>what happened</th></tr></thead><tbody>')
    tools = {str(c["dispatch_id"]): str(c["tool_name"]) for c in calls}
    for ev in events:
        body.append(f'<tr class="event" data-seq="{e(ev["seq"])}" data-type="{e(ev["type"])}"><td>{e(ev["seq"])}</td><td>{e(str(ev["created_at"])[11:23])}</td><td>{e(ev["type"])}</td><td>{e(_event_text(ev, tools))}</td></tr>')
    body.append("</tbody></table>")
    return page(f"session {session_id}", "".join(body), principal, {"session": session_id, "after": last_seq, "reload_on": list(RELOAD_ON)}, csrf=_csrf(request))
