"""Retry from a step: a FAILED or CANCELED task continues in a new task that
inherits its confirmed steps and never repeats their effects."""
from __future__ import annotations

from typing import Any

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.retries.lineage import lineage_key
from tasks_app.retries.services import task_retry
from tasks_app.runner.compensation import compensate_task
from tasks_app.services.dispatch import MANUAL_COMPENSATIONS
from tests.api.conftest import Tenancy
from tests.factories import actor_of, submit
from tests.fakes.runtime import FAKES, add_agent, add_tool, assert_log_consistent
from tests.helpers import drive
from tools_app.models import DemoNotification, DemoRefund, LedgerStatus, Tool, ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"tool": "refund", "args": {"order_id": "A-1", "amount_cents": 700}}
NOTIFY = {"tool": "notify", "args": {"to": "ada", "text": "refunded"}}


@pytest.fixture
def shop(main: Tenancy) -> Tenancy:
    """`refund` (the demo refund, idempotent per key, no approval) and `notify`,
    whose service account lacks the permission until the test fixes it."""
    add_tool(main.tenant, "refund", "tools_app.demo.tools.issue_refund",
             side_effect="idempotent_write", max_retries=0)
    add_tool(main.tenant, "notify", "deny", side_effect="write", max_retries=0)
    add_tool(main.tenant, "echo", "echo")
    add_agent(main.tenant, "shop", ["refund", "notify", "echo"])
    MANUAL_COMPENSATIONS.clear()
    return main


