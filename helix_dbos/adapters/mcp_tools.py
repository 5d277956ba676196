"""What every adapter's MCP tools share, whichever SDK's client lists and calls them.

An MCP server says of each tool, in its annotations, whether it only reads (``readOnlyHint``) or
may be called again with the same effect (``idempotentHint``): either makes a call safe to run
again after a crash (the contract's ``replay="safe"``). Nothing else it says does, so a tool without
them is unsafe, and a call that may have run is answered ``outcome_unknown``. The same annotations
mean the same policy whether a pydantic-ai ``MCPToolset`` or an OpenAI Agents SDK ``MCPServer``
listed the tool; the app's own policy for the tool still wins over them.

And when a call fails, the server (its process, its connection) failing is told apart from the
call failing, so the model is answered with a typed ``ToolServerError`` rather than the client's
transport exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__: list[str] = []

#: The annotations that make a call safe to run again: the tool only reads, or repeating it changes nothing more.
SAFE_HINTS = ("readOnlyHint", "idempotentHint")


def replay_from_annotations(annotations: Any) -> str:
    """``"safe"`` when an MCP tool's annotations say it only reads or is idempotent, else ``"unsafe"``.

    ``annotations`` as the client hands them: a mapping (pydantic-ai's tool metadata) or the MCP
    SDK's ``ToolAnnotations`` model (the OpenAI Agents SDK's ``FunctionTool.mcp_annotations``, whose
    attributes are snake_case since MCP SDK v2: read by their wire names); ``None`` when the server
    gave none. A hint counts only when it is ``True`` (an omitted hint defaults to the unsafe side)."""
    if annotations is None:
        return "unsafe"
    if not isinstance(annotations, Mapping):
        dump = getattr(annotations, "model_dump", None)
        annotations = dump(by_alias=True) if callable(dump) else {key: getattr(annotations, key, None) for key in SAFE_HINTS}
    return "safe" if any(annotations.get(key) is True for key in SAFE_HINTS) else "unsafe"


#: Exception type names (anywhere in the chain) of a server or connection that failed under a call.
TRANSPORT_ERRORS = frozenset({
    "ClosedResourceError", "BrokenResourceError", "EndOfStream", "ConnectError", "ReadError", "RemoteProtocolError", "McpError",
    "MCPError", "ConnectionError", "ConnectionRefusedError", "RuntimeError", "ExceptionGroup", "BaseExceptionGroup", "ToolError",
    "ClientError",
})
#: ... unless the chain says the tool itself answered with an error.
CALL_ERRORS = frozenset({"ModelRetry", "ToolFailed"})


def looks_like_transport(exc: BaseException) -> bool:
    """Whether ``exc`` (a failed MCP call) is the server or its connection failing, not the call."""
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & TRANSPORT_ERRORS) and not (names & CALL_ERRORS)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    stack = [exc]
    while stack and len(seen) < 20:
        e = stack.pop()
        seen.append(e)
        stack.extend(getattr(e, "exceptions", ()) or ())
        if e.__cause__ is not None:
            stack.append(e.__cause__)
    return seen
