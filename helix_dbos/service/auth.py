"""Who is calling, and what they may do: authentication and the session-ownership rules.

A request authenticates with an API key (``Authorization: Bearer <key>``, ``X-API-Key: <key>``, or
the ``/ui`` page's cookie) or through the ``HELIX_DBOS_AUTHENTICATE`` hook, which receives the
Starlette request and returns a principal (a ``Principal``, a name, or ``{"name", "roles"}``) or
raises. Anything else is a 401 ``unauthenticated``: a hook that crashes fails closed.

Authorization is ownership. Every session records the principal that started it; a principal sees
and acts on its own sessions only, and another's session is ``session_not_found`` (404, not 403, so
ids of other tenants' sessions cannot be probed). Two roles widen this:

- ``operator``: sees every session, and may stop, resume and retry any of them;
- ``approver``: sees every session, and may decide approvals on sessions it does not own.

Either role, on a session it does not own, is refused other actions with 403 ``forbidden``. With no
authentication configured (loopback, or ``--insecure``) the caller is ``anonymous`` with every
right, as before; sessions then have no owner and approvals no actor.

The cookie is what a browser sends by itself, also with a request another page starts: a page on
another port of the same host, or a sibling subdomain, is "same site", which ``SameSite=Strict``
does not cover. So a state-changing request authenticated by the cookie must also carry the page's
CSRF token (``X-CSRF-Token``), which only the pages this service rendered hold; a header key needs
none (a page cannot make a browser add it).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request

from .. import apikeys
from ..errors import AuthenticationError, CsrfError, ForbiddenError, HelixError, SessionNotFoundError
from .settings import ServiceSettings

log = logging.getLogger("helix_dbos.service.auth")

COOKIE = "helix_key"
CSRF_HEADER = "X-CSRF-Token"
#: Methods that change nothing: the cookie alone authenticates them (an ``EventSource`` sends no header).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Action = Literal["read", "turn", "resume", "retry", "stop", "approve", "submit"]
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "operator": frozenset({"read", "resume", "retry", "stop"}),
    "approver": frozenset({"read", "approve"}),
}


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[str] = frozenset()
    authenticated: bool = True

    @property
    def sees_all(self) -> bool:
        return not self.authenticated or bool(self.roles & ROLE_ACTIONS.keys())

    @property
    def owner(self) -> str | None:
        """What to stamp on a session this principal starts (nothing without authentication)."""
        return self.name if self.authenticated else None

    @property
    def actor(self) -> str | None:
        return self.name if self.authenticated else None


ANONYMOUS = Principal("anonymous", frozenset(ROLE_ACTIONS), authenticated=False)


def presented_key(request: Request) -> str | None:
    return _presented(request)[0]


def _presented(request: Request) -> tuple[str | None, bool]:
    """The key the request carries, and whether it came from the cookie (headers win)."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None, False
    if request.headers.get("x-api-key"):
        return request.headers["x-api-key"], False
    cookie = request.cookies.get(COOKIE) or None
    return cookie, cookie is not None


def csrf_token(key: str) -> str:
    """The CSRF token of a cookie's key: derived from it, so the service stores nothing.

    Whoever can compute it already holds the key; a page that only makes the browser send the
    cookie cannot read it (HttpOnly) nor the pages that carry the token (no CORS for credentials).
    """
    return hmac.new(key.encode(), b"helix-dbos csrf v1", hashlib.sha256).hexdigest()


def check_csrf(request: Request, key: str) -> None:
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_token(key).encode()):
        raise CsrfError(
            "This request came with the sign-in cookie but without the page's CSRF token; send the API key in a header instead.",
            detail={"header": CSRF_HEADER},
        )


def _coerce(value: Any) -> Principal | None:
    if value is None or isinstance(value, Principal):
        return value
    if isinstance(value, str) and value:
        return Principal(value)
    if isinstance(value, dict) and value.get("name"):
        roles = frozenset(value.get("roles") or ()) & ROLE_ACTIONS.keys()
        return Principal(str(value["name"]), roles)
    return None


def _header_keys(request: Request) -> tuple[str | None, str | None]:
    """The key in ``Authorization: Bearer`` and the one in ``X-API-Key`` (None where absent)."""
    header = request.headers.get("authorization", "")
    bearer = header[7:].strip() or None if header.lower().startswith("bearer ") else None
    return bearer, request.headers.get("x-api-key") or None


