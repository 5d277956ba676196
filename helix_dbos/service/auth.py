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
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request

from .. import apikeys
from ..errors import AuthenticationError, ForbiddenError, HelixError, SessionNotFoundError
from .settings import ServiceSettings

log = logging.getLogger("helix_dbos.service.auth")

COOKIE = "helix_key"
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
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return request.headers.get("x-api-key") or request.cookies.get(COOKIE) or None


def _coerce(value: Any) -> Principal | None:
    if value is None or isinstance(value, Principal):
        return value
    if isinstance(value, str) and value:
        return Principal(value)
    if isinstance(value, dict) and value.get("name"):
        roles = frozenset(value.get("roles") or ()) & ROLE_ACTIONS.keys()
        return Principal(str(value["name"]), roles)
    return None


async def authenticate(request: Request, settings: ServiceSettings) -> Principal:
    """The request's principal, or ``AuthenticationError``; keys first, then the hook."""
    if not settings.auth_enabled:
        return ANONYMOUS
    key = presented_key(request)
    if key and settings.keys:
        entry = apikeys.match(settings.keys, key)
        if entry is not None:
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
