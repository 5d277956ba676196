"""Internal: API keys as the service stores them: only a SHA-256 digest, never the key.

Shared by the service (which checks keys) and the CLI (``helix-dbos api-key``, which mints them), so
neither imports the other. A key is 32 random bytes, so a single fast hash is enough: there is no
dictionary to try against a digest of that much entropy (the reasoning GitHub and Stripe tokens use).
A password chosen by a person must never be used as a key.

``HELIX_DBOS_API_KEYS`` holds entries separated by commas, semicolons or newlines, each
``sha256:<hex digest>:<principal>[:<role>+<role>...]``, e.g.
``sha256:9f86d0...:alice`` or ``sha256:2c26b4...:ops:operator+approver``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

ENV = "HELIX_DBOS_API_KEYS"
PREFIX = "hxk_"
ROLES = frozenset({"operator", "approver"})
_NAME = re.compile(r"^[A-Za-z0-9_.@+-]{1,200}$")


@dataclass(frozen=True)
class KeyEntry:
    digest: str
    principal: str
    roles: frozenset[str]


def new_key() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


PRINCIPAL_RULE = "1 to 200 characters of A-Z a-z 0-9 _ . @ + - (e.g. alice, ops-bot or alice@example.com)"


def check_principal(name: str) -> str:
    """``name`` if it can stand as a principal in an entry; else a ``ValueError`` that shows the form.

    ``:`` and ``,`` would end the principal inside an entry (``a:b`` reads as principal ``a`` with
    role ``b``), so the refusal names the rule and says where roles go instead.
    """
    if _NAME.fullmatch(name):
        return name
    hint = "; roles are not part of the name: pass them with --role operator / --role approver" if ":" in name else ""
    raise ValueError(f"the principal {name!r} is not valid: use {PRINCIPAL_RULE}{hint}")


def entry_line(key: str, principal: str, roles: frozenset[str] | set[str] = frozenset()) -> str:
    """The ``HELIX_DBOS_API_KEYS`` entry for ``key``: what the operator stores instead of the key."""
    line = f"sha256:{digest(key)}:{principal}"
    return line + (":" + "+".join(sorted(roles)) if roles else "")


def parse(text: str) -> list[KeyEntry]:
    """The entries of ``HELIX_DBOS_API_KEYS``; raises ``ValueError`` naming the first bad one."""
    out: list[KeyEntry] = []
    for number, raw in enumerate(re.split(r"[,;\n]", text), start=1):
        item = raw.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) not in (3, 4) or parts[0] != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", parts[1]):
            raise ValueError(f"entry {number} is not sha256:<64 hex digits>:<principal>[:<role>+<role>] (keys are stored hashed; mint one with `helix-dbos api-key NAME`)")
        if not _NAME.fullmatch(parts[2]):
            raise ValueError(f"entry {number}: the principal {parts[2]!r} must be {PRINCIPAL_RULE}")
        roles = frozenset(r for r in (parts[3].split("+") if len(parts) == 4 else []) if r)
        if roles - ROLES:
            raise ValueError(f"entry {number}: unknown role(s) {sorted(roles - ROLES)}; the roles are {sorted(ROLES)}")
        out.append(KeyEntry(parts[1], parts[2], roles))
    return out


def match(entries: list[KeyEntry], key: str) -> KeyEntry | None:
    """The entry whose digest is the key's; every entry is compared, in constant time each."""
    found = None
    given = digest(key)
    for entry in entries:
        if hmac.compare_digest(entry.digest, given):
            found = entry
    return found
