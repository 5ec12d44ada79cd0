"""Human decisions through the API: approve (with edited, re-validated
arguments), reject, respond; resolve reconciliations; stale versions and
double decisions are 409s; separation of duties."""

from __future__ import annotations

import pytest

from accounts_app.models import Role
from approvals_app.models import Approval, Reconciliation
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tasks_app.services.demo import demo_agent_ensure
from tools_app.models import LedgerStatus, ToolExecution

from .conftest import REFUND_ARGS, Tenancy

REV, ADM, OP = Role.REVIEWER, Role.ADMIN, Role.OPERATOR


def _post(t: Tenancy, role: str, url: str, body: dict | None = None):  # type: ignore[no-untyped-def]
    return t.client(role).post(url, body or {}, format="json")


def test_approvals_list_and_detail(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    page = main.client(REV).get("/api/v1/approvals?status=pending").json()
    assert [a["id"] for a in page["results"]] == [approval.pk]
    item = page["results"][0]
    assert (item["task"], item["tool"], item["args"], item["status"]) == (
        task.pk,
        "issue_refund",
        REFUND_ARGS,
        "pending",
    )
    assert item["preview"]["risk"] == "high"
    assert main.client(REV).get("/api/v1/approvals?status=approved").json()["results"] == []
    assert main.client(REV).get(f"/api/v1/approvals/{approval.pk}").json()["id"] == approval.pk


def test_approve_runs_the_step_and_a_second_decision_is_a_409(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    response = _post(
        main,
        REV,
        f"/api/v1/approvals/{approval.pk}/approve",
        {"comment": "evidence attached", "expected_version": task.version},
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decided_by"], body["decided_role"]) == (
        "approved",
        main.users[REV].username,
        "reviewer",
    )
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING
    for action, payload in (
        ("approve", {}),
        ("reject", {"comment": "no"}),
        ("respond", {"output": {}}),
    ):
        again = _post(main, ADM, f"/api/v1/approvals/{approval.pk}/{action}", payload)
        assert again.status_code == 409, action
        assert again.json()["error"]["code"] == "already_decided"
    event = Event.objects.filter(task=task, type="approval_granted").get()
    assert (event.actor, event.actor_role, event.payload["seen_version"]) == (
        main.users[REV].username,
        "reviewer",
        task.version,
    )


def test_approve_with_edited_arguments_stores_the_diff(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    edited = {**REFUND_ARGS, "amount_cents": 300}
    response = _post(main, REV, f"/api/v1/approvals/{approval.pk}/approve", {"args": edited})
    assert response.status_code == 200
    body = response.json()
    assert body["edited_args"] == edited
    assert body["args_diff"] == {"amount_cents": {"from": 500, "to": 300}}
    assert Step.objects.get(pk=approval.step_id).args == edited


@pytest.mark.parametrize(
    "args",
    [
        {"order_id": "A-1", "amount_cents": "lots"},
        {"order_id": "A-1", "amount_cents": 5, "surprise": True},
        {"amount_cents": 5},
    ],
)
def test_edited_arguments_are_revalidated_against_the_tool_schema(
    main: Tenancy, args: dict
) -> None:
    task, approval = main.waiting_for_approval()
    response = _post(main, REV, f"/api/v1/approvals/{approval.pk}/approve", {"args": args})
    assert response.status_code == 400
    assert "args" in response.json()["error"]["details"]
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert Task.objects.get(pk=task.pk).version == task.version


def test_edited_arguments_are_checked_against_policy(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    main.tenant.tools.filter(name="issue_refund").update(enabled=False)
    response = _post(
        main,
        REV,
        f"/api/v1/approvals/{approval.pk}/approve",
        {"args": {**REFUND_ARGS, "amount_cents": 1}},
    )
    assert response.status_code == 400
    assert "disabled" in str(response.json()["error"]["details"]["args"])
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_reject_needs_a_comment_and_tells_the_agent(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    missing = _post(main, REV, f"/api/v1/approvals/{approval.pk}/reject", {})
    assert missing.status_code == 400 and "comment" in missing.json()["error"]["details"]
    response = _post(
        main, REV, f"/api/v1/approvals/{approval.pk}/reject", {"comment": "no photo of the damage"}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    step = Step.objects.get(pk=approval.step_id)
    assert (step.status, step.error["comment"]) == (StepStatus.REJECTED, "no photo of the damage")


def test_respond_supplies_the_result(main: Tenancy) -> None:
    task, approval = main.waiting_for_approval()
    missing = _post(main, REV, f"/api/v1/approvals/{approval.pk}/respond", {})
    assert missing.status_code == 400 and "output" in missing.json()["error"]["details"]
    response = _post(
        main,
        REV,
        f"/api/v1/approvals/{approval.pk}/respond",
        {"output": {"refund_id": "manual-7"}, "comment": "refunded by phone"},
    )
    assert response.status_code == 200
    assert response.json()["response_output"] == {"refund_id": "manual-7"}
    step = Step.objects.get(pk=approval.step_id)
    assert (step.status, step.output) == (StepStatus.SUCCEEDED, {"refund_id": "manual-7"})


@pytest.mark.parametrize(
    "action,payload",
    [("approve", {}), ("reject", {"comment": "no"}), ("respond", {"output": {"x": 1}})],
)
def test_a_stale_expected_version_on_an_approval_is_a_409(
    main: Tenancy, action: str, payload: dict
) -> None:
    task, approval = main.waiting_for_approval()
    response = _post(
        main,
        REV,
        f"/api/v1/approvals/{approval.pk}/{action}",
        {**payload, "expected_version": task.version - 1},
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "stale_version"
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_APPROVAL


def test_the_requester_cannot_approve_its_own_task(main: Tenancy) -> None:
    reviewer = main.users[REV]
    task, approval = main.waiting_for_approval(requester=reviewer)
    response = _post(main, REV, f"/api/v1/approvals/{approval.pk}/approve")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "separation_of_duties"
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    # another reviewer or an admin may
    assert _post(main, ADM, f"/api/v1/approvals/{approval.pk}/approve").status_code == 200


def test_a_profile_may_allow_self_approval(main: Tenancy) -> None:
    demo_agent_ensure(main.tenant, name="self-serve", allow_self_approval=True)
    task, approval = main.waiting_for_approval(requester=main.users[REV], agent="self-serve")
    assert _post(main, REV, f"/api/v1/approvals/{approval.pk}/approve").status_code == 200


# --- reconciliations ---------------------------------------------------------------------------


def test_reconciliation_shows_key_attempts_and_status_answer(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    page = main.client(OP).get("/api/v1/reconciliations?status=open").json()
    assert [r["id"] for r in page["results"]] == [rec.pk]
    item = page["results"][0]
    assert item["idempotency_key"] == rec.idempotency_key
    assert item["attempts"] and item["attempts"][0]["outcome"] == "uncertain"
    assert item["status_answer"]["state"] == "unknown"


def test_resolve_succeeded_needs_the_output(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    url = f"/api/v1/reconciliations/{rec.pk}/resolve"
    missing = _post(main, REV, url, {"outcome": "succeeded", "comment": "provider says done"})
    assert missing.status_code == 400 and "output" in missing.json()["error"]["details"]
    no_comment = _post(main, REV, url, {"outcome": "failed"})
    assert no_comment.status_code == 400 and "comment" in no_comment.json()["error"]["details"]
    response = _post(
        main,
        REV,
        url,
        {
            "outcome": "succeeded",
            "output": {"sent": True},
            "comment": "provider dashboard shows it",
            "expected_version": task.version,
        },
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["outcome"]) == ("resolved", "succeeded")
    step = Step.objects.get(pk=rec.step_id)
    assert (step.status, step.output) == (StepStatus.SUCCEEDED, {"sent": True})
    assert (
        ToolExecution.objects.get(idempotency_key=rec.idempotency_key).status
        == LedgerStatus.SUCCEEDED
    )
    again = _post(main, ADM, url, {"outcome": "failed", "comment": "changed my mind"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_resolved"


def test_resolve_failed_lets_the_model_continue(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    response = _post(
        main,
        REV,
        f"/api/v1/reconciliations/{rec.pk}/resolve",
        {"outcome": "failed", "comment": "nothing arrived"},
    )
    assert response.status_code == 200
    assert Step.objects.get(pk=rec.step_id).status == StepStatus.FAILED
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING


def test_retry_with_the_same_key_only_for_tools_that_honour_keys(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    url = f"/api/v1/reconciliations/{rec.pk}/resolve"
    refused = _post(main, REV, url, {"outcome": "retry", "comment": "try again"})
    assert refused.status_code == 400 and "outcome" in refused.json()["error"]["details"]
    assert Reconciliation.objects.get(pk=rec.pk).status == "open"
    # the admin learns the endpoint deduplicates on Idempotency-Key, and says so
    patched = main.client(ADM).patch(
        "/api/v1/tools/hang_write", {"side_effect": "idempotent_write"}, format="json"
    )
    assert patched.status_code == 200
    response = _post(main, REV, url, {"outcome": "retry", "comment": "provider dedupes; retry"})
    assert response.status_code == 200
    step = Step.objects.get(pk=rec.step_id)
    assert (step.status, step.idempotency_key) == (StepStatus.RUNNING, rec.idempotency_key)
    assert (
        ToolExecution.objects.get(idempotency_key=rec.idempotency_key).status
        == LedgerStatus.FAILED_RETRYABLE
    )


def test_a_stale_expected_version_on_a_reconciliation_is_a_409(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    response = _post(
        main,
        REV,
        f"/api/v1/reconciliations/{rec.pk}/resolve",
        {"outcome": "failed", "comment": "x", "expected_version": task.version + 1},
    )
    assert response.status_code == 409 and response.json()["error"]["code"] == "stale_version"
    assert Reconciliation.objects.get(pk=rec.pk).status == "open"


def test_requery_asks_the_status_query_again(main: Tenancy) -> None:
    task, rec = main.in_reconciliation()
    before = rec.status_answer["asked_at"]
    response = _post(main, REV, f"/api/v1/reconciliations/{rec.pk}/requery")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "open" and body["status_answer"]["asked_at"] > before


# --- questions ----------------------------------------------------------------------------------


def test_questions_are_listed_and_answered_through_input(main: Tenancy) -> None:
    task, question = main.waiting_for_input()
    page = main.client(REV).get("/api/v1/questions?status=open").json()
    assert [(q["id"], q["task"], q["question"]) for q in page["results"]] == [
        (question.pk, task.pk, "How much should be refunded?")
    ]
    response = _post(main, REV, f"/api/v1/tasks/{task.pk}/input", {"answer": "250"})
    assert response.status_code == 200
    answered = main.client(REV).get(f"/api/v1/questions?task={task.pk}").json()["results"][0]
    assert (answered["status"], answered["answer"], answered["answered_by"]) == (
        "answered",
        "250",
        main.users[REV].username,
    )
    assert main.client(REV).get("/api/v1/questions?status=open").json()["results"] == []
