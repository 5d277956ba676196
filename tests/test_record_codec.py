"""A run recorded before a deploy replays after it: the records the code wrote as plain dicts (before
they were dataclasses) decode through ``runtime/floor/codec.py``, and encode back to the same dict.

The fixtures are frozen copies of what runs recorded at 50963da (the last commit before the records
became dataclasses), taken from the ``tx_outputs`` and DBOS ``operation_outputs`` rows of
test_core_run, test_stop, test_approvals and test_subagents on both databases: one of each shape
(key set) seen. Never edit them to fit new code: a record a past version wrote stays as it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.runtime.floor import codec
from helix_dbos.runtime.floor.records import StepOutcome

#: ``helix.commit``, ``helix.fail``, ``helix.stop`` outputs, and the run workflow's DBOS result.
STEP_OUTCOMES: list[dict[str, Any]] = [
    {"status": "committed"},
    {"output": "hello", "status": "completed"},
    {"status": "completed", "output": None},
    {"status": "completed", "output": {"city": "Paris", "n": 3}},
    {"status": "failed", "error_code": "max_steps", "error": "the run used its 2 model requests (max_steps) without finishing"},
    {"status": "failed"},
    {"status": "interrupted"},
    {"status": "suspended_client_tool"},
]


@pytest.mark.parametrize("recorded", STEP_OUTCOMES, ids=lambda r: "-".join(sorted(r)) + f"-{r['status']}")
def test_a_recorded_step_outcome_decodes_and_encodes_back_the_same(recorded: dict[str, Any]) -> None:
    outcome = codec.decode(StepOutcome, recorded)
    assert isinstance(outcome, StepOutcome)
    assert outcome.status == recorded["status"]
    assert outcome.output == recorded.get("output") and outcome.error == recorded.get("error")
    assert outcome.goes_on is (recorded["status"] == "committed")
    assert codec.encode(outcome) == recorded  # what this version records is what the last one did


def test_a_record_of_the_wrong_shape_is_a_typed_error() -> None:
    with pytest.raises(codec.RecordShapeError):
        codec.decode(StepOutcome, ["committed"])
    with pytest.raises(codec.RecordShapeError):
        codec.decode(StepOutcome, {"output": 1})


def test_rows_pass_through_the_codec_as_they_are() -> None:
    """Ledger rows (``TypedDict``s) and plain values are recorded as they are (``durable.tx`` tells a
    record that needs decoding from one that does not by whether ``encode`` changed it)."""
    rows = [{"dispatch_id": "d", "status": "saved"}]
    assert codec.encode(rows) is rows
    assert codec.encode("x") == "x" and codec.encode(None) is None
    assert codec.encode([StepOutcome("committed")]) == [{"status": "committed"}]
