"""Tasks run by the `openai` backend against a local fake OpenAI-compatible
server (a real HTTP server on 127.0.0.1): the runner, the database and the SDK
are all real."""
from __future__ import annotations

import json

import pytest

from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tests.factories import actor_of, submit
from tests.fakes.fixtures import KEY, openai_agent
from tests.fakes.openai_server import error, reply, slow
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)


def _messages(request) -> list[dict]:  # type: ignore[no-untyped-def]
    return request.body["messages"]


def test_tool_calls_then_a_final_answer(world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(
        reply("Looking the order up.",
              tool_calls=[("lookup_order", {"order_id": "A-1", "_cites": ["goal"]})],
              usage=(100, 20)),
        reply('{"answer": "A-1 is with Ada"}', usage=(150, 10)),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Where is order A-1?").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "A-1 is with Ada"}
    assert (task.model_calls, task.tokens, task.tool_calls) == (2, 280, 1)
    first, final = list(Step.objects.filter(task=task).order_by("step_no"))
    assert first.decision == {"kind": "tool_call", "tool": "lookup_order",
                              "args": {"order_id": "A-1"}, "reason": "Looking the order up.",
                              "cites": ["goal"]}
    assert first.output["customer"] == "Ada"
    log = first.model_log
    assert (log["backend"], log["model"], log["tokens"], log["attempts"], log["used_fallback"]) == (
        "openai", "primary", 120, 1, False)
    assert "context: goal" in log["input_summary"]
    assert json.loads(log["raw"])["response"]["choices"][0]["message"]["tool_calls"][0]["function"][
        "name"] == "lookup_order"
    assert final.kind == "final"

    ask_first, ask_second = openai_server.requests
    assert ask_first.headers["authorization"] == f"Bearer {KEY}"
    body = ask_first.body
    assert (body["model"], body["temperature"], body["top_p"]) == ("primary", 0.2, 0.9)
    tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert set(tools) == {"lookup_order", "issue_refund", "notify_customer", "ask_user"}
    assert tools["lookup_order"]["parameters"]["required"] == ["order_id"]
    assert "_cites" in tools["lookup_order"]["parameters"]["properties"]
    system = _messages(ask_first)[0]
    assert system["role"] == "system" and "You are a careful support agent." in system["content"]
    assert "[goal] Goal: Where is order A-1?" in _messages(ask_first)[1]["content"]

    # The second call sees the first call and its result, paired by the step's id.
    call, result = _messages(ask_second)[2:4]
    assert call["role"] == "assistant" and call["tool_calls"][0]["id"] == "step_1"
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"order_id": "A-1"}
    assert result["role"] == "tool" and result["tool_call_id"] == "step_1"
    assert json.loads(result["content"])["output"]["customer"] == "Ada"


def test_several_tool_calls_in_one_reply_are_separate_steps_each_with_its_own_approval(
        world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(
        reply("Check, then refund.", tool_calls=[
            ("lookup_order", {"order_id": "A-2"}),
            ("issue_refund", {"order_id": "A-2", "amount_cents": 1200, "reason": "damaged"}),
            ("lookup_order", {"order_id": "A-1"}),
        ]),
        reply('{"answer": "refunded"}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund A-2").pk)

    # The calls that need no approval ran (together); the second waits for its own
    # approval, and the model is not asked again until it is decided.
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [(s.tool, s.status) for s in steps] == [("lookup_order", "SUCCEEDED"),
                                                   ("issue_refund", "PENDING_APPROVAL"),
                                                   ("lookup_order", "SUCCEEDED")]
    assert len(openai_server.requests) == 1
    approval = Approval.objects.get(task=task, status="pending")
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk,
                    actor=actor_of(world.users["reviewer"]), decision="approve")
    task = drive(task.pk)

    assert task.status == TaskStatus.SUCCEEDED
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [(s.tool, s.status) for s in steps] == [
        ("lookup_order", "SUCCEEDED"), ("issue_refund", "SUCCEEDED"), ("lookup_order", "SUCCEEDED"),
        ("", "SUCCEEDED")]
    assert steps[1].model_log["from_reply_of_step"] == 1
    assert steps[2].model_log["from_reply_of_step"] == 2
    assert task.model_calls == 2 and len(openai_server.requests) == 2
    # The next call shows the reply as it was: one assistant message, three results in order.
    messages = _messages(openai_server.requests[1])
    assistant = messages[2]
    assert [c["id"] for c in assistant["tool_calls"]] == ["step_1", "step_2", "step_3"]
    assert [m.get("tool_call_id") for m in messages[3:6]] == ["step_1", "step_2", "step_3"]
    assert len(messages) == 6


def test_malformed_arguments_and_an_unknown_tool_are_fed_back_then_the_model_recovers(
        world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(
        reply(tool_calls=[("lookup_order", '{"order_id": "A-1"')]),          # not JSON
        reply(tool_calls=[("drop_tables", {"all": True})]),                   # unknown tool
        reply(tool_calls=[("lookup_order", {"order": "A-1"})]),               # fails the schema
        reply(tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply("Ada has order A-1."),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Who ordered A-1?").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "Ada has order A-1."}
    invalid = list(Event.objects.filter(task=task, type="invalid_decision").order_by("id"))
    assert [e.payload["error"]["type"] for e in invalid] == [
        "invalid_decision", "unknown_tool", "invalid_arguments"]
    assert "not valid JSON" in invalid[0].payload["error"]["message"]
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [s.kind for s in steps] == ["invalid", "invalid", "invalid", "tool", "final"]

    # Each error went back to the model as the result of the call it made.
    second = _messages(openai_server.requests[1])
    call, result = second[2], second[3]
    assert call["tool_calls"][0]["function"] == {"name": "lookup_order",
                                                 "arguments": '{"order_id": "A-1"'}
    assert result["tool_call_id"] == "step_1"
    assert "not valid JSON" in json.loads(result["content"])["error"]["message"]
    third = _messages(openai_server.requests[2])
    unknown = json.loads(third[5]["content"])
    assert third[4]["tool_calls"][0]["function"]["name"] == "drop_tables"
    assert unknown["status"] == "NOT_ACCEPTED" and unknown["error"]["type"] == "unknown_tool"
    fourth = _messages(openai_server.requests[3])
    assert json.loads(fourth[7]["content"])["error"]["type"] == "invalid_arguments"


def test_an_empty_reply_is_invalid_and_the_model_is_told(world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(reply(""), reply("All done."))
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert Event.objects.filter(task=task, type="invalid_decision").count() == 1
    said, told = _messages(openai_server.requests[1])[2:4]
    assert said == {"role": "assistant", "content": "(an empty reply)"}
    assert told["role"] == "user"
    assert "did not accept" in told["content"] and "empty" in told["content"]


def test_a_429_with_retry_after_is_waited_out_then_the_call_succeeds(world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(error(429, "slow down", headers={"Retry-After": "1"}), reply("Done."))
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    log = Step.objects.get(task=task, step_no=1).model_log
    assert (log["attempts"], log["used_fallback"]) == (2, False)
    assert [f["status"] for f in json.loads(log["raw"])["failed_attempts"]] == [429]
    first, second = openai_server.requests
    assert second.at - first.at >= 0.95  # Retry-After honoured, not the short backoff


def test_repeated_500s_switch_to_the_fallback_model(world, openai_server):
    openai_agent(world.tenant, openai_server, model={
        "max_retries": 2, "fallback": {"name": "backup"}})
    openai_server.push(error(500), error(502), error(503), model="primary")
    openai_server.push(reply("Done by the backup."), model="backup")
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "Done by the backup."}
    assert [r.model for r in openai_server.requests] == ["primary", "primary", "primary", "backup"]
    log = Step.objects.get(task=task, step_no=1).model_log
    assert (log["model"], log["used_fallback"], log["attempts"]) == ("backup", True, 4)


def test_a_timeout_is_retried(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"timeout_s": 0.5, "max_retries": 1})
    openai_server.push(slow(5.0, reply("too late")), reply("Done."))
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "Done."}
    log = Step.objects.get(task=task, step_no=1).model_log
    assert log["attempts"] == 2
    assert "no reply within 0.5s" in json.loads(log["raw"])["failed_attempts"][0]["error"]


def test_when_every_attempt_times_out_the_task_waits_and_comes_back_later(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"timeout_s": 0.3, "max_retries": 0})
    openai_server.push(slow(5.0, reply("too late")))
    task = submit(world.tenant, None, agent="llm", goal="Say done")
    admit_created_tasks()

    report = run_slice(task.pk)

    task = Task.objects.get(pk=task.pk)
    assert report.ended == "later"
    assert task.status == TaskStatus.RUNNING and task.next_run_at is not None
    # No step was written, but the call was made: it counts against the budget.
    assert task.steps_count == 0 and task.model_calls == 1


def test_the_token_budget_stops_the_task(world, openai_server):
    openai_agent(world.tenant, openai_server, max_tokens=100, no_progress_repeats=0,
                 no_progress_window=0)
    for _ in range(5):
        openai_server.push(reply(tool_calls=[("lookup_order", {"order_id": "A-1"})], usage=(40, 5)))
    task = drive(submit(world.tenant, None, agent="llm", goal="Loop").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "max_tokens"
    assert task.tokens == 135 and len(openai_server.requests) == 3  # 45 + 45 + 45 >= 100


def test_a_missing_api_key_fails_the_task_without_calling(world, openai_server, settings):
    settings.TETHER_ENV_GRANTS = ("TETHER_TEST_UNSET_KEY",)  # granted, but not set
    openai_agent(world.tenant, openai_server,
                 model={"api_key_secret": None, "api_key_env": "TETHER_TEST_UNSET_KEY"})
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "model_unavailable"
    assert "TETHER_TEST_UNSET_KEY" in task.failure_detail["detail"]["message"]
    assert openai_server.requests == []


def test_a_task_runs_with_the_prompt_and_sampling_it_was_submitted_with(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"system_prompt": "Prompt one."})
    before = submit(world.tenant, None, agent="llm", goal="Say done")
    # The edit, made live at once (a row changed behind the services is no version).
    openai_agent(world.tenant, openai_server,
                 model={"system_prompt": "Prompt two.", "temperature": 0.7})
    after = submit(world.tenant, None, agent="llm", goal="Say done")
    openai_server.push(reply("one"), reply("two"))

    drive(before.pk)
    drive(after.pk)

    first, second = openai_server.requests
    assert first.body["messages"][0]["content"].endswith("Prompt one.")
    assert first.body["temperature"] == 0.2
    assert second.body["messages"][0]["content"].endswith("Prompt two.")
    assert second.body["temperature"] == 0.7
    assert Task.objects.get(pk=before.pk).agent_snapshot["model"]["system_prompt"] == "Prompt one."


def test_a_model_that_emits_lone_surrogates_is_told_and_the_task_goes_on(world, openai_server):
    """`"\\ud800"` is valid JSON but not storable text: the decision is recorded as
    invalid (cleaned), the model hears why, and the next decision runs."""
    openai_agent(world.tenant, openai_server)
    openai_server.push(
        reply("Looking \ud800 up.", tool_calls=[("lookup_order", {"order_id": "A-1\udfff"})]),
        reply('{"answer": "done"}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Where is order A-1?").pk)

    assert task.status == TaskStatus.SUCCEEDED and task.result == {"answer": "done"}
    invalid, final = list(Step.objects.filter(task=task).order_by("step_no"))
    assert invalid.kind == "invalid" and invalid.status == "FAILED"
    assert "lone surrogates" in invalid.error["message"]
    assert "\ufffd" in invalid.decision["raw"] and "\ud800" not in invalid.decision["raw"]
    assert final.kind == "final"
    told = json.dumps(_messages(openai_server.requests[1]))
    assert "lone surrogates" in told
