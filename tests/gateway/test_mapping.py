"""Pure parts of the openai backend: replies to decisions, the context as
messages, the tool catalogue, profile settings. No database, no server."""
from __future__ import annotations

import json

import pytest

from tasks_app.gateway.base import ContextItem, ContextSnapshot, Decision, ToolSpecView
from tasks_app.gateway.messages import build_messages, tool_catalogue
from tasks_app.gateway.model_settings import model_settings_errors, parse_model_settings
from tasks_app.gateway.replies import decisions_from_message


def _call(name: str, arguments: str) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_calls_keep_their_order_and_cites_leave_the_arguments():
    decisions = decisions_from_message({"content": "because", "tool_calls": [
        _call("lookup_order", '{"order_id": "A-1", "_cites": ["goal", "step:3"]}'),
        _call("ask_user", '{"question": "Which order?"}'),
        _call("notify_customer", ""),
    ]}, finish_reason="tool_calls")

    assert decisions == (
        Decision(kind="tool_call", tool="lookup_order", args={"order_id": "A-1"}, reason="because",
                 cites=("goal", "step:3")),
        Decision(kind="ask_user", question="Which order?"),
        Decision(kind="tool_call", tool="notify_customer", args={}, reason="because"),
    )


@pytest.mark.parametrize(("arguments", "error"), [
    ('{"order_id": ', "not valid JSON"),
    ('["A-1"]', "must be a JSON object"),
    ('{"order_id": "A-1", "_cites": "goal"}', "'_cites' must be a list"),
])
def test_bad_arguments_are_invalid_and_keep_the_tool_name(arguments, error):
    (decision,) = decisions_from_message({"tool_calls": [_call("lookup_order", arguments)]},
                                         finish_reason="tool_calls")
    assert decision.kind == "invalid" and decision.tool == "lookup_order"
    assert error in decision.error and decision.raw == arguments
    assert Decision.from_dict(decision.as_dict()) == decision  # survives the runner's queue


@pytest.mark.parametrize(("content", "finish", "expected"), [
    ('```json\n{"refunded_cents": 1999}\n```', "stop",
     Decision(kind="final", result={"refunded_cents": 1999})),
    ("<think>hmm</think>It shipped.", "stop",
     Decision(kind="final", result={"answer": "It shipped."})),
    ("[1, 2]", "stop", Decision(kind="final", result={"answer": "[1, 2]"})),
])
def test_text_without_tool_calls_is_the_final_answer(content, finish, expected):
    assert decisions_from_message({"content": content}, finish_reason=finish) == (expected,)


@pytest.mark.parametrize(("content", "finish", "error"), [
    ("", "stop", "empty"),
    ("<think>only thoughts</think>", "stop", "empty"),
    ("The answer is", "length", "cut off"),
])
def test_empty_or_cut_off_answers_are_invalid(content, finish, error):
    (decision,) = decisions_from_message({"content": content}, finish_reason=finish)
    assert decision.kind == "invalid" and error in decision.error


def _context(window: tuple[dict, ...]) -> ContextSnapshot:
    return ContextSnapshot(
        task_id=1, trace_id="t", goal="g", model={}, system_prompt="Be brief.",
        pinned=(ContextItem(id="goal", role="pinned", text="Goal: g"),),
        summary=ContextItem(id="summary:v2", role="summary", text="Earlier: found A-1.",
                            data={"covers_until_step": 4}),
        window=window, tools=(), model_calls_so_far=0,
    )


def test_every_call_in_the_window_gets_exactly_one_result_in_order():
    window = (
        {"id": "step:5", "step_no": 5, "kind": "tool", "status": "SUCCEEDED", "tool": "a",
         "args": {}, "reason": "first", "output": {"ok": 1}},
        {"id": "step:6", "step_no": 6, "kind": "tool", "status": "REJECTED", "tool": "b",
         "args": {"x": 1}, "reply_of": 5, "error": {"type": "rejected", "comment": "no"}},
        {"id": "step:7", "step_no": 7, "kind": "ask", "status": "SUCCEEDED", "question": "Q?",
         "output": {"answer": "yes"}},
        {"id": "step:8", "step_no": 8, "kind": "invalid", "status": "FAILED", "raw": "hm",
         "error": {"type": "invalid_decision", "message": "the reply was empty"}},
    )
    messages = build_messages(_context(window))

    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "user"]
    assert messages[0]["content"].endswith("Be brief.")
    assert "[summary:v2] Summary of steps 1-4:" in messages[1]["content"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["step_5", "step_6"]
    assert messages[2]["content"] == "first"
    assert [m["tool_call_id"] for m in messages[3:5]] == ["step_5", "step_6"]
    assert json.loads(messages[4]["content"])["error"]["comment"] == "no"
    assert messages[5]["tool_calls"][0]["function"] == {"name": "ask_user",
                                                          "arguments": '{"question": "Q?"}'}
    assert json.loads(messages[6]["content"])["output"] == {"answer": "yes"}
    assert "the reply was empty" in messages[8]["content"]


def test_the_catalogue_is_the_registry_schemas_plus_ask_user():
    tools = tool_catalogue((
        ToolSpecView(name="lookup_order", description="Find an order",
                     args_schema={"$schema": "https://json-schema.org/draft/2020-12/schema",
                                  "type": "object", "properties": {"order_id": {"type": "string"}},
                                  "required": ["order_id"], "additionalProperties": False}),
        ToolSpecView(name="ping", description="", args_schema={}),
    ))
    names = [t["function"]["name"] for t in tools]
    assert names == ["lookup_order", "ping", "ask_user"]
    params = tools[0]["function"]["parameters"]
    assert "$schema" not in params and params["required"] == ["order_id"]
    assert set(params["properties"]) == {"order_id", "_cites"}
    assert tools[1]["function"]["parameters"]["type"] == "object"


def test_profile_settings_refuse_keys_in_clear_and_bad_values():
    errors = model_settings_errors({
        "backend": "openai", "name": "", "base_url": "ftp://x", "api_key": "sk-secret",
        "temperature": 3, "max_retries": -1, "api_key_env": "1BAD",
        "fallback": {"name": "small", "token": "t"},
    })
    assert set(errors) == {"name", "base_url", "api_key", "temperature", "max_retries",
                           "api_key_env", "fallback.token"}
    assert model_settings_errors({"backend": "openai", "name": "qwen2.5:7b",
                                  "base_url": "http://127.0.0.1:11434/v1",
                                  "api_key_env": "OLLAMA_KEY",
                                  "fallback": {"name": "qwen2.5:1.5b"}}) == {}


def test_the_fallback_inherits_the_endpoint_and_key_variable():
    settings = parse_model_settings({"backend": "openai", "name": "big", "base_url": "http://h/v1",
                                     "api_key_env": "K", "fallback": {"name": "small"}})
    assert settings.fallback is not None
    assert (settings.fallback.base_url, settings.fallback.api_key_env) == ("http://h/v1", "K")
