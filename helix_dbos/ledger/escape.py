"""The reversible escape that lets the ledger store any string a model or a tool produces.

Postgres refuses NUL (U+0000) in ``text`` and ``jsonb``, and neither database can encode a lone
surrogate (U+D800 to U+DFFF, which Python strings may hold) as UTF-8. Tool results, tool errors,
model text and model arguments are the model's conversation: dropping or replacing those characters
would change what the model reads next, so the ledger's column types (``types.py``) escape them on
the way in and restore them on the way out, identically on both databases.

The form, which SQL auditors see: ``␛`` (U+241B SYMBOL FOR ESCAPE) followed by exactly four
lowercase hex digits stands for that one code point. ``␛0000`` is NUL, ``␛d800`` a lone surrogate,
and ``␛241b`` a literal ``␛`` (escaped too, so every stored ``␛`` starts an escape and decoding is
unambiguous). Strings without these characters are stored exactly as they are.

Numbers: Postgres's ``json``/``jsonb`` refuse ``NaN`` and the infinities, which Python floats (and so a
tool's result or a check's ``Applied``) may hold. In a JSON value they are stored as the strings
``␛NaN``, ``␛Infinity`` and ``␛-Infinity`` on both databases, and read back as the floats: no string
can be stored that way, since a string's own ``␛`` is always stored as ``␛241b``.

What the model reads is a third form (``readable_json``): a provider's request is UTF-8 JSON, which
can hold neither a lone surrogate nor a non-finite number, so those are shown to the model in this
escape form and as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; the ledger's rows keep the originals.
"""

from __future__ import annotations

import math
import re
from typing import Any

ESCAPE = "\u241b"

#: What a store refuses, plus the escape character itself.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff\u241b]")
_REFUSED = re.compile("[\x00\ud800-\udfff]")
_ESCAPED = re.compile("\u241b([0-9a-f]{4})")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

#: A non-finite float as a stored string (``repr`` gives ``nan``, ``inf``, ``-inf``).
_FLOAT_OUT = {"nan": f"{ESCAPE}NaN", "inf": f"{ESCAPE}Infinity", "-inf": f"{ESCAPE}-Infinity"}
_FLOAT_IN = {v: float(k) for k, v in _FLOAT_OUT.items()}
_READABLE_FLOAT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
#: Leaves every walk below hands back as they are (exact types: a subclass takes the general path),
#: tested before the recursive call, which is most of a walk's cost on a run's records.
_KEPT: frozenset[type] = frozenset({int, bool, type(None)})


def _escape_char(match: re.Match[str]) -> str:
    return f"{ESCAPE}{ord(match.group()):04x}"


def _unescape_char(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 16))


def escape_text(text: str) -> str:
    """``text`` in a form both databases store; ``unescape_text`` gives the original back.

    An ASCII string without NUL has nothing to escape (``␛`` and the surrogates are not ASCII):
    two C checks instead of a regex pass, for the thousands of keys and values a run writes."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(_escape_char, text)


def unescape_text(text: str) -> str:
    return _ESCAPED.sub(_unescape_char, text) if ESCAPE in text else text


def escape_json(value: Any) -> Any:
    """``value`` with every string escaped, object keys included (a model may name an argument anything)."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_text(k) if isinstance(k, str) else k: v if type(v) in _KEPT else escape_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _KEPT else escape_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return _FLOAT_OUT[repr(value)]
    return value


def unescape_json(value: Any) -> Any:
    if isinstance(value, str):
        if ESCAPE not in value:
            return value
        if value[:1] == ESCAPE and value in _FLOAT_IN:
            return _FLOAT_IN[value]
        return _ESCAPED.sub(_unescape_char, value)
    if isinstance(value, dict):
        return {unescape_text(k) if isinstance(k, str) else k: v if type(v) in _KEPT else unescape_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _KEPT else unescape_json(v) for v in value]
    return value


def readable_json(value: Any, *, surrogates: bool = True) -> Any:
    """``value`` as a model can be sent it: lone surrogates in the escape form (unless
    ``surrogates=False``), non-finite floats as ``"NaN"``/``"Infinity"``/``"-Infinity"``. The same
    object when nothing needed it (the common case costs one walk and no copy)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(_escape_char, value) if surrogates and _LONE_SURROGATE.search(value) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else _READABLE_FLOAT[repr(value)]
    if isinstance(value, dict):
        items = [(readable_json(k, surrogates=surrogates), readable_json(v, surrogates=surrogates)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        out = [readable_json(v, surrogates=surrogates) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (which no UTF-8 JSON, so no model request, can carry)."""
    return _LONE_SURROGATE.search(text) is not None


def has_unstorable(text: str) -> bool:
    """Whether ``text`` holds a character a store refuses (NUL or a lone surrogate)."""
    return _REFUSED.search(text) is not None
