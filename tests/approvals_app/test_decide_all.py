"""The cards of one model reply, shown and decided together: "decide all"
through the API and the inbox (each card through the same decision as
alone), the inbox's group of cards under their task, and the task page's
row of the reply's calls side by side."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tests.factories import TenantFactory, make_user, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import FakeOpenAI, reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"amount_cents": 100, "reason": "damaged"}


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def waiting(world: Any, model: FakeOpenAI) -> int:
    """A task whose reply asked for two refunds (each needs approval) and a lookup."""
    openai_agent(world.tenant, model)
    model.push(reply("two refunds and a lookup", tool_calls=[
        ("issue_refund", {"order_id": "A-1", **REFUND}),
        ("lookup_order", {"order_id": "A-2"}),
        ("issue_refund", {"order_id": "A-2", **REFUND}),
    ]), reply('{"answer": "refunded"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="refund both").pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    return int(task.pk)


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=user)}")
    return client


def _decide_all(user: Any, task_id: int, **body: Any) -> Any:
    return _api(user).post(f"/api/v1/tasks/{task_id}/approvals/decide-all", body, format="json")


def test_decide_all_approves_every_card_of_the_reply_and_the_task_goes_on(world, waiting):
    answer = _decide_all(world.users[Role.REVIEWER], waiting, decision="approve")

    assert answer.status_code == 200, answer.json()
    decided = answer.json()["decided"]
    assert [(a["args"]["order_id"], a["status"]) for a in decided] == [
        ("A-1", "approved"), ("A-2", "approved")]
    # each card its own decision: the first recorded, the last moved the task
    assert Event.objects.filter(task_id=waiting, type="approval_decided").count() == 1
    assert Event.objects.filter(task_id=waiting, type="approval_granted").count() == 1
    task = drive(waiting)
    assert task.status == TaskStatus.SUCCEEDED
    assert [s.status for s in Step.objects.filter(task_id=waiting, kind="tool")
            .order_by("step_no")] == ["SUCCEEDED"] * 3


def test_reject_all_needs_a_comment_and_decides_nothing_without_one(world, waiting):
    refused = _decide_all(world.users[Role.REVIEWER], waiting, decision="reject")
    assert refused.status_code == 400
    assert "comment" in refused.json()["error"]["details"]
    assert Approval.objects.filter(task_id=waiting, status="pending").count() == 2

    done = _decide_all(world.users[Role.REVIEWER], waiting, decision="reject", comment="no")
    assert done.status_code == 200
    assert {a["status"] for a in done.json()["decided"]} == {"rejected"}
    assert drive(waiting).status == TaskStatus.SUCCEEDED  # the model saw two rejections


def test_decide_all_is_for_deciders_of_the_tasks_tenant(world, waiting):
    assert _decide_all(world.users[Role.REQUESTER], waiting,
                       decision="approve").status_code == 403
    other = make_user(TenantFactory(name="t-other"), Role.REVIEWER)
    assert _decide_all(other, waiting, decision="approve").status_code == 404
    assert Approval.objects.filter(task_id=waiting, status="pending").count() == 2


def test_the_inbox_groups_the_cards_of_a_reply_and_decides_them_all_at_once(world, waiting):
    client = Client()
    client.force_login(world.users[Role.REVIEWER])
    html = client.get("/inbox/").content.decode()
    assert f'data-reply-group="{waiting}"' in html
    assert "Approve all 2" in html
    group = html[html.index(f'data-reply-group="{waiting}"'):]
    cards = [a.pk for a in Approval.objects.filter(task_id=waiting).order_by("step__step_no")]
    assert group.index(f"approval-{cards[0]}") < group.index(f"approval-{cards[1]}")

    answer = client.post(f"/inbox/tasks/{waiting}/decide-all/", {"decision": "approve"})
    assert answer.status_code == 302
    assert not Approval.objects.filter(task_id=waiting, status="pending").exists()
    assert drive(waiting).status == TaskStatus.SUCCEEDED


def test_the_task_page_shows_the_calls_of_one_reply_side_by_side(world, waiting):
    client = Client()
    client.force_login(world.users[Role.OPERATOR])
    html = client.get(f"/tasks/{waiting}/").content.decode()
    row = html[html.index('class="reply-row"'):]
    assert 'data-reply-calls="3"' in row[:300]
    assert row.index('id="step-1"') < row.index('id="step-2"') < row.index('id="step-3"')
