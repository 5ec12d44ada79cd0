"""The console in a real browser: headless Chromium (Playwright) against daphne,
live over WebSockets through the Redis channel layer.

The runner is driven in this process (`drive`, `step_once`); every update the
page shows arrives over its socket from the server process, never by reload
(each test plants a marker on `window` and checks it survived).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from accounts_app.models import Role
from approvals_app.models import Approval, Question, Reconciliation
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.console.conftest import event_ids, step_once
from tests.factories import make_user, submit
from tests.helpers import drive, wait_for
from tools_app.models import DemoNotification, Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND_SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "look at the order first"},
    {
        "tool": "issue_refund",
        "args": {"order_id": "A-1", "amount_cents": 1500, "reason": "damaged"},
        "reason": "the customer sent photos of the damage; refund the broken item",
        "cites": ["step:1"],
    },
    {"final": {"refunded_cents": 1500}},
]


def plant_marker(page: Any) -> None:
    page.evaluate("window.__noReload = 'still here'")


def assert_not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__noReload") == "still here", "the page was reloaded"


def timeline_ids(page: Any) -> list[int]:
    return page.eval_on_selector_all(
        "#timeline [data-event-id]", "rows => rows.map(r => Number(r.dataset.eventId))"
    )


def wait_live(page: Any) -> None:
    page.wait_for_selector('#live-status[data-state="open"]')


def watched_live(page_as: Any, user: Any, path: str) -> Any:
    """`user`'s page at `path`, its live feed open, marked to catch a reload."""
    console = page_as(user)
    console.goto(path)
    wait_live(console.page)
    plant_marker(console.page)
    return console


def test_reviewer_approves_from_the_inbox_and_watches_the_task_succeed(world, page_as):
    reviewer = page_as(world.users[Role.REVIEWER])
    page = reviewer.page
    reviewer.goto("/inbox/")
    wait_live(page)
    plant_marker(page)
    assert page.locator("#inbox-empty").is_visible()

    # The request arrives while the reviewer looks at the inbox.
    task = submit(
        world.tenant,
        REFUND_SCRIPT,
        goal="Refund the damaged kettle on A-1",
        requester=world.users[Role.REQUESTER],
    )
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    card = page.locator("[data-card-key^='approval-']")
    card.wait_for()
    page.wait_for_selector("#inbox-badge:text-is('1')")
    counts = page.locator('[data-count="approvals"]').all_inner_texts()
    assert counts == ["1", "1"]  # the tab and the heading
    assert_not_reloaded(page)
    card_text = card.inner_text()
    assert "issue_refund" in card_text
    assert "the customer sent photos of the damage" in card_text  # the model's reason
    assert "Step 1 · lookup_order" in card_text  # the evidence it cites
    reviewer.shot("inbox")

    card.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_selector("[data-card-key^='approval-'][data-open='0']")
    assert "Approved issue_refund." in card.inner_text()
    approval = Approval.objects.get(task=task)
    assert approval.status == "approved"
    assert approval.decided_by_id == world.users[Role.REVIEWER].pk
    page.wait_for_selector("#inbox-badge:text-is('0')")  # the badge followed, live

    card.get_by_role("link", name=f"Task #{task.pk}").click()
    page.wait_for_selector('#task-status[data-status="RUNNING"]')
    wait_live(page)
    plant_marker(page)

    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    page.wait_for_selector('#task-status[data-status="SUCCEEDED"]')
    assert_not_reloaded(page)
    wait_for(
        lambda: timeline_ids(page) == event_ids(task.pk),
        timeout=10,
        message="the timeline to show every event",
    )
    assert page.locator("#steps [data-step-no]").count() == 3
    assert "refunded_cents" in page.locator("#task-facts").inner_text()
    reviewer.shot("task-succeeded")


