"""An authenticate hook as a JWT/OIDC gateway's would be, for tests: trusts ``X-Test-User``.

``HELIX_DBOS_AUTHENTICATE=tests.support.authhook:authenticate``. A real hook verifies a token's signature;
this one only shows the contract: take the request, return a principal, or raise.
"""

from __future__ import annotations

from typing import Any


async def authenticate(request: Any) -> dict[str, Any]:
    user = request.headers.get("x-test-user")
    if not user:
        raise PermissionError("no X-Test-User header")
    if user == "crash":
        raise RuntimeError("the gateway is down")
    roles = [r for r in request.headers.get("x-test-roles", "").split(",") if r]
    return {"name": user, "roles": roles}
