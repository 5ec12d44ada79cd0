"""Completion checks: a final answer is accepted only when the profile's
read-only check tools say it passes. Run in-process against real fakes at the
edge (an HTTP check service, the OpenAI-compatible model server)."""
from __future__ import annotations

import json

import pytest

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.http_tool_server import FakeToolServer, Reply
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive, task_page
from tools_app.models import Tool

pytestmark = pytest.mark.django_db(transaction=True)

CHECK = {"tool": "order_refunded",
         "args": {"order_id": "${ output.order_id }", "customer": "${ inputs.customer }"}}


def _check_tool(world, fake: FakeToolServer, *replies: Reply, **fields) -> None:  # type: ignore[no-untyped-def]
    fake.on("POST", "/check", *replies)
    add_tool(world.tenant, "order_refunded", kind="http", url=fake.url("/check"), target="",
             **{"max_retries": 1, "retry_delays_s": [0], **fields})


def _checks(task_id: int) -> list[dict]:
    return [e.payload for e in Event.objects.filter(task_id=task_id, type="completion_check")
            .order_by("id")]


def test_a_check_that_fails_twice_then_passes_ends_succeeded_after_three_answers(
        world, openai_server, fake_http):
    _check_tool(world, fake_http,
                Reply(200, {"pass": False, "reason": "no refund recorded for A-9"}),
                Reply(200, {"pass": False, "reason": "the refund of A-2 is still pending"}),
                Reply(200, {"pass": True, "reason": "refund of A-2 recorded"}))
    openai_agent(world.tenant, openai_server, completion_checks=[CHECK])
    openai_server.push(reply('{"order_id": "A-9", "done": true}'),
                       reply('{"order_id": "A-2", "done": true}'),
                       reply('{"order_id": "A-2", "done": true, "note": "waited"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund A-2",
                        input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"order_id": "A-2", "done": True, "note": "waited"}
    # three answers, each checked, on the timeline
    assert [(c["attempt"], c["passed"], c["reason"]) for c in _checks(task.pk)] == [
        (1, False, "no refund recorded for A-9"),
        (2, False, "the refund of A-2 is still pending"),
        (3, True, "refund of A-2 recorded")]
    # the check was called with arguments built from each answer and the task's input
    bodies = [r.body for r in fake_http.requests_to("POST", "/check")]
    assert bodies == [{"order_id": "A-9", "customer": "Ada"},
                      {"order_id": "A-2", "customer": "Ada"},
                      {"order_id": "A-2", "customer": "Ada"}]
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [(s.kind, s.tool) for s in steps] == [
        ("tool", "order_refunded"), ("invalid", ""), ("tool", "order_refunded"), ("invalid", ""),
        ("tool", "order_refunded"), ("final", "")]
    assert [s.error["reason"] for s in steps if s.kind == "invalid"] == [
        "no refund recorded for A-9", "the refund of A-2 is still pending"]
    # the decision log of the accepted answer names the checks it passed
    assert steps[-1].decision["check"]["passed"] == [
        {"step_no": 5, "tool": "order_refunded", "passed": True,
         "reason": "refund of A-2 recorded"}]
    # each refusal went back to the model as the reason its answer was not accepted
    assert len(openai_server.requests) == 3
    said = json.dumps(openai_server.requests[1].body["messages"])
    assert "not accepted" in said and "no refund recorded for A-9" in said
    # counted: three model calls, three check calls; the checks are not offered to the model
    assert (task.model_calls, task.tool_calls) == (3, 3)
    offered = {t["function"]["name"] for t in openai_server.requests[0].body["tools"]}
    assert "order_refunded" not in offered
    # the task page's timeline shows each verdict
    html = task_page(world.users[Role.OPERATOR], task.pk)
    assert "completion check 1 of 1 failed (answer 1)" in html
    assert "completion check 1 of 1 passed (answer 3)" in html


@pytest.mark.parametrize(("on_exhaustion", "status"), [("fail", TaskStatus.FAILED),
                                                       ("escalate", TaskStatus.WAITING_FOR_HUMAN)])
def test_a_check_that_never_passes_ends_the_task_as_on_exhaustion_says(
        world, fake_http, on_exhaustion, status):
    _check_tool(world, fake_http, Reply(200, {"pass": False, "reason": "not refunded"}))
    add_agent(world.tenant, "checked", [], completion_checks=[CHECK], max_completion_attempts=2,
              on_exhaustion=on_exhaustion)
    script = [{"final": {"order_id": "A-1"}}, {"final": {"order_id": "A-1"}},
              {"final": {"order_id": "A-1"}}]
    task = drive(submit(world.tenant, script, agent="checked", input={"customer": "Ada"}).pk)

    assert task.status == status
    assert [(c["attempt"], c["passed"]) for c in _checks(task.pk)] == [(1, False), (2, False)]
    assert task.model_calls == 2  # the second refusal was the last: the model is not asked again
    assert not Step.objects.filter(task=task, kind="final").exists()
    ended = Event.objects.filter(task=task).order_by("-id").first()
    assert ended is not None and ended.payload["reason"] == "completion_checks"
    if status == TaskStatus.FAILED:
        assert task.failure_reason == "completion_checks"


def test_an_unreachable_check_is_retried_and_never_taken_as_a_pass(world, fake_http):
    _check_tool(world, fake_http, Reply(503, {"error": "down"}), max_retries=2)
    add_agent(world.tenant, "checked", [], completion_checks=[CHECK])
    task = drive(submit(world.tenant, [{"final": {"order_id": "A-1"}}], agent="checked",
                        input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "retries_exhausted"
    assert len(fake_http.requests_to("POST", "/check")) == 3  # the call and its two retries
    assert task.result is None and not Step.objects.filter(task=task, kind="final").exists()
    assert _checks(task.pk) == []  # no verdict: nobody answered


def test_an_error_answer_or_an_answer_of_another_shape_is_a_failed_check(world, fake_http):
    _check_tool(world, fake_http, Reply(404, {"error": "no such order"}),
                Reply(200, {"ok": True}), Reply(200, {"pass": True}))
    add_agent(world.tenant, "checked", [], completion_checks=[CHECK])
    script = [{"final": {"order_id": "A-1"}}] * 3
    task = drive(submit(world.tenant, script, agent="checked", input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.SUCCEEDED
    verdicts = _checks(task.pk)
    assert [c["passed"] for c in verdicts] == [False, False, True]
    assert "answered an error" in verdicts[0]["reason"]
    assert '{"pass"' in verdicts[1]["reason"]


def test_an_answer_without_what_a_check_needs_fails_it_and_every_check_must_pass(
        world, fake_http):
    _check_tool(world, fake_http, Reply(200, {"pass": True, "reason": "ok"}))
    fake_http.on("POST", "/second", Reply(200, {"pass": False, "reason": "no email sent"}),
                 Reply(200, {"pass": True, "reason": "email sent"}))
    add_tool(world.tenant, "email_sent", kind="http", url=fake_http.url("/second"), target="")
    add_agent(world.tenant, "checked", [], on_exhaustion="fail", completion_checks=[
        CHECK, {"tool": "email_sent", "args": {"to": "${ inputs.customer }"}}])
    script = [{"final": {"answer": "done"}},  # no order_id: the first check cannot be built
              {"final": {"order_id": "A-1"}},  # the first passes, the second fails
              {"final": {"order_id": "A-1"}}]  # both pass
    task = drive(submit(world.tenant, script, agent="checked", input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.SUCCEEDED
    refused = list(Step.objects.filter(task=task, kind="invalid").order_by("step_no"))
    assert "could not be built from the answer" in refused[0].error["reason"]
    assert refused[1].error["check"] == "email_sent"
    assert [(c["tool"], c["attempt"], c["passed"]) for c in _checks(task.pk)] == [
        ("order_refunded", 2, True), ("email_sent", 2, False),
        ("order_refunded", 3, True), ("email_sent", 3, True)]


def test_a_check_made_a_write_after_the_profile_was_saved_is_never_called(world, fake_http):
    _check_tool(world, fake_http, Reply(200, {"pass": True, "reason": "ok"}))
    add_agent(world.tenant, "checked", [], completion_checks=[CHECK])
    Tool.objects.filter(tenant=world.tenant, name="order_refunded").update(side_effect="write")
    task = drive(submit(world.tenant, [{"final": {"order_id": "A-1"}}] * 2, agent="checked",
                        input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "completion_checks"
    assert "not read-only now" in task.failure_detail["detail"]["message"]
    assert fake_http.requests_to("POST", "/check") == [] and _checks(task.pk) == []
    assert task.result is None and task.model_calls == 1