def test_edit_and_approve_shows_the_diff_and_refuses_invalid_arguments(world, page_as):
    task = submit(world.tenant, REFUND_SCRIPT, goal="Refund part of A-1")
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    reviewer = page_as(world.users[Role.REVIEWER])
    page = reviewer.page
    reviewer.goto(f"/tasks/{task.pk}/")  # the card is on the task page too
    card = page.locator("#task-waiting [data-card-key^='approval-']")
    card.get_by_text("Edit and approve…").click()
    args = card.get_by_label("Arguments (JSON; re-validated against the tool's schema)")
    assert json.loads(args.input_value())["amount_cents"] == 1500

    args.fill(json.dumps({"order_id": "A-1", "amount_cents": "lots"}))
    card.get_by_role("button", name="Check changes").click()
    card.get_by_text("These arguments would be refused").wait_for()
    card.get_by_role("button", name="Approve with these arguments").click()
    card.locator(".field-error").wait_for()
    assert "is not of type 'integer'" in card.locator(".field-error").inner_text()
    assert Approval.objects.get(task=task).status == "pending"

    args = card.get_by_label("Arguments (JSON; re-validated against the tool's schema)")
    args.fill(json.dumps({"order_id": "A-1", "amount_cents": 900, "reason": "damaged"}))
    card.get_by_role("button", name="Check changes").click()
    diff = card.locator(".diff-box table")
    diff.wait_for()
    changes = diff.inner_text()
    assert "amount_cents" in changes and "1500" in changes and "900" in changes
    card.get_by_role("button", name="Approve with these arguments").click()
    # The decision lands on the timeline, and the page follows the task, live.
    page.locator("#timeline .ev-title", has_text="(arguments edited)").wait_for()
    page.wait_for_selector('#task-status[data-status="RUNNING"]')
    assert Approval.objects.get(task=task).args_diff == {"amount_cents": {"from": 1500, "to": 900}}


def test_open_task_page_grows_as_steps_commit_and_survives_a_dropped_socket(
    world, page_as, console_server
):
    script = [
        {"tool": "lookup_order", "args": {"order_id": order}}
        for order in ("A-1", "A-2", "A-1", "A-2", "A-1", "A-2")
    ] + [{"final": {"ok": True}}]
    task = submit(world.tenant, script, goal="Check both orders, repeatedly")
    operator = page_as(world.users[Role.OPERATOR])
    page = operator.page
    operator.goto(f"/tasks/{task.pk}/")
    wait_live(page)
    plant_marker(page)
    assert timeline_ids(page) == event_ids(task.pk)

    for _ in range(3):  # three steps: each appends while we watch
        before = len(event_ids(task.pk))
        step_once(task.pk)
        assert len(event_ids(task.pk)) > before
        wait_for(
            lambda: timeline_ids(page) == event_ids(task.pk),
            timeout=10,
            message="the page to append the new events",
        )
    assert (
        page.locator("#steps [data-step-no]").count() == Step.objects.filter(task=task).count() == 3
    )

    # Drop every socket: the server goes away while more steps commit.
    console_server.stop()
    page.wait_for_selector('#live-status[data-state="reconnecting"]')
    missed_from = len(event_ids(task.pk))
    step_once(task.pk)
    step_once(task.pk)
    assert len(event_ids(task.pk)) > missed_from
    console_server.start()

    wait_live(page)
    wait_for(
        lambda: timeline_ids(page) == event_ids(task.pk),
        timeout=15,
        message="the reconnected page to catch up",
    )
    ids = timeline_ids(page)
    assert len(ids) == len(set(ids)), "an event is shown twice"

    drive(task.pk)
    page.wait_for_selector('#task-status[data-status="SUCCEEDED"]')
    wait_for(
        lambda: timeline_ids(page) == event_ids(task.pk),
        timeout=10,
        message="the live events after the reconnect",
    )
    ids = timeline_ids(page)
    assert ids == event_ids(task.pk) and len(ids) == len(set(ids))
    assert page.locator("#steps [data-step-no]").count() == 7
    assert_not_reloaded(page)

    # A step opens to its decision log and tool log.
    page.locator("#step-6 summary").click()
    log = page.locator("#step-6").text_content()
    step = Step.objects.get(task=task, step_no=6)
    assert "Decision log" in log and "Raw output" in log and "Tool log" in log
    assert step.idempotency_key in log and f"{step.latency_ms} ms" in log
    operator.shot("task-page")


