"""The reviewer's inbox without a browser: each decision through its card (as
htmx posts it), stale views refused with the fresh state, edited arguments
re-validated with their diff, questions, and reconciliations."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.models import Approval, Question, Reconciliation
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tests.factories import submit
from tests.helpers import drive
from tools_app.models import Tool

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
REFUND = [
    {
        "tool": "issue_refund",
        "args": {"order_id": "A-1", "amount_cents": 1500, "reason": "damaged"},
        "reason": "photos show the damage",
    },
    {"final": {"ok": True}},
]


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def pending(world):  # type: ignore[no-untyped-def]
    task = submit(world.tenant, REFUND, goal="Refund A-1", requester=world.users[Role.REQUESTER])
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    approval = Approval.objects.get(task=task)
    return {
        "task": task,
        "approval": approval,
        "version": Task.objects.get(pk=task.pk).version,
        "url": f"/inbox/approvals/{approval.pk}",
    }


def test_the_inbox_lists_each_kind_with_what_is_needed_to_decide(world, pending):
    drive(submit(world.tenant, [{"ask": "Which colour?"}]).pk)
    html = client_for(world.users[Role.REVIEWER]).get("/inbox/").content.decode()
    assert "issue_refund" in html and "photos show the damage" in html and "high risk" in html
    assert "Which colour?" in html
    assert "No uncertain tool result to reconcile." in html
    for label in (
        "Approve",
        "Edit and approve…",
        "Reject…",
        "Respond with a result…",
        "Send answer",
    ):
        assert label in html
    badge = client_for(world.users[Role.REVIEWER]).get("/inbox/badge/").content.decode()
    assert ">2<" in badge


def test_approve_through_the_card(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    response = c.post(
        pending["url"] + "/approve/",
        {"expected_version": pending["version"], "always_allow": "on"},
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Approved issue_refund." in html and 'data-open="0"' in html
    approval = Approval.objects.get(pk=pending["approval"].pk)
    assert approval.status == "approved" and approval.always_allow
    assert Task.objects.get(pk=pending["task"].pk).status == TaskStatus.RUNNING


def test_a_decision_on_a_stale_view_is_refused_with_the_fresh_state(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    response = c.post(
        pending["url"] + "/approve/", {"expected_version": pending["version"] - 1}, **HTMX
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "moved on since you loaded this view" in html
    assert (
        f'name="expected_version" value="{pending["version"]}"' in html
    )  # fresh, ready to decide again
    assert Approval.objects.get(pk=pending["approval"].pk).status == "pending"

    c.post(pending["url"] + "/approve/", {"expected_version": pending["version"]}, **HTMX)
    again = c.post(
        pending["url"] + "/reject/",
        {"expected_version": pending["version"], "comment": "no"},
        **HTMX,
    )
    assert again.status_code == 409
    assert "already approved" in again.content.decode()
    assert Approval.objects.get(pk=pending["approval"].pk).status == "approved"


def test_without_javascript_a_refusal_renders_the_inbox_again(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    response = c.post(pending["url"] + "/approve/", {"expected_version": pending["version"] + 5})
    assert response.status_code == 409
    assert "moved on since you loaded this view" in response.content.decode()
    # Success redirects back, but never off-site.
    ok = c.post(
        pending["url"] + "/approve/",
        {"expected_version": pending["version"], "next": "https://evil.example/"},
    )
    assert ok.status_code == 302 and ok["Location"] == "/inbox/"


def test_edit_and_approve_revalidates_the_arguments_and_records_the_diff(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    bad = c.post(
        pending["url"] + "/approve/",
        {
            "expected_version": pending["version"],
            "args": json.dumps({"order_id": "A-1", "amount_cents": "lots"}),
        },
        **HTMX,
    )
    assert bad.status_code == 400
    assert "amount_cents" in bad.content.decode() and "is not of type" in bad.content.decode()
    not_json = c.post(
        pending["url"] + "/approve/",
        {"expected_version": pending["version"], "args": "{oops"},
        **HTMX,
    )
    assert not_json.status_code == 400 and "not valid JSON" in not_json.content.decode()
    assert Approval.objects.get(pk=pending["approval"].pk).status == "pending"

    preview = c.post(
        pending["url"] + "/preview/",
        {"args": json.dumps({"order_id": "A-1", "amount_cents": 900, "reason": "damaged"})},
        **HTMX,
    )
    assert preview.status_code == 200
    assert "amount_cents" in preview.content.decode() and "1500" in preview.content.decode()
    assert "Valid against the tool" in preview.content.decode()
    assert (
        c.post(pending["url"] + "/preview/", {"args": '{"order_id": 7}'}, **HTMX).status_code == 400
    )

    ok = c.post(
        pending["url"] + "/approve/",
        {
            "expected_version": pending["version"],
            "comment": "partial",
            "args": json.dumps({"order_id": "A-1", "amount_cents": 900, "reason": "damaged"}),
        },
        **HTMX,
    )
    assert ok.status_code == 200
    assert "Approved issue_refund with edited arguments." in ok.content.decode()
    assert "Edited by the reviewer" in ok.content.decode()
    approval = Approval.objects.get(pk=pending["approval"].pk)
    assert approval.args_diff == {"amount_cents": {"from": 1500, "to": 900}}
    assert Step.objects.get(pk=approval.step_id).args["amount_cents"] == 900


def test_reject_needs_feedback(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    empty = c.post(
        pending["url"] + "/reject/", {"expected_version": pending["version"], "comment": ""}, **HTMX
    )
    assert empty.status_code == 400 and "Say why" in empty.content.decode()
    ok = c.post(
        pending["url"] + "/reject/",
        {"expected_version": pending["version"], "comment": "no evidence of damage"},
        **HTMX,
    )
    assert ok.status_code == 200 and "Rejected" in ok.content.decode()
    approval = Approval.objects.get(pk=pending["approval"].pk)
    assert approval.status == "rejected" and approval.comment == "no evidence of damage"


def test_respond_with_a_result_instead_of_running_the_tool(world, pending):
    c = client_for(world.users[Role.REVIEWER])
    ok = c.post(
        pending["url"] + "/respond/",
        {
            "expected_version": pending["version"],
            "output": '{"refund_id": "manual-1", "status": "refunded"}',
        },
        **HTMX,
    )
    assert ok.status_code == 200 and "Responded" in ok.content.decode()
    approval = Approval.objects.get(pk=pending["approval"].pk)
    assert approval.status == "responded" and approval.response_output["refund_id"] == "manual-1"


def test_the_requester_cannot_approve_its_own_action(world):
    # An admin who requested the task is still bound by separation of duties.
    task = submit(world.tenant, REFUND, requester=world.users[Role.ADMIN])
    drive(task.pk)
    approval = Approval.objects.get(task=task)
    c = client_for(world.users[Role.ADMIN])
    response = c.post(
        f"/inbox/approvals/{approval.pk}/approve/",
        {"expected_version": Task.objects.get(pk=task.pk).version},
        **HTMX,
    )
    assert response.status_code == 403
    assert "cannot decide on its actions" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_answer_a_question(world):
    task = submit(world.tenant, [{"ask": "Refund amount?"}], requester=world.users[Role.REQUESTER])
    drive(task.pk)
    question = Question.objects.get(task=task)
    version = Task.objects.get(pk=task.pk).version
    operator = client_for(world.users[Role.OPERATOR])
    assert (
        operator.post(
            f"/inbox/questions/{question.pk}/answer/",
            {"expected_version": version, "answer": "5"},
            **HTMX,
        ).status_code
        == 403
    )
    requester = client_for(world.users[Role.REQUESTER])
    empty = requester.post(
        f"/inbox/questions/{question.pk}/answer/",
        {"expected_version": version, "answer": "  "},
        **HTMX,
    )
    assert empty.status_code == 400
    ok = requester.post(
        f"/inbox/questions/{question.pk}/answer/",
        {"expected_version": version, "answer": "500 cents"},
        **HTMX,
    )
    assert ok.status_code == 200 and "Answer sent" in ok.content.decode()
    assert Question.objects.get(pk=question.pk).answer == "500 cents"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING


@pytest.mark.django_db(transaction=True)
def test_reconciliation_mark_failed_or_succeeded(world):
    Tool.objects.filter(tenant=world.tenant, name="notify_customer").update(status_tool="")
    tasks = [
        submit(
            world.tenant,
            [
                {"tool": "notify_customer", "args": {"customer": "Ada", "message": f"hello {i}"}},
                {"final": {"ok": True}},
            ],
        )
        for i in range(2)
    ]
    for t in tasks:
        assert drive(t.pk).status == TaskStatus.WAITING_FOR_RECONCILIATION
    recs = [Reconciliation.objects.get(task=t) for t in tasks]
    c = client_for(world.users[Role.REVIEWER])
    html = c.get("/inbox/").content.decode()
    assert "Re-run status query" in html and "Mark succeeded…" in html and "Mark failed…" in html
    assert "not safe for notify_customer" in html

    def resolve(rec: Reconciliation, **data: str):  # type: ignore[no-untyped-def]
        version = Task.objects.get(pk=rec.task_id).version
        return c.post(
            f"/inbox/reconciliations/{rec.pk}/resolve/",
            {"expected_version": version, **data},
            **HTMX,
        )

    assert resolve(recs[0], outcome="failed", comment="").status_code == 400
    assert resolve(recs[0], outcome="succeeded", output="").status_code == 400
    refused = resolve(recs[0], outcome="retry", comment="try again")
    assert (
        refused.status_code == 400
        and "only safe for tools that honour keys" in refused.content.decode()
    )
    assert Reconciliation.objects.get(pk=recs[0].pk).status == "open"

    ok = resolve(recs[0], outcome="failed", comment="the provider has no record of it")
    assert ok.status_code == 200 and "Marked failed" in ok.content.decode()
    ok = resolve(
        recs[1],
        outcome="succeeded",
        output='{"notification_id": "nt_x", "delivered": true}',
        comment="seen in the provider's dashboard",
    )
    assert ok.status_code == 200 and "Marked succeeded" in ok.content.decode()
    assert [Reconciliation.objects.get(pk=r.pk).outcome for r in recs] == ["failed", "succeeded"]
    assert Step.objects.get(pk=recs[1].step_id).output == {
        "notification_id": "nt_x",
        "delivered": True,
    }


@pytest.mark.django_db(transaction=True)
def test_a_requery_that_still_cannot_tell_says_so(world):
    Tool.objects.filter(tenant=world.tenant, name="notify_customer").update(status_tool="")
    task = submit(
        world.tenant, [{"tool": "notify_customer", "args": {"customer": "Ada", "message": "hi"}}]
    )
    drive(task.pk)
    rec = Reconciliation.objects.get(task=task)
    c = client_for(world.users[Role.REVIEWER])
    response = c.post(f"/inbox/reconciliations/{rec.pk}/requery/", {"expected_version": 1}, **HTMX)
    assert response.status_code == 200
    assert "still cannot tell" in response.content.decode()
    assert Reconciliation.objects.get(pk=rec.pk).status == "open"


def test_a_preview_against_a_stored_schema_the_rules_refuse_says_so(world, pending):
    """A schema stored before the rules existed is never applied: the reviewer
    is told why, instead of an error page."""
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(
        args_schema={"type": "object", "$ref": "#"})
    preview = client_for(world.users[Role.REVIEWER]).post(
        pending["url"] + "/preview/",
        {"args": json.dumps({"order_id": "A-1", "amount_cents": 900})},
        **HTMX,
    )
    assert preview.status_code == 400
    assert "The stored schema is refused" in preview.content.decode()
    assert Approval.objects.get(pk=pending["approval"].pk).status == "pending"


def test_edited_arguments_too_costly_to_validate_are_refused_not_a_frozen_page(world, pending):
    """The preview and the approval validate a reviewer's edit in the web request:
    the same bounded validator, a 400 naming the limit, nothing decided."""
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(args_schema={
        "type": "object",
        "properties": {"lines": {"type": "array", "allOf": [{"uniqueItems": True}] * 20}},
    })
    # under the form's 100,000 characters, and still 160,000 item checks
    edited = json.dumps({"order_id": "A-1", "amount_cents": 900, "lines": list(range(8_000))})
    c = client_for(world.users[Role.REVIEWER])

    preview = c.post(pending["url"] + "/preview/", {"args": edited}, **HTMX)
    approve = c.post(pending["url"] + "/approve/",
                     {"expected_version": pending["version"], "args": edited}, **HTMX)

    for answer in (preview, approve):
        assert answer.status_code == 400
        assert "validating this value took more than 100000 schema checks" in (
            answer.content.decode())
    assert Approval.objects.get(pk=pending["approval"].pk).status == "pending"
