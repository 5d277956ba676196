"""Fault injection: ``HELIX_DBOS_CRASH_AT=<point>[:<tool name>]`` exits the process at that boundary.

A product feature, not a test hook: users prove their own tools' recovery by crashing a real
process exactly where a deploy or an OOM kill would, then relaunching. ``os._exit`` skips every
``finally`` and flush, as a real kill does. The variable is read at each boundary (through
``helix_dbos/settings.py``'s ``read_one``), so a test can set it in a child process's environment
and relaunch without it, or arm ``HELIX_DBOS_FAIL_AT`` between two runs of one process.
"""

from __future__ import annotations

import os
import sys
from typing import Final

from ...errors import HelixError
from ...settings import read_one

#: The boundaries every step with bodies passes, in the order a step passes them.
STEP_CRASH_POINTS: Final = (
    "after_model",
    "after_append",
    "before_body",
    "after_body",
    "after_result",
    "before_step_commit",
    "after_step_commit",
)
#: Passed only when recovery asks a tool's reconcile check about a started call.
CHECK_CRASH_POINTS: Final = ("after_check",)
#: Passed only by a step that delegates to a remote child or a companion.
CHILD_CRASH_POINTS: Final = ("child_gated", "child_dispatched")
#: Every point ``HELIX_DBOS_CRASH_AT`` can name: the one list, which the docs must name exactly.
CRASH_POINTS: Final = STEP_CRASH_POINTS + CHECK_CRASH_POINTS + CHILD_CRASH_POINTS
CRASH_EXIT_CODE: Final = 97
ENV: Final = "HELIX_DBOS_CRASH_AT"


def crash_point(point: str, tool_name: str | None = None) -> None:
    """Exit at once if ``HELIX_DBOS_CRASH_AT`` names this point (and this tool, when it names one)."""
    if not _matches(read_one("crash_at"), point, tool_name):
        return
    sys.stderr.write(f"helix_dbos: crashing at {point}{':' + tool_name if tool_name else ''} ({ENV})\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


FAIL_ENV: Final = "HELIX_DBOS_FAIL_AT"
#: Where a step's store write can be made to fail (the step commit, a body's step after its attempt).
STEP_FAIL_POINTS: Final = ("before_body", "step_commit")
#: Where a child's outcome is about to be recorded on the parent's call.
CHILD_FAIL_POINTS: Final = ("child_result",)
#: Every point ``HELIX_DBOS_FAIL_AT`` can name.
FAIL_POINTS: Final = STEP_FAIL_POINTS + CHILD_FAIL_POINTS


class InjectedFault(HelixError):
    """Raised by ``fail_point``: a store error where a real one could strike, without killing the process.
    (A HelixError, so the failed run carries its code: only helix codes become a run's ``error_code``.)"""

    code = "injected_fault"


def _matches(spec: str | None, point: str, tool_name: str | None) -> bool:
    if not spec:
        return False
    want_point, _, want_tool = spec.partition(":")
    return want_point == point and (not want_tool or want_tool == tool_name)


def fail_point(point: str, tool_name: str | None = None) -> None:
    """Raise ``InjectedFault`` if ``HELIX_DBOS_FAIL_AT=<point>[:<tool>]`` names this point.

    Points (``FAIL_POINTS``): ``step_commit`` (the step commit fails after the save), ``before_body``
    (the body's step fails after its attempt was committed): the run fails with calls saved and
    unanswered; ``child_result`` (a child's outcome is about to be recorded): the parent fails with
    the call in doubt.
    """
    if _matches(read_one("fail_at"), point, tool_name):
        raise InjectedFault(f"injected failure at {point} ({FAIL_ENV})")
