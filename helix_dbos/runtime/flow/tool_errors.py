"""How a tool's error is logged: one line for the operator, the traceback only at DEBUG.

A tool that raises is answering the model ("slot 9am is taken"): the error is the call's result,
stored in the ledger and read by the model, not a fault of the process. A traceback on stderr for
every such answer buried the one line that matters (the demo's expected refusal printed a screen of
it), so the error is one WARNING line naming the tool, the dispatch id and the error, and the
traceback goes to DEBUG for whoever is debugging the tool. A failure of the runtime's own code
around a body is not a tool's answer and keeps its traceback at ERROR (``runtime_failed``).
"""

from __future__ import annotations

import logging

log = logging.getLogger("helix_dbos")

#: A tool's message in the one log line is cut here (the ledger and the model keep all of it).
MESSAGE_CHARS = 500


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, cut at ``MESSAGE_CHARS``."""
    text = " ".join(str(exc).split())
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def tool_raised(run_id: str, tool_name: str, dispatch_id: str, exc: BaseException, what: str = "the model is answered with the error") -> None:
    """The body's exception is the call's answer: one WARNING line, the traceback at DEBUG."""
    log.warning("run %s: tool %r (dispatch %s) raised %s; %s", run_id, tool_name, dispatch_id, one_line(exc), what)
    log.debug("run %s: tool %r (dispatch %s) raised:", run_id, tool_name, dispatch_id, exc_info=exc)


def runtime_failed(run_id: str, tool_name: str, dispatch_id: str, exc: BaseException, what: str) -> None:
    """The runtime's own code failed around a body: an unexpected error, with its traceback."""
    log.error("run %s: tool %r (dispatch %s): the runtime failed around its body (%s); %s", run_id, tool_name, dispatch_id, one_line(exc), what, exc_info=exc)
