"""The operator's pages without a browser: the dashboard's figures, the task
list's filters and pagination, the task page's logs and live fragment, and the
actions (cancel on a stale view, bulk cancel and bulk retry by filter, resume with a budget
extension, end as failed)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def status_of(task: Task) -> str:
    return Task.objects.get(pk=task.pk).status


def test_the_dashboard_counts_the_tenants_tasks(world):
    for _ in range(2):
        drive(submit(world.tenant, [{"ask": "?"}]).pk)
    drive(
        submit(
            world.tenant, [{"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 5}}]
        ).pk
    )
    drive(submit(world.tenant, [{"final": {"ok": True}}]).pk)
    drive(submit(world.tenant, []).pk)  # the script is empty: the model "fails"
    html = client_for(world.users[Role.OPERATOR]).get("/").content.decode()

    def stat(name: str) -> str:
        return re.search(rf'data-stat="{name}">(\d+)<', html).group(1)  # type: ignore[union-attr]

    assert stat("waiting") == "3"
    assert stat("finished") == "2"
    assert stat("failed") == "1"
    assert stat("running") == "0"
    assert "model unavailable" in html  # failed, by reason


def test_the_task_list_filters_searches_and_pages(world, settings):
    demo_agent_ensure(world.tenant, name="billing")
    asking = [submit(world.tenant, [{"ask": "?"}], goal=f"Question {i}") for i in range(3)]
    for t in asking:
        drive(t.pk)
    done = submit(world.tenant, [{"final": {}}], goal="Quick one", agent="billing")
    drive(done.pk)
    c = client_for(world.users[Role.OPERATOR])

    def ids(query: str) -> set[int]:
        html = c.get("/tasks/" + query).content.decode()
        return {int(x) for x in re.findall(r'<tr data-task-id="(\d+)"', html)}

    assert ids("") == {t.pk for t in asking} | {done.pk}
    assert ids("?status=WAITING_FOR_INPUT") == {t.pk for t in asking}
    assert ids("?status=finished") == {done.pk}
    assert ids("?agent=billing") == {done.pk}
    assert ids("?q=Quick") == {done.pk}
    assert ids(f"?q=%23{asking[1].pk}") == {asking[1].pk}
    trace = Task.objects.get(pk=asking[2].pk).trace_id
    assert ids(f"?q={trace[:10]}") == {asking[2].pk}
    assert ids(f"?trace={trace}") == {asking[2].pk}
    # Unknown values are dropped (the page says which filters apply), never an error.
    assert ids("?status=nonsense&agent=nobody") == ids("")

    for i in range(30):
        submit(world.tenant, [{"final": {}}], goal=f"Bulk {i}")
    # Keyset pages: "Older" carries the last id shown, "Newer" the first; no count.
    def rows(html: str) -> list[int]:
        return [int(i) for i in re.findall(r'<tr data-task-id="(\d+)"', html)]

    first = c.get("/tasks/").content.decode()
    newest = rows(first)
    assert len(newest) == 25 and newest == sorted(newest, reverse=True)
    assert f'href="?before={newest[-1]}" rel="next"' in first
    assert 'rel="prev"' not in first  # nothing newer than the first page
    second = c.get(f"/tasks/?before={newest[-1]}").content.decode()
    older = rows(second)
    assert len(older) == 34 - 25 and max(older) < min(newest)
    assert 'rel="next"' not in second  # the oldest page
    assert f'href="?after={older[0]}" rel="prev"' in second
    assert rows(c.get(f"/tasks/?after={older[0]}").content.decode()) == newest
    # A filter is kept across pages; a bad cursor is the first page, never an error.
    assert rows(c.get("/tasks/?before=nonsense").content.decode()) == newest
    bulk = c.get("/tasks/?q=Bulk").content.decode()
    assert f'href="?q=Bulk&amp;before={rows(bulk)[-1]}" rel="next"' in bulk
    assert len(rows(c.get(f"/tasks/?q=Bulk&before={rows(bulk)[-1]}").content.decode())) == 5


def test_the_empty_task_list_says_what_to_do(world):
    html = client_for(world.users[Role.OPERATOR]).get("/tasks/").content.decode()
    assert "No tasks yet" in html
    html = client_for(world.users[Role.OPERATOR]).get("/tasks/?status=FAILED").content.decode()
    assert "No tasks match these filters" in html


@pytest.mark.django_db(transaction=True)
def test_the_task_page_shows_decision_and_tool_logs(world):
    task = submit(
        world.tenant,
        [
            {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "need the order"},
            {"final": {"answer": "delivered"}},
        ],
        goal="Where is A-1?",
    )
    drive(task.pk)
    html = client_for(world.users[Role.OPERATOR]).get(f"/tasks/{task.pk}/").content.decode()
    step = Task.objects.get(pk=task.pk).steps.get(step_no=1)
    assert "Decision log" in html and "Tool log" in html
    assert step.idempotency_key in html
    assert (
        "Raw output" in html and "&quot;lookup_order&quot;" in html
    )  # the model's raw output, escaped
    assert "Chosen action" in html
    assert "Ada" in html  # the tool's result
    assert "Steps" in html and "2 / 50" in html  # budget meter: steps used of the limit
    events = list(Event.objects.filter(task=task).order_by("id"))
    assert all(f'data-event-id="{e.pk}"' in html for e in events)


def test_the_live_fragment_sends_only_events_after_the_cursor(world):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    events = list(Event.objects.filter(task=task).order_by("id").values_list("id", flat=True))
    c = client_for(world.users[Role.OPERATOR])
    html = c.get(f"/tasks/{task.pk}/live/?after={events[0]}").content.decode()
    sent = [
        int(x)
        for x in re.findall(r'<li class="ev [^"]*" id="event-\d+" data-event-id="(\d+)"', html)
    ]
    assert sent == events[1:]
    assert 'id="task-status"' in html and 'data-status="WAITING_FOR_INPUT"' in html
    assert (
        c.get(f"/tasks/{task.pk}/live/?after=oops").status_code == 200
    )  # a bad cursor is 0, not a 500


def test_cancel_on_a_stale_view_is_refused_and_shows_the_fresh_state(world):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    seen = Task.objects.get(pk=task.pk).version
    c = client_for(world.users[Role.OPERATOR])
    # Meanwhile the question was answered: the task moved on.
    from approvals_app.services.answers import task_provide_input
    from foundations.actors import SYSTEM

    task_provide_input(task_id=task.pk, answer="42", actor=SYSTEM)
    response = c.post(
        f"/tasks/{task.pk}/cancel/", {"expected_version": seen, "shown_status": "WAITING_FOR_INPUT"}
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "moved on since you loaded this view" in html
    assert 'data-status="RUNNING"' in html  # the fresh state, shown again
    assert status_of(task) == TaskStatus.RUNNING


def test_cancel_of_a_running_task_is_not_stale_because_it_made_progress(world):
    task = submit(world.tenant, [{"ask": "?"}])
    from tasks_app.services.admission import admit_created_tasks

    admit_created_tasks()
    seen = Task.objects.get(pk=task.pk).version
    Task.objects.filter(pk=task.pk).update(version=seen + 3)  # three steps later, still RUNNING
    c = client_for(world.users[Role.OPERATOR])
    response = c.post(
        f"/tasks/{task.pk}/cancel/",
        {"expected_version": seen, "shown_status": "RUNNING", "reason": "stop it"},
    )
    assert response.status_code == 302
    assert status_of(task) == TaskStatus.CANCELED


def test_bulk_cancel_cancels_what_the_filter_matches(world):
    waiting = [submit(world.tenant, [{"ask": "?"}], goal=f"W{i}") for i in range(3)]
    for t in waiting:
        drive(t.pk)
    finished = submit(world.tenant, [{"final": {}}])
    drive(finished.pk)
    c = client_for(world.users[Role.OPERATOR])
    page = c.get("/tasks/?status=waiting").content.decode()
    assert "Cancel 3 tasks" in page

    stale = c.post("/tasks/cancel/", {"status": "waiting", "expected_count": 2, "reason": "outage"})
    assert stale.status_code == 302
    assert all(
        status_of(t) == TaskStatus.WAITING_FOR_INPUT for t in waiting
    )  # 3 match, 2 confirmed

    done = c.post(
        "/tasks/cancel/",
        {"status": "waiting", "expected_count": 3, "reason": "outage"},
        follow=True,
    )
    assert "Canceled 3 tasks." in done.content.decode()
    assert all(status_of(t) == TaskStatus.CANCELED for t in waiting)
    assert status_of(finished) == TaskStatus.SUCCEEDED
    assert Event.objects.filter(type="task_canceled", payload__reason="outage").count() == 3


def test_bulk_retry_retries_the_ended_tasks_the_filter_matches_once(world):
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_cancel

    def ended(goal: str) -> Task:
        task = submit(world.tenant, [{"ask": "?"}, {"final": {}}], goal=goal)
        drive(task.pk)
        task_cancel(task_id=task.pk, actor=SYSTEM, reason="outage")
        return task

    canceled = [ended(f"Rerun {i}") for i in range(3)]
    other = ended("Other")
    drive(submit(world.tenant, [{"final": {}}], goal="Rerun done").pk)  # succeeded: not retried
    c = client_for(world.users[Role.OPERATOR])
    assert "Retry 3 ended tasks" in c.get("/tasks/?q=Rerun").content.decode()
    assert "ended task" not in c.get("/tasks/").content.decode()  # only on a filtered list
    unfiltered = c.post("/tasks/retry/", {"expected_count": 4}, follow=True)
    assert "filter the list" in unfiltered.content.decode()
    stale = c.post("/tasks/retry/", {"q": "Rerun", "expected_count": 2})  # 3 match now
    assert stale.status_code == 302 and not Task.objects.filter(retry_of__isnull=False).exists()
    refused = client_for(world.users[Role.REVIEWER]).post(
        "/tasks/retry/", {"q": "Rerun", "expected_count": 3})
    assert refused.status_code == 403 and not Task.objects.filter(retry_of__isnull=False).exists()

    done = c.post("/tasks/retry/", {"q": "Rerun", "expected_count": 3, "comment": "back up"},
                  follow=True)
    assert "Retried 3 tasks." in done.content.decode()
    retries = Task.objects.filter(retry_of__isnull=False)
    assert sorted(retries.values_list("retry_of", flat=True)) == [t.pk for t in canceled]
    assert not Task.objects.filter(retry_of=other).exists()
    assert Event.objects.filter(type="retried", payload__comment="back up").count() == 3
    # retried before: not offered, nor taken, again
    assert "ended task" not in c.get("/tasks/?q=Rerun").content.decode()
    again = c.post("/tasks/retry/", {"q": "Rerun", "expected_count": 3}, follow=True)
    assert "Retried 0 tasks." in again.content.decode() and retries.count() == 3


def test_resume_an_escalated_task_with_more_budget(world):
    demo_agent_ensure(world.tenant, name="tight", on_exhaustion="escalate", max_steps=1)
    task = submit(world.tenant, [{"ask": "first?"}, {"ask": "second?"}], agent="tight")
    drive(task.pk)
    from approvals_app.services.answers import task_provide_input
    from foundations.actors import SYSTEM

    task_provide_input(task_id=task.pk, answer="yes", actor=SYSTEM)
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_HUMAN
    c = client_for(world.users[Role.OPERATOR])
    page = c.get(f"/tasks/{task.pk}/").content.decode()
    assert "Resume…" in page and "Escalated" in page
    version = Task.objects.get(pk=task.pk).version

    bad = c.post(f"/tasks/{task.pk}/resume/", {"expected_version": version, "max_steps": "-4"})
    assert bad.status_code == 400
    assert status_of(task) == TaskStatus.WAITING_FOR_HUMAN

    ok = c.post(
        f"/tasks/{task.pk}/resume/",
        {"expected_version": version, "max_steps": "5", "comment": "one more question is fine"},
    )
    assert ok.status_code == 302
    resumed = Task.objects.get(pk=task.pk)
    assert resumed.status == TaskStatus.RUNNING and resumed.budget_extension == {"max_steps": 5}
    event = Event.objects.get(task=task, type="resumed")
    assert event.actor == world.users[Role.OPERATOR].username and event.payload["extend"] == {
        "max_steps": 5
    }


def test_end_a_waiting_task_as_failed(world):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    c = client_for(world.users[Role.OPERATOR])
    version = Task.objects.get(pk=task.pk).version
    assert c.post(f"/tasks/{task.pk}/fail/", {"expected_version": version}).status_code == 400
    assert (
        c.post(
            f"/tasks/{task.pk}/fail/", {"expected_version": version, "reason": "duplicate"}
        ).status_code
        == 302
    )
    failed = Task.objects.get(pk=task.pk)
    assert failed.status == TaskStatus.FAILED and failed.failure_reason == "failed_by_operator"