def check_agreement(request: Request, settings: ServiceSettings) -> None:
    """Refuse a request whose ``Authorization: Bearer`` and ``X-API-Key`` disagree: one not a key at
    all, or keys of different principals (or roles). Which one a proxy, a client library or a
    gateway reads first is anyone's guess; a request that names two identities names none."""
    bearer, header_key = _header_keys(request)
    if bearer is None or header_key is None or bearer == header_key or not settings.keys:
        return
    entries = [apikeys.match(settings.keys, k) for k in (bearer, header_key)]
    if all(e is not None for e in entries) and len({(e.principal, e.roles) for e in entries if e is not None}) == 1:
        return
    raise AuthenticationError(
        "The request carries two credentials that disagree (Authorization: Bearer and X-API-Key); send one.",
        detail={"reason": "conflicting_credentials"},
    )


async def authenticate(request: Request, settings: ServiceSettings) -> Principal:
    """The request's principal, or ``AuthenticationError``; keys first, then the hook. Two header
    keys that disagree are refused (``check_agreement``)."""
    if not settings.auth_enabled:
        return ANONYMOUS
    check_agreement(request, settings)
    key, from_cookie = _presented(request)
    if key and settings.keys:
        entry = apikeys.match(settings.keys, key)
        if entry is not None:
            if from_cookie:
                check_csrf(request, key)
            return Principal(entry.principal, entry.roles)
    if settings.hook is not None:
        try:
            value = settings.hook(request)
            if inspect.isawaitable(value):
                value = await value
        except HelixError:
            raise
        except Exception as exc:  # noqa: BLE001 fail closed: a broken gateway check lets nobody in
            log.warning("the authenticate hook refused or failed: %s: %s", type(exc).__name__, exc)
            raise AuthenticationError("Authentication failed.", detail=type(exc).__name__) from None
        principal = _coerce(value)
        if principal is not None:
            return principal
    raise AuthenticationError(
        "Authentication required: send an API key as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'." if key is None else "The credentials are not valid."
    )


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def namespace(principal: Principal) -> str:
    """The prefix of the session ids ``principal`` may choose for new sessions (``<namespace>:``).

    Its name when that is a short run of session-id characters (``alice``), else ``u-`` and 16 hex
    digits of the name's SHA-256 (``alice@example.com`` has an ``@``). Another principal can never
    create an id in it, so whether such an id is free reveals nothing about anyone else.
    """
    if _PLAIN_NAME.fullmatch(principal.name):
        return principal.name
    return "u-" + hashlib.sha256(principal.name.encode()).hexdigest()[:16]


def check_chosen_id(principal: Principal, session_id: str, owner: str | Literal[False] | None) -> None:
    """Refuse a ``POST /sessions`` naming ``session_id``, unless it is the caller's own session or in
    its namespace. ``owner`` is the session's owner, or ``False`` when no such session exists: both
    answers are the same 404, so a free id and another principal's id cannot be told apart.
    """
    if not principal.authenticated or session_id.startswith(namespace(principal) + ":"):
        return
    if owner is not False and owner is not None and owner == principal.name:
        return
    prefix = namespace(principal) + ":"
    raise SessionNotFoundError(
        f"no session {session_id!r} of yours; to choose the id of a new session, start it with {prefix!r}",
        detail={"namespace": prefix},
    )


def check(principal: Principal, owner: str | None, action: Action, session_id: str) -> None:
    """Allow ``action`` on a session owned by ``owner``, or raise 404 (not visible) / 403 (no role)."""
    if not principal.authenticated or (owner is not None and owner == principal.name):
        return
    if not principal.sees_all:
        raise SessionNotFoundError(f"no session {session_id!r}")
    if any(action in ROLE_ACTIONS[r] for r in principal.roles):
        return
    needed = [r for r, acts in ROLE_ACTIONS.items() if action in acts]
    raise ForbiddenError(
        f"{principal.name!r} may not {action} another principal's session" + (f" (that takes the {' or '.join(needed)} role)" if needed else " (only its owner may)"),
        detail={"action": action, "roles": sorted(principal.roles)},
    )