def test_operator_cancels_a_task_from_its_page(world, page_as):
    task = submit(world.tenant, [{"ask": "Which order?"}, {"final": {}}], goal="Ask, then stop")
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_INPUT
    operator = page_as(world.users[Role.OPERATOR])
    page = operator.page
    operator.goto(f"/tasks/{task.pk}/")

    page.get_by_text("Cancel task…").click()
    page.get_by_label("Reason (optional)").fill("customer withdrew the request")
    page.get_by_role("button", name="Cancel task", exact=True).click()

    page.wait_for_selector('#task-status[data-status="CANCELED"]')
    assert f"Task #{task.pk} canceled." in page.locator("#messages").inner_text()
    assert Task.objects.get(pk=task.pk).status == TaskStatus.CANCELED
    event = Event.objects.filter(task=task, type="task_canceled").get()
    assert event.actor == world.users[Role.OPERATOR].username and event.actor_role == "operator"
    assert event.payload["reason"] == "customer withdrew the request"
    assert Question.objects.get(task=task).status == "canceled"
    assert page.get_by_text("Cancel task…").count() == 0  # nothing left to cancel


def test_reviewer_answers_a_question_from_the_inbox(world, page_as):
    task = submit(
        world.tenant,
        [{"ask": "How much should A-1 be refunded?"}, {"final": {"done": True}}],
        goal="Partial refund, amount to be confirmed",
    )
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_INPUT
    reviewer = page_as(world.users[Role.REVIEWER])
    page = reviewer.page
    reviewer.goto("/inbox/")
    card = page.locator("[data-card-key^='question-']")
    assert "How much should A-1 be refunded?" in card.inner_text()

    card.get_by_label("Your answer (the agent receives it verbatim)").fill(
        "1200 cents, <b>not</b> more"
    )
    card.get_by_role("button", name="Send answer").click()
    page.wait_for_selector("[data-card-key^='question-'][data-open='0']")
    assert "Answer sent" in card.inner_text()
    assert card.locator("b").count() == 0, "the answer must be shown as text, not markup"

    question = Question.objects.get(task=task)
    assert question.status == "answered" and question.answer == "1200 cents, <b>not</b> more"
    assert question.answered_by_id == world.users[Role.REVIEWER].pk
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


def test_reviewer_reconciles_an_uncertain_notification(world, page_as):
    # Without a status query the timed-out write cannot be settled: a person decides.
    Tool.objects.filter(tenant=world.tenant, name="notify_customer").update(status_tool="")
    task = submit(
        world.tenant,
        [
            {
                "tool": "notify_customer",
                "args": {"customer": "Ada", "message": "Your refund is on its way."},
            },
            {"final": {"notified": True}},
        ],
        goal="Tell Ada about her refund",
    )
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_RECONCILIATION
    rec = Reconciliation.objects.get(task=task)
    reviewer = page_as(world.users[Role.REVIEWER])
    page = reviewer.page
    reviewer.goto("/inbox/")
    card = page.locator(f"[data-card-key='reconciliation-{rec.pk}']")
    text = card.inner_text()
    assert "notify_customer" in text and rec.idempotency_key in text
    assert "unknown" in text  # the latest status-query answer
    assert card.locator("tbody tr").count() == 1  # the one attempt, from the ledger
    assert (
        card.get_by_text("not safe for notify_customer").count() == 1
    )  # a plain write: no blind retry
    reviewer.shot("inbox-reconciliation", phone=False)

    # The provider's status endpoint is back: re-running the query settles it.
    Tool.objects.filter(tenant=world.tenant, name="notify_customer").update(
        status_tool="tools_app.demo.tools.notification_status"
    )
    card.get_by_role("button", name="Re-run status query").click()
    page.wait_for_selector(f"[data-card-key='reconciliation-{rec.pk}'][data-open='0']")
    assert "The status query settled it: succeeded." in card.inner_text()
    rec.refresh_from_db()
    assert (rec.status, rec.outcome) == ("resolved", "succeeded")
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    assert DemoNotification.objects.count() == 1  # sent once, never replayed


