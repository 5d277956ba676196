"""What a caller may send: one rule per kind of input, shared by the Python API, the CLI and HTTP.

A caller's input is refused up front with a typed ``validation_error`` and nothing stored, unlike
what a model or a tool produces, which the ledger stores whatever it holds (``ledger/escape.py``):
a caller can fix its request, a tool result has already happened.

Session ids appear in URLs, log lines and SQL, and the ledger keeps them in ``varchar(64)``: 1 to 64
characters of ``[A-Za-z0-9_.:-]``, and not ``.`` or ``..``, which URL clients normalise away as path
segments (so ``""``, ``" "``, ``a/b``, ``../x``, ``.`` and ``..`` are refused). Text a
caller sends (a user message, a client tool's error, an approval's reason or actor, a stop's
requester) must not hold NUL or a lone surrogate, which neither database can store as text. A
client tool's result is a tool's output, not caller text: the ledger keeps it exactly, escaped as
every tool result is, so it may hold them (as the published schema, any JSON value, allows).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ValidationError
from ..ledger.escape import has_unstorable

SESSION_ID_MAX_LENGTH = 64
#: The HTTP schema and path parameters use this same pattern (``service/schemas.py``, ``routes.py``),
#: with ``SESSION_ID_MAX_LENGTH``. No lookahead (pydantic's Rust regex has none): an id starts with a
#: character other than ``.``, or with ``.`` and another character, or with ``..`` and a third one.
SESSION_ID_PATTERN = r"^(?:[A-Za-z0-9_:-]|\.[A-Za-z0-9_:-]|\.\.[A-Za-z0-9_.:-])[A-Za-z0-9_.:-]*$"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
SESSION_ID_RULE = f"1 to {SESSION_ID_MAX_LENGTH} characters of A-Z, a-z, 0-9, '_', '.', ':' and '-', other than '.' and '..'"
#: Caller text holds no NUL and no lone surrogate (a surrogate pair, as JSON Schema validators in
#: UTF-16 languages see a character beyond the BMP, is allowed). Published in the request schemas;
#: the check itself is ``check_text`` (Rust's regex, which pydantic uses, cannot name a surrogate).
TEXT_PATTERN = r"^(?:[^\u0000\ud800-\udfff]|[\ud800-\udbff][\udc00-\udfff])*$"


#: DBOS's range of a queue priority (its MinPriority and MaxPriority): lower goes first.
#: An entry without one gets DBOS's 0, ahead of every given priority (docs/scaling.md).
PRIORITY_MIN, PRIORITY_MAX = 1, 2**31 - 1


def check_priority(priority: Any) -> None:
    """An entry's priority is an int in DBOS's range, or None: refused before the gate (DBOS would
    refuse it only at the enqueue, inside the gate's transaction)."""
    if priority is None:
        return
    if isinstance(priority, bool) or not isinstance(priority, int) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValidationError(
            f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX} (lower goes first), not {priority!r}",
            detail={"field": "priority", "min": PRIORITY_MIN, "max": PRIORITY_MAX},
        )


def check_session_id(session_id: Any) -> str:
    """``session_id`` if it follows the rule; a typed refusal that names the rule otherwise."""
    if not isinstance(session_id, str) or len(session_id) > SESSION_ID_MAX_LENGTH or _SESSION_ID.fullmatch(session_id) is None:
        raise ValidationError(
            f"invalid session id {session_id!r}: a session id is {SESSION_ID_RULE}",
            detail={"field": "session_id", "rule": SESSION_ID_RULE},
        )
    return session_id


def check_text(field: str, value: str | None, max_length: int | None = None) -> None:
    """Refuse caller text the ledger could only store escaped (NUL, lone surrogates), or cut short."""
    if value is None:
        return
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {type(value).__name__}", detail={"field": field})
    if has_unstorable(value):
        raise ValidationError(
            f"{field} holds a NUL character or a lone surrogate, which cannot be stored",
            detail={"field": field},
        )
    if max_length is not None and len(value) > max_length:
        raise ValidationError(f"{field} is longer than {max_length} characters", detail={"field": field})

