"""``dbos workflow cancel`` of a queued run, then ``dbos workflow resume``: refused once the cancel is
settled (docs/recovery.md, "Operating on runs with DBOS's tools").

DBOS's resume clears every trace of a cancel (status, queue), so what refuses the resumed workflow
is the ledger's settlement of the cancel, which happens at the next launch of any process on the
database or at the session's next entry. Real ``dbos`` CLI processes; the model's requests are
counted in this process, which serves the queues the resumed workflow runs on.
"""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from tests.support.crashkit import helix_table, query
from tests.processes.test_dbos_operator import dbos_cli, workflow
from tests.support.waiting import wait_for


def test_resume_of_a_cancelled_queued_run_is_refused_once_settled(db_url: str) -> None:
    asked: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        return ModelResponse(parts=[TextPart("ran")])

    def agents() -> list[hx.Agent]:
        return [hx.Agent("a", FunctionModel(reply))]

    front = hx.Runtime(agents(), database_url=db_url, mode="client").launch()  # enqueues, runs nothing
    try:
        run_id = front.start("a", "hello").run_id
    finally:
        front.shutdown()
    dbos_cli(db_url, "cancel", run_id)
    rt = hx.Runtime(agents(), database_url=db_url, mode="worker", executor_id="settles").launch()  # the launch settles the cancel
    try:
        settled = rt.reader.wait_run(run_id, 60)
        assert (settled.status, settled.error_code) == ("failed", "run_stopped"), settled
        dbos_cli(db_url, "resume", run_id)
        ended = wait_for("the resumed workflow's end", lambda: (w := workflow(db_url, run_id)) is not None and w["status"] in ("ERROR", "SUCCESS") and w)
        assert ended["status"] == "ERROR", ended  # refused: run_fenced
    finally:
        rt.shutdown()
    run = query(db_url, f"SELECT status, error_code FROM {helix_table(db_url, 'runs')} WHERE run_id = :r", r=run_id)
    assert run == [{"status": "failed", "error_code": "run_stopped"}], run
    assert asked == [], "the resumed run asked the model"