def test_a_reviewer_of_another_tenant_can_neither_open_nor_subscribe(world, page_as):
    from tests.factories import TenantFactory

    task = submit(
        world.tenant,
        [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}],
        goal="Secret goal of tenant one",
    )
    other_tenant = TenantFactory(name="t-other")
    from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure

    demo_tools_ensure(other_tenant)
    demo_agent_ensure(other_tenant)
    outsider = page_as(make_user(other_tenant, Role.REVIEWER))
    page = outsider.page

    response = outsider.goto(f"/tasks/{task.pk}/")
    assert response.status == 404
    assert "Secret goal" not in page.content()
    assert outsider.goto(f"/tasks/{task.pk}/live/?after=0").status == 404

    outsider.goto("/inbox/")
    wait_live(page)
    own = submit(other_tenant, [{"final": {"ok": True}}], goal="Outsider's own task")
    # The outsider's page listens to its tenant and tries to subscribe to the foreign task.
    page.evaluate(
        """taskId => new Promise((resolve) => {
        window.__got = [];
        const ws = new WebSocket(`ws://${location.host}/ws/live/`);
        ws.onmessage = (m) => window.__got.push(JSON.parse(m.data));
        ws.onopen = () => {
            ws.send(JSON.stringify({type: "subscribe", task: taskId, after: 0}));
            ws.send(JSON.stringify({type: "subscribe", tenant: true}));
            resolve();
        };
    })""",
        task.pk,
    )
    wait_for(
        lambda: any(
            m.get("type") == "subscribed" and m.get("tenant") for m in page.evaluate("window.__got")
        ),
        timeout=10,
        message="tenant subscription",
    )
    got = page.evaluate("window.__got")
    assert {"type": "error", "code": "not_found", "task": task.pk} in got
    drive(task.pk)
    drive(own.pk)
    wait_for(
        lambda: any(
            m.get("type") == "event" and m["event"]["task_id"] == own.pk
            for m in page.evaluate("window.__got")
        ),
        timeout=10,
        message="the outsider's own events",
    )
    leaked = [
        m
        for m in page.evaluate("window.__got")
        if m.get("type") == "event" and m["event"]["task_id"] == task.pk
    ]
    assert leaked == []
    assert "Secret goal" not in json.dumps(page.evaluate("window.__got"))


