"""A streamed model reply (`"stream": true`): asked for as SSE chunks from the
fake OpenAI-compatible server, assembled, and recorded exactly as the plain
reply would have been; its tokens reach the task's live group."""
from __future__ import annotations

import json

import pytest

from tasks_app.gateway.model_settings import model_settings_errors
from tasks_app.machine import TaskStatus
from tasks_app.models import Step
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import error, reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

STREAM = {"stream": True}


def _run(world, server, *replies):  # type: ignore[no-untyped-def]
    server.push(*replies)
    return drive(submit(world.tenant, None, agent="llm", goal="Where is order A-1?").pk)


def test_a_streamed_reply_is_recorded_as_the_plain_one(world, openai_server):
    replies = (
        reply("Looking the order up.",
              tool_calls=[("lookup_order", {"order_id": "A-1", "_cites": ["goal"]})],
              usage=(100, 20)),
        reply('{"answer": "A-1 is with Ada"}', usage=(150, 10)),
    )
    openai_agent(world.tenant, openai_server, name="llm", model=STREAM)
    streamed = _run(world, openai_server, *replies)
    openai_agent(world.tenant, openai_server, name="llm", model={"stream": False})
    plain = _run(world, openai_server, *replies)

    assert streamed.status == plain.status == TaskStatus.SUCCEEDED
    assert streamed.result == plain.result == {"answer": "A-1 is with Ada"}
    assert (streamed.model_calls, streamed.tokens) == (plain.model_calls, plain.tokens) == (2, 280)
    decisions = [list(Step.objects.filter(task=t).order_by("step_no").values_list(
        "decision", flat=True)) for t in (streamed, plain)]
    assert decisions[0] == decisions[1]
    assert decisions[0][0] == {"kind": "tool_call", "tool": "lookup_order",
                               "args": {"order_id": "A-1"}, "reason": "Looking the order up.",
                               "cites": ["goal"]}
    asked = [r.body for r in openai_server.requests]
    assert [b.get("stream") for b in asked] == [True, True, None, None]
    assert asked[0]["stream_options"] == {"include_usage": True}
    raw = json.loads(Step.objects.get(task=streamed, step_no=1).model_log["raw"])
    assert raw["response"]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "lookup_order", "arguments": json.dumps({"order_id": "A-1", "_cites": ["goal"]})}


def test_a_failed_stream_is_retried_like_a_failed_call(world, openai_server):
    openai_agent(world.tenant, openai_server, name="llm", model=STREAM)
    task = _run(world, openai_server, error(503), reply('{"answer": "ok"}'))

    assert task.status == TaskStatus.SUCCEEDED and task.result == {"answer": "ok"}
    step = Step.objects.get(task=task, step_no=1)
    assert step.model_log["attempts"] == 2


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_stream_must_be_a_boolean(value):
    assert model_settings_errors({"backend": "scripted", "stream": value}) == {
        "stream": ["true or false"]}
    assert model_settings_errors({"backend": "scripted", "stream": True}) == {}