def _failed(shop: Tenancy, script: list[Any]) -> Task:
    task = drive(submit(shop.tenant, script, agent="shop", requester=shop.requester).pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    return task


def _fix_notify(shop: Tenancy) -> None:
    Tool.objects.filter(tenant=shop.tenant, name="notify").update(target=FAKES + "note")


@pytest.mark.parametrize("from_step", [None, 1])
def test_refunded_then_denied_retried_after_the_fix_refunds_exactly_once(shop, from_step):
    original = _failed(shop, [REFUND, NOTIFY, {"final": {"done": True}}])
    assert DemoRefund.objects.count() == 1
    _fix_notify(shop)

    response = shop.client("operator").post(
        f"/api/v1/tasks/{original.pk}/retry",
        {"comment": "scope granted", **({"from_step": from_step} if from_step else {})},
        format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["retry_of"] == {"task": original.pk, "step_no": from_step or 2}
    retry = drive(body["id"])

    assert retry.status == TaskStatus.SUCCEEDED, retry.failure_detail
    assert DemoRefund.objects.count() == 1  # never refunded twice
    first = Step.objects.get(task=original, step_no=1)
    again = Step.objects.get(task=retry, step_no=1)
    assert again.idempotency_key == first.idempotency_key and again.output == first.output
    ledger = ToolExecution.objects.get(idempotency_key=first.idempotency_key)
    assert len(ledger.attempts) == 1  # the refund was called once, by the original
    if from_step is None:
        assert again.inherited_from_id == first.pk  # inherited, not run
    else:
        assert again.inherited_from_id is None  # proposed again: answered by the ledger
        (decided,) = Event.objects.filter(task=retry, type="step_succeeded",
                                          payload__step_no=1)
        assert decided.payload["from_ledger"] is True
    notified = Step.objects.get(task=retry, step_no=2)
    assert notified.status == "SUCCEEDED"  # the fixed tool ran, under a fresh key
    assert notified.idempotency_key != Step.objects.get(task=original, step_no=2).idempotency_key
    assert DemoNotification.objects.filter(idempotency_key=notified.idempotency_key).count() == 1

    # both pages say so, with who did it
    detail = shop.client("operator").get(f"/api/v1/tasks/{original.pk}").json()
    assert detail["retried_by"] == [retry.pk]
    (retried,) = Event.objects.filter(task=original, type="retried")
    (created,) = Event.objects.filter(task=retry, type="retry_created")
    for event in (retried, created):
        assert event.actor == shop.users["operator"].username and event.actor_role == "operator"
        assert event.payload["comment"] == "scope granted"
    assert retried.payload["retry_task"] == retry.pk
    assert_log_consistent(retry.pk)
    assert_log_consistent(original.pk)


def test_a_retried_scripted_task_continues_its_script_with_inherited_usage(shop):
    script = [{"tool": "echo", "args": {"n": 1}}, NOTIFY, {"tool": "echo", "args": {"n": 3}},
              {"final": {"n": 3}}]
    original = _failed(shop, script)
    _fix_notify(shop)

    done = task_retry(tenant_id=shop.tenant.pk, task_id=original.pk,
                      actor=actor_of(shop.users["operator"]), budget={"max_steps": 2})
    fresh = Task.objects.get(pk=done.task.pk)
    assert done.from_step == 2
    # usage starts from the inherited step; the budget is the original's plus the extension
    assert (fresh.steps_count, fresh.model_calls, fresh.tool_calls, fresh.per_tool) == (
        1, 1, 1, {"echo": 1})
    assert fresh.budget_extension == {"max_steps": 2}
    assert fresh.key_lineage == original.pk and fresh.retry_from_step == 2

    retry = drive(fresh.pk)
    assert retry.status == TaskStatus.SUCCEEDED and retry.result == {"n": 3}
    decisions = [s.decision for s in Step.objects.filter(task=retry).order_by("step_no")]
    assert [d.get("tool") or "final" for d in decisions] == ["echo", "notify", "echo", "final"]
    assert decisions[2]["args"] == {"n": 3}  # the script's entries after the inherited step
    assert retry.model_calls == 4 and retry.steps_count == 4
    assert_log_consistent(retry.pk)


def test_retry_of_an_unfinished_task_is_a_409_and_changes_nothing(shop):
    running = submit(shop.tenant, [REFUND], agent="shop", requester=shop.requester)
    waiting, _ = shop.waiting_for_input()
    client = shop.client("operator")
    for task, state in ((running, "RUNNING"), (waiting, "WAITING_FOR_INPUT")):
        assert Task.objects.get(pk=task.pk).status == state
        response = client.post(f"/api/v1/tasks/{task.pk}/retry", {}, format="json")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "not_retryable"
    assert Task.objects.count() == 2
    assert not Event.objects.filter(type__in=["retried", "retry_created"]).exists()


@pytest.mark.parametrize("body,field", [
    ({"from_step": 0}, "from_step"),
    ({"from_step": "two"}, "from_step"),
    ({"from_step": 3}, "from_step"),  # later than the first step the task did not get past
    ({"budget": {"max_steps": -1}}, "budget"),
    ({"budget": "lots"}, "budget"),
    ({"comment": "x" * 2001}, "comment"),
])
def test_bad_retry_requests_are_400_with_field_errors(shop, body, field):
    original = _failed(shop, [REFUND, NOTIFY])
    response = shop.client("operator").post(f"/api/v1/tasks/{original.pk}/retry", body,
                                            format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]
    assert Task.objects.count() == 1


def test_retry_is_for_operators_of_the_same_tenant(shop, other):
    original = _failed(shop, [REFUND, NOTIFY])
    assert shop.client("requester").post(f"/api/v1/tasks/{original.pk}/retry", {},
                                         format="json").status_code == 403
    assert other.client("operator").post(f"/api/v1/tasks/{original.pk}/retry", {},
                                         format="json").status_code == 404
    assert Task.objects.count() == 1


def test_bulk_retry_by_filter_is_bounded_and_skips_tasks_retried_before(shop):
    failed = [_failed(shop, [REFUND, NOTIFY]) for _ in range(3)]
    client = shop.client("operator")
    assert client.post("/api/v1/tasks/bulk-retry", {}, format="json").status_code == 400

    first = client.post("/api/v1/tasks/bulk-retry",
                        {"failure_reason": "permission_denied", "limit": 2}, format="json")
    assert first.status_code == 200
    assert first.json()["more"] is True
    assert [r["task"] for r in first.json()["retried"]] == [t.pk for t in failed[:2]]
    rest = client.post("/api/v1/tasks/bulk-retry",
                       {"failure_reason": "permission_denied", "agent": "shop"}, format="json")
    assert [r["task"] for r in rest.json()["retried"]] == [failed[2].pk]
    assert rest.json()["more"] is False
    assert Task.objects.filter(retry_of__isnull=False).count() == 3


def test_a_retry_does_not_compensate_what_it_inherited_nor_does_the_original(shop):
    add_tool(shop.tenant, "undo_note", "undo_note", side_effect="write", max_retries=0)
    add_tool(shop.tenant, "note", "note", side_effect="write", max_retries=0,
             compensation_tool="undo_note")
    add_agent(shop.tenant, "shop", ["note", "notify"])
    original = _failed(shop, [{"tool": "note", "args": {"to": "ada", "text": "charged"}}, NOTIFY])
    retry = task_retry(tenant_id=shop.tenant.pk, task_id=original.pk,
                       actor=actor_of(shop.users["operator"])).task
    # the original's compensation (scheduled at its failure) runs after the retry took step 1
    assert compensate_task(original.pk) == 0
    (skipped,) = Event.objects.filter(task=original, type="compensation_skipped")
    assert skipped.payload["step_no"] == 1 and str(retry.pk) in skipped.payload["reason"]

    retry = drive(retry.pk)  # notify still denied: the retry fails too
    assert retry.status == TaskStatus.FAILED
    assert compensate_task(retry.pk) == 0  # it did not make the call: nothing of it to undo
    assert not DemoNotification.objects.filter(customer="undo").exists()


def test_a_step_whose_effect_was_compensated_is_not_inherited(shop):
    add_tool(shop.tenant, "undo_note", "undo_note", side_effect="write", max_retries=0)
    add_tool(shop.tenant, "note", "note", side_effect="write", max_retries=0,
             compensation_tool="undo_note")
    add_agent(shop.tenant, "shop", ["note", "notify"])
    original = _failed(shop, [{"tool": "note", "args": {"to": "ada", "text": "charged"}}, NOTIFY,
                               {"final": {"ok": True}}])
    assert compensate_task(original.pk) == 1  # undone before anyone retried

    client = shop.client("operator")
    refused = client.post(f"/api/v1/tasks/{original.pk}/retry", {"from_step": 2}, format="json")
    assert refused.status_code == 400 and "from_step" in refused.json()["error"]["details"]
    response = client.post(f"/api/v1/tasks/{original.pk}/retry", {}, format="json")
    assert response.json()["retry_of"]["step_no"] == 1
    _fix_notify(shop)
    retry = drive(response.json()["id"])
    assert retry.status == TaskStatus.SUCCEEDED
    # the write it undid is a new action now: made again, under a fresh key
    first, again = (Step.objects.get(task=t, step_no=1) for t in (original, retry))
    assert first.idempotency_key != again.idempotency_key
    assert DemoNotification.objects.filter(customer="ada").count() == 3  # note, note, notify


def test_lineage_keys_never_merge_two_different_actions(shop):
    original = _failed(shop, [REFUND, REFUND, NOTIFY])  # two refunds, on purpose
    first, second = (Step.objects.get(task=original, step_no=n).idempotency_key for n in (1, 2))
    assert first != second
    retry = task_retry(tenant_id=shop.tenant.pk, task_id=original.pk, from_step=1,
                       actor=actor_of(shop.users["operator"])).task

    def key(step_no: int, args: dict[str, Any], tool: str = "refund") -> str | None:
        return lineage_key(task_id=retry.pk, key_lineage=retry.key_lineage, step_no=step_no,
                           tool=tool, args=args)

    assert key(1, REFUND["args"]) == first  # the same call: the same key
    assert key(4, REFUND["args"]) == first  # proposed a few steps later: still the first refund
    assert key(1, {**REFUND["args"], "amount_cents": 701}) is None  # other arguments
    assert key(1, REFUND["args"], tool="echo") is None  # another tool
    assert key(1, {"amount_cents": 700, "order_id": "A-1"}) == first  # key order is not identity
    assert key(3, NOTIFY["args"], tool="notify") is None  # refused by the tool: a fresh key
    # once the retry made its first refund, the next one is the chain's second refund
    Step.objects.create(task=retry, step_no=1, kind="tool", status="SUCCEEDED",
                        tool="refund", args=REFUND["args"], idempotency_key=first)
    assert key(2, REFUND["args"]) == second
    assert ToolExecution.objects.get(idempotency_key=second).status == LedgerStatus.SUCCEEDED


def test_a_retry_keeps_pinned_what_a_person_answered_the_task_it_continues(shop):
    """The answer is pinned verbatim in the original's context; a retry (and a
    retry of that retry) continues from steps it inherited, answer included."""
    from approvals_app.models import Question
    from approvals_app.services.answers import task_provide_input
    from tasks_app.context.builder import gather

    operator = actor_of(shop.users["operator"])
    original = drive(submit(shop.tenant, [{"ask": "Which colour?"}, NOTIFY, {"final": {"ok": 1}}],
                            agent="shop", requester=shop.requester).pk)
    assert original.status == TaskStatus.WAITING_FOR_INPUT
    task_provide_input(task_id=original.pk, answer="the blue one", actor=operator)
    original = drive(original.pk)
    assert original.status == TaskStatus.FAILED  # notify is denied
    (question,) = Question.objects.filter(task=original)

    retry = task_retry(tenant_id=shop.tenant.pk, task_id=original.pk, actor=operator).task
    again = drive(retry.pk)  # notify still denied: a retry of the retry follows
    assert again.status == TaskStatus.FAILED
    _fix_notify(shop)
    second = task_retry(tenant_id=shop.tenant.pk, task_id=retry.pk, actor=operator).task

    for task in (retry, second):
        facts = gather(task.pk, retry=True).human_facts
        assert [f["id"] for f in facts] == [f"answer:{question.pk}"]
        assert "A (verbatim): the blue one" in facts[0]["text"]
    done = drive(second.pk)
    assert done.status == TaskStatus.SUCCEEDED, done.failure_detail
    notified = Step.objects.get(task=done, step_no=2)
    # the model was shown the goal and the answer (the scripted backend counts them)
    assert notified.model_log["input_summary"].endswith("2 pinned facts")


def test_a_retry_keeps_the_key_that_submitted_the_original(shop) -> None:
    from accounts_app.models import ApiKey
    from accounts_app.services.accounts import api_key_create

    key = ApiKey.objects.get(prefix=api_key_create(user=shop.requester)[:12])
    task = drive(submit(shop.tenant, [NOTIFY, {"final": {}}], agent="shop",
                        requester=shop.requester, api_key_id=key.pk).pk)
    assert task.status == TaskStatus.FAILED and task.api_key_id == key.pk
    response = shop.client("operator").post(f"/api/v1/tasks/{task.pk}/retry", {},
                                            format="json")
    assert response.status_code == 201, response.json()
    retry_id = response.json()["id"]
    assert Task.objects.get(pk=retry_id).api_key_id == key.pk  # within the same key's scope
    detail = shop.client("operator").get(f"/api/v1/tasks/{retry_id}").json()
    assert detail["api_key"] == key.prefix
