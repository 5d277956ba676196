"""Which agent answers an OpenAI Agents SDK run with handoffs: read from the transcript alone
(``adapters/openai_agents/handoffs.current``), so a relaunch, a retry or a resume find the same one."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

from helix_dbos.adapters.openai_agents.handoffs import answer, current

ROUTES = {"triage": {"transfer_to_billing": "billing", "transfer_to_faq": "faq"}, "billing": {"transfer_to_triage": "triage"}, "faq": {}}


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


def handed(tool: str, content: Any, call_id: str) -> list[Any]:
    return [ModelResponse(parts=[ToolCallPart(tool_name=tool, args="{}", tool_call_id=call_id)]),
            ModelRequest(parts=[ToolReturnPart(tool_name=tool, content=content, tool_call_id=call_id)])]


def test_the_entry_agent_answers_until_a_handoff_is_answered_ok() -> None:
    assert current([user("hi")], "triage", ROUTES) == "triage"
    assert current([user("hi"), *handed("transfer_to_billing", answer("billing"), "c1")], "triage", ROUTES) == "billing"


def test_handoffs_chain_from_the_agent_answering_then() -> None:
    chain = [user("hi"), *handed("transfer_to_billing", answer("billing"), "c1"), *handed("transfer_to_triage", answer("triage"), "c2"),
             *handed("transfer_to_faq", answer("faq"), "c3")]
    assert current(chain, "triage", ROUTES) == "faq"
    # billing has no transfer_to_faq: a call to it while billing answered switched nothing
    assert current([user("hi"), *handed("transfer_to_billing", answer("billing"), "c1"), *handed("transfer_to_faq", answer("faq"), "c2")],
                   "triage", ROUTES) == "billing"


def test_a_handoff_that_failed_or_is_in_doubt_switches_nothing() -> None:
    for content in ({"status": "outcome_unknown", "message": "the tool may have run"}, {"status": "error", "error": {"message": "no"}},
                    {"status": "run_stopped", "message": "stopped"}, "Unknown tool name"):
        assert current([user("hi"), *handed("transfer_to_billing", content, "c1")], "triage", ROUTES) == "triage", content


def test_a_user_message_starts_with_the_entry_agent_again() -> None:
    turn_one = [user("hi"), *handed("transfer_to_billing", answer("billing"), "c1"), ModelResponse(parts=[])]
    assert current([*turn_one, user("next")], "triage", ROUTES) == "triage"
    assert current([*turn_one, user("next"), *handed("transfer_to_billing", answer("billing"), "c2")], "triage", ROUTES) == "billing"
