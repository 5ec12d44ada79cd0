"""Task endpoints: submission (with Idempotency-Key), list filters and cursor
pages, detail, steps, events paging while events keep arriving, and the task
actions with their 409s."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts_app.models import Role
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.store.events import event_append
from tests.factories import make_user

from .conftest import Tenancy, client_for

REQ, OP, ADM = Role.REQUESTER, Role.OPERATOR, Role.ADMIN
BODY = {
    "goal": "Where is order A-1?",
    "agent": "support",
    "input": {"order": "A-1"},
    "script": [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}],
}
TASK_FIELDS = {
    "id",
    "status",
    "version",
    "goal",
    "agent",
    "input",
    "result",
    "failure_reason",
    "trace_id",
    "usage",
    "created_at",
    "updated_at",
}


# --- submission --------------------------------------------------------------------------


def test_submit_returns_the_task_in_the_contract_shape(main: Tenancy) -> None:
    response = main.client(REQ).post("/api/v1/tasks", BODY, format="json")
    assert response.status_code == 201
    task = response.json()
    assert set(task) >= TASK_FIELDS
    assert set(task["usage"]) >= {"steps", "model_calls", "tool_calls", "tokens"}
    assert (task["status"], task["version"], task["agent"], task["input"]) == (
        "CREATED",
        0,
        "support",
        {"order": "A-1"},
    )
    assert response["Location"] == f"/api/v1/tasks/{task['id']}"
    stored = Task.objects.get(pk=task["id"])
    assert stored.requester_id == main.requester.pk and stored.tenant_id == main.tenant.pk


def test_the_same_idempotency_key_and_body_return_the_same_task(main: Tenancy) -> None:
    client = main.client(REQ)
    first = client.post(
        "/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY="order-A-1-check"
    )
    again = client.post(
        "/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY="order-A-1-check"
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Task.objects.filter(tenant=main.tenant).count() == 1


def test_the_same_idempotency_key_with_another_body_is_a_409(main: Tenancy) -> None:
    client = main.client(REQ)
    client.post("/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    response = client.post(
        "/api/v1/tasks",
        {**BODY, "goal": "something else"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Task.objects.filter(tenant=main.tenant).count() == 1


def test_idempotency_keys_are_per_tenant(main: Tenancy, other: Tenancy) -> None:
    mine = main.client(REQ).post(
        "/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY="shared"
    )
    theirs = other.client(REQ).post(
        "/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY="shared"
    )
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


@pytest.mark.parametrize("key", ["has space", "x" * 201, "tab\there"])
def test_a_malformed_idempotency_key_is_a_400(main: Tenancy, key: str) -> None:
    response = main.client(REQ).post("/api/v1/tasks", BODY, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]["details"]
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "goal": ""}, "goal"),
        ({k: v for k, v in BODY.items() if k != "goal"}, "goal"),
        ({**BODY, "input": [1, 2]}, "input"),
        ({**BODY, "agent": "nobody"}, "agent"),
        ({k: v for k, v in BODY.items() if k != "script"}, "script"),
        ({**BODY, "script": "not a list"}, "script"),
        ({**BODY, "goal": "x" * 10_001}, "goal"),
    ],
)
def test_a_bad_submission_is_a_400_with_field_errors(
    main: Tenancy, body: dict[str, Any], field: str
) -> None:
    response = main.client(REQ).post("/api/v1/tasks", body, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["details"]
    assert not Task.objects.exists()


def test_a_disabled_agent_takes_no_tasks(main: Tenancy) -> None:
    main.tenant.agents.filter(name="support").update(enabled=False)
    response = main.client(REQ).post("/api/v1/tasks", BODY, format="json")
    assert response.status_code == 400
    assert "disabled" in str(response.json()["error"]["details"]["agent"])


# --- list, filters, pages ------------------------------------------------------------------------


def test_list_filters_by_status_agent_created_range_trace_and_mine(main: Tenancy) -> None:
    from tasks_app.services.demo import demo_agent_ensure

    demo_agent_ensure(main.tenant, name="billing")
    done = main.finished_task()
    created = main.created_task()
    billing = main.created_task(agent="billing")
    by_admin = make_user(main.tenant, ADM)
    from tests.factories import submit

    admins = submit(main.tenant, [{"final": {}}], requester=by_admin)
    Task.objects.filter(pk=done.pk).update(created_at=timezone.now() - timedelta(days=2))
    client = main.client(REQ)

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/v1/tasks?{query}")
        assert response.status_code == 200, response.content
        return [t["id"] for t in response.json()["results"]]

    assert ids("status=SUCCEEDED") == [done.pk]
    assert ids("status=SUCCEEDED&status=CREATED") == [admins.pk, billing.pk, created.pk, done.pk]
    assert ids("agent=billing") == [billing.pk]
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert done.pk not in ids(f"created_after={since.replace('+', '%2B')}")
    assert ids(f"created_before={since.replace('+', '%2B')}") == [done.pk]
    assert ids(f"trace_id={created.trace_id}") == [created.pk]
    assert admins.pk not in ids("mine=true")
    assert ids("status=CANCELED") == []


@pytest.mark.parametrize(
    "query",
    [
        "status=NOPE",
        "created_after=yesterday",
        "mine=perhaps",
        "cursor=garbage",
        "agent=" + "a" * 65,
    ],
)
def test_a_bad_filter_is_a_400(main: Tenancy, query: str) -> None:
    response = main.client(REQ).get(f"/api/v1/tasks?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"


def test_cursor_pages_are_stable_while_tasks_keep_arriving(main: Tenancy) -> None:
    initial = [main.created_task().pk for _ in range(7)]
    client = main.client(REQ)
    seen: list[int] = []
    url: str | None = "/api/v1/tasks?limit=3"
    while url:
        page = client.get(url).json()
        seen += [t["id"] for t in page["results"]]
        main.created_task()  # a newer task arrives between pages
        url = page["next"]
    assert seen == sorted(initial, reverse=True)  # newest first, nothing skipped or repeated


# --- detail, steps, events ------------------------------------------------------------------------


def test_detail_says_what_a_waiting_task_waits_on(main: Tenancy) -> None:
    task, question = main.waiting_for_input()
    body = main.client(REQ).get(f"/api/v1/tasks/{task.pk}").json()
    assert body["status"] == "WAITING_FOR_INPUT"
    assert body["open_request"] == {
        "kind": "question",
        "id": question.pk,
        "question": "How much should be refunded?",
    }
    assert main.client(REQ).get("/api/v1/tasks/999999").status_code == 404


def test_steps_in_the_contract_shape_and_paged(main: Tenancy) -> None:
    task = main.finished_task([{"invalid": "not json"}, {"final": {"ok": True}}])
    client = main.client(REQ)
    body = client.get(f"/api/v1/tasks/{task.pk}/steps?limit=1").json()
    assert [s["step_no"] for s in body["results"]] == [1]
    assert body["has_more"] is True
    step = body["results"][0]
    assert {
        "id",
        "step_no",
        "status",
        "decision",
        "tool",
        "args",
        "idempotency_key",
        "attempt",
        "output",
        "error",
    } <= set(step)
    rest = client.get(f"/api/v1/tasks/{task.pk}/steps?after={body['next_after']}&limit=10").json()
    assert [s["step_no"] for s in rest["results"]] == [2]
    assert rest["has_more"] is False


def test_events_paging_neither_skips_nor_repeats_while_events_keep_arriving(main: Tenancy) -> None:
    task = main.finished_task()
    client = main.client(REQ)
    seen: list[int] = []
    after = 0
    for round_no in range(50):
        page = client.get(f"/api/v1/tasks/{task.pk}/events?after={after}&limit=2").json()
        seen += [e["id"] for e in page["results"]]
        after = page["next_after"]
        if round_no < 6:  # more events commit while the client pages
            for _ in range(3):
                event_append(
                    task_id=task.pk,
                    tenant_id=task.tenant_id,
                    trace_id=task.trace_id,
                    task_version=task.version,
                    type="note",
                    actor=SYSTEM,
                    payload={"n": round_no},
                )
        elif not page["has_more"]:
            break
    assert seen == list(Event.objects.filter(task=task).order_by("id").values_list("id", flat=True))
    assert len(seen) == len(set(seen))
    first = client.get(f"/api/v1/tasks/{task.pk}/events?limit=1").json()["results"][0]
    assert {"id", "type", "task_version", "actor", "payload", "created_at"} <= set(first)
    assert first["type"] == "task_created"


@pytest.mark.parametrize("query", ["limit=501", "limit=0", "after=-1", "after=x"])
def test_events_page_size_is_bounded(main: Tenancy, query: str) -> None:
    task = main.created_task()
    response = main.client(REQ).get(f"/api/v1/tasks/{task.pk}/events?{query}")
    assert response.status_code == 400


# --- actions ----------------------------------------------------------------------------------


def test_cancel_then_cancel_again_is_a_409(main: Tenancy) -> None:
    task = main.created_task()
    client = main.client(OP)
    response = client.post(
        f"/api/v1/tasks/{task.pk}/cancel", {"reason": "duplicate"}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["version"]) == ("CANCELED", 1)
    again = client.post(f"/api/v1/tasks/{task.pk}/cancel", {}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "illegal_transition"


def test_a_stale_expected_version_is_a_409_and_changes_nothing(main: Tenancy) -> None:
    task, _ = main.waiting_for_input()
    client = main.client(REQ)
    for action, body in (("cancel", {}), ("input", {"answer": "10"})):
        response = client.post(
            f"/api/v1/tasks/{task.pk}/{action}",
            {**body, "expected_version": task.version - 1},
            format="json",
        )
        assert response.status_code == 409, action
        assert response.json()["error"]["code"] == "stale_version"
        assert response.json()["error"]["details"]["current_version"] == task.version
    assert Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_INPUT


def test_input_answers_the_question_verbatim(main: Tenancy) -> None:
    task, question = main.waiting_for_input()
    response = main.client(REQ).post(
        f"/api/v1/tasks/{task.pk}/input",
        {"answer": "  500 cents  ", "expected_version": task.version},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["status"] == "RUNNING"
    question.refresh_from_db()
    assert (question.status, question.answer) == ("answered", "  500 cents  ")
    again = main.client(REQ).post(f"/api/v1/tasks/{task.pk}/input", {"answer": "x"}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "no_open_question"


def test_resume_extends_the_budget_and_fail_ends_the_task(main: Tenancy) -> None:
    task = main.escalated()
    client = main.client(OP)
    response = client.post(
        f"/api/v1/tasks/{task.pk}/resume",
        {"extend": {"max_steps": 5}, "comment": "one more go", "expected_version": task.version},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["status"] == "RUNNING"
    assert response.json()["budget"]["max_steps"] == 6
    again = client.post(f"/api/v1/tasks/{task.pk}/resume", {}, format="json")
    assert again.status_code == 409
    bad = client.post(
        f"/api/v1/tasks/{task.pk}/resume", {"extend": {"max_steps": -1}}, format="json"
    )
    assert bad.status_code == 400 and "extend" in bad.json()["error"]["details"]

    other = main.escalated()
    failed = client.post(
        f"/api/v1/tasks/{other.pk}/fail", {"reason": "not worth it"}, format="json"
    )
    assert failed.status_code == 200
    assert (failed.json()["status"], failed.json()["failure_reason"]) == (
        "FAILED",
        "failed_by_operator",
    )


def test_bulk_cancel_by_filter(main: Tenancy) -> None:
    from tasks_app.services.demo import demo_agent_ensure

    demo_agent_ensure(main.tenant, name="billing")
    done = main.finished_task()  # (driving admits every CREATED task: finish this one first)
    targets = [main.created_task(agent="billing").pk for _ in range(3)]
    keep = main.created_task()
    client = main.client(OP)
    response = client.post(
        "/api/v1/tasks/bulk-cancel",
        {"agent": "billing", "limit": 2, "reason": "bad batch"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {"matched": 2, "canceled": targets[:2], "skipped": [], "more": True}
    rest = client.post("/api/v1/tasks/bulk-cancel", {"agent": "billing"}, format="json").json()
    assert rest == {"matched": 1, "canceled": targets[2:], "skipped": [], "more": False}
    statuses = dict(Task.objects.values_list("id", "status"))
    assert all(statuses[t] == TaskStatus.CANCELED for t in targets)
    assert statuses[keep.pk] == TaskStatus.CREATED and statuses[done.pk] == TaskStatus.SUCCEEDED
    nothing = client.post("/api/v1/tasks/bulk-cancel", {"reason": "everything?"}, format="json")
    assert nothing.status_code == 400
    terminal = client.post("/api/v1/tasks/bulk-cancel", {"status": ["SUCCEEDED"]}, format="json")
    assert terminal.status_code == 400


def test_a_requester_of_another_tenant_is_not_the_requester_here(
    main: Tenancy, other: Tenancy
) -> None:
    task = main.created_task()
    response = client_for(other.requester).post(
        f"/api/v1/tasks/{task.pk}/cancel", {}, format="json"
    )
    assert response.status_code == 404