def test_dashboard_reflects_the_tenant_and_updates_live(world, page_as):
    requester = world.users[Role.REQUESTER]
    done = submit(
        world.tenant,
        [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}],
        goal="Where is A-1?",
        requester=requester,
    )
    drive(done.pk)
    failed = submit(
        world.tenant,
        [{"tool": "lookup_order", "args": {"order_id": "A-2"}}],
        goal="A script that runs out",
        requester=requester,
    )
    drive(failed.pk)
    waiting = submit(world.tenant, REFUND_SCRIPT, goal="Refund A-1", requester=requester)
    drive(waiting.pk)
    asking = submit(
        world.tenant, [{"ask": "Which order?"}], goal="Needs a detail", requester=requester
    )
    drive(asking.pk)
    assert [Task.objects.get(pk=t.pk).status for t in (done, failed, waiting, asking)] == [
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
        TaskStatus.WAITING_FOR_APPROVAL,
        TaskStatus.WAITING_FOR_INPUT,
    ]

    admin = page_as(world.users[Role.ADMIN])
    page = admin.page
    admin.goto("/")
    wait_live(page)
    plant_marker(page)
    assert page.locator('[data-stat="waiting"]').inner_text() == "2"
    assert page.locator('[data-stat="failed"]').inner_text() == "1"
    assert page.locator('[data-stat="finished"]').inner_text() == "2"
    assert "Needs a detail" in page.locator("text=Needs attention >> xpath=../..").inner_text()
    admin.shot("dashboard")

    running = submit(
        world.tenant,
        [{"tool": "lookup_order", "args": {"order_id": "A-2"}}, {"final": {"ok": True}}],
        goal="Another lookup",
    )
    assert Task.objects.get(pk=running.pk).status == TaskStatus.RUNNING  # admitted on submit
    page.wait_for_selector('[data-stat="running"]:text-is("1")')
    assert_not_reloaded(page)

    # The task list: rows change status as tasks move, without a reload.
    admin.goto("/tasks/")
    wait_live(page)
    plant_marker(page)
    pill = f'tr[data-task-id="{running.pk}"] .pill'
    assert page.locator(pill).get_attribute("data-status") == "RUNNING"
    assert drive(running.pk).status == TaskStatus.SUCCEEDED
    page.wait_for_selector(f'{pill}[data-status="SUCCEEDED"]')
    assert page.locator(pill).inner_text() == "Succeeded"
    assert_not_reloaded(page)
    admin.shot("task-list")


def test_summaries_appear_live_and_an_operator_rolls_one_back(world, page_as, settings):
    # A window of 1 step and a threshold of 2 older ones: v1 folds steps 1-2
    # (after step 3), v2 steps 1-4 (after step 5).
    settings.TETHER = {**settings.TETHER, "CONTEXT_WINDOW_STEPS": 1, "SUMMARY_THRESHOLD_STEPS": 2}
    lookups = [
        {
            "tool": "lookup_order",
            "args": {"order_id": order},
            "reason": f"look {i}",
            "cites": (["summary:v1"] if i == 5 else [])
            + ([f"step:{i - 1}"] if i > 1 else ["goal"]),
        }
        for i, order in enumerate(("A-1", "A-2", "A-1", "A-2", "A-1", "A-2"), start=1)
    ]
    task = submit(world.tenant, [*lookups, {"final": {"ok": True}}], goal="Compare both orders")
    operator = watched_live(page_as, world.users[Role.OPERATOR], f"/tasks/{task.pk}/")
    page = operator.page
    assert page.locator("#summaries-empty").is_visible()

    for _ in range(4):  # admission, then three steps: v1 is written after step 3
        step_once(task.pk)
    page.wait_for_selector('#summary-v1[data-state="in_use"]')
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    page.wait_for_selector('#summary-v2[data-state="in_use"]')
    page.wait_for_selector('#summary-v1[data-state="superseded"]')
    assert_not_reloaded(page)
    assert "covers steps 1–4" in page.locator("#summary-v2").inner_text()

    # "Based on" chips lead to the step and to the summary they name.
    page.locator("#step-3 summary.step-head").click()
    page.locator('#step-3 a.cite[data-cite="step:2"]').click()
    page.wait_for_selector("#step-details-2[open]")
    page.locator("#step-5 summary.step-head").click()
    page.locator('#step-5 a.cite[data-cite="summary:v1"]').click()
    page.wait_for_selector("#summary-text-v1[open]")
    operator.shot("task-summaries")

    page.locator("#summary-rollback-v1 > summary").click()
    page.locator("#summary-rollback-v1").get_by_label("Why (optional)").fill("v2 lost the amount")
    page.get_by_role("button", name="Roll back to v1").click()
    page.wait_for_selector('#summary-v1[data-state="in_use"]')
    assert "rolled back to v1" in page.locator("#messages").inner_text()
    assert page.locator('#summary-v2[data-state="rolled_back"]').count() == 1
    event = Event.objects.get(task=task, type="summary_rolled_back")
    assert event.payload["comment"] == "v2 lost the amount"
    assert event.actor == world.users[Role.OPERATOR].username
