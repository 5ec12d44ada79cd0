"""Replies blocked by the provider's safety filter (`finish_reason`
"content_filter") or refused by the model (`message.refusal`), against the
fake OpenAI-compatible server: asked once more, then the fallback model, each
refusal on the task's timeline; with no model left, a person decides."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import Scripted, reply
from tests.helpers import drive, task_page

pytestmark = pytest.mark.django_db(transaction=True)


def _filtered() -> Scripted:
    return reply(None, finish_reason="content_filter")


def _refused(text: str) -> Scripted:
    scripted = reply(None)
    scripted.body["choices"][0]["message"]["refusal"] = text
    return scripted


def _refusals(task_id: int) -> list[tuple[str, str, str]]:
    return [(e.payload["model"], e.payload["reason"], e.payload["then"])
            for e in Event.objects.filter(task_id=task_id, type="model_refused").order_by("id")]


def test_a_filtered_reply_is_asked_again_then_goes_to_the_fallback_model(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"fallback": {"name": "backup"}})
    openai_server.push(_filtered(), _filtered(), model="primary")
    openai_server.push(reply("Done by the backup."), model="backup")
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "Done by the backup."}
    assert [r.model for r in openai_server.requests] == ["primary", "primary", "backup"]
    assert _refusals(task.pk) == [("primary", "content_filter", "again"),
                                  ("primary", "content_filter", "fallback")]
    log = Step.objects.get(task=task, step_no=1).model_log
    assert (log["model"], log["used_fallback"], log["attempts"]) == ("backup", True, 3)
    assert [r["then"] for r in log["refusals"]] == ["again", "fallback"]
    assert task.model_calls == 3  # every request sent counts
    html = task_page(world.users[Role.OPERATOR], task.pk)
    assert "The model refused to answer (content_filter)" in html
    assert "sent to the fallback model" in html


def test_a_refusal_answered_on_the_second_try_stays_on_the_primary_model(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"fallback": {"name": "backup"}})
    openai_server.push(_refused("I can't help with that."), reply("Done."), model="primary")
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert [r.model for r in openai_server.requests] == ["primary", "primary"]
    assert _refusals(task.pk) == [("primary", "refusal: I can't help with that.", "again")]
    assert Step.objects.get(task=task, step_no=1).model_log["used_fallback"] is False


@pytest.mark.parametrize("fallback", [False, True])
def test_when_no_model_will_answer_a_person_decides(world, openai_server, fallback):
    model = {"fallback": {"name": "backup"}} if fallback else {}
    openai_agent(world.tenant, openai_server, model=model, on_exhaustion="fail")
    openai_server.push(_filtered(), _filtered(), model="primary")
    openai_server.push(_filtered(), model="backup")
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    # escalated to a person, not failed, whatever on_exhaustion says
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    asked = ["primary", "primary", *(["backup"] if fallback else [])]
    assert [r.model for r in openai_server.requests] == asked
    assert [then for _, _, then in _refusals(task.pk)] == (
        ["again", "fallback", "person"] if fallback else ["again", "person"])
    escalated = Event.objects.get(task=task, type="escalated")
    assert escalated.payload["reason"] == "content_filter"
    assert task.model_calls == len(asked)
    assert not Step.objects.filter(task=task).exists()
