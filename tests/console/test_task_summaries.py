"""The task page's context summaries card (versions, the one in use, the events
each covers, rolling back and dropping them) and what each decision was based
on (its cites as chips), without a browser."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import ContextSummary, Event, Task
from tests.factories import TenantFactory, make_user, submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db

# A window of 1 step and a threshold of 2 older ones: the six lookups below fold
# steps 1-2 into summary v1 (after step 3), then steps 1-4 into v2 (after step 5).
SMALL_CONTEXT = {"CONTEXT_WINDOW_STEPS": 1, "SUMMARY_THRESHOLD_STEPS": 2}
HOSTILE = "<img src=x onerror=alert(1)>"
SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "look 1"},
    # A tool that does not exist: the refusal (and so the digest) carries its markup.
    {"tool": "<b>nope</b>", "args": {}, "cites": ["step:1"]},
    {"tool": "lookup_order", "args": {"order_id": "A-2"}, "cites": ["goal", "input", "step:2"]},
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "cites": ["step:3"]},
    {
        "tool": "lookup_order",
        "args": {"order_id": "A-2"},
        "cites": ["summary:v1", "summary:v7", "answer:3", "approval:5", "step:99", HOSTILE],
    },
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "cites": []},
    {"final": {"ok": True}},
]


def client_for(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def summarized(world: Any, settings: Any) -> Task:
    settings.TETHER = {**settings.TETHER, **SMALL_CONTEXT}
    task = drive(submit(world.tenant, SCRIPT, goal="Check the orders").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_reason
    assert sorted(task.summaries.values_list("version", flat=True)) == [1, 2]
    return task


def page(user: Any, task: Task) -> str:
    response = client_for(user).get(f"/tasks/{task.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def card(html: str) -> str:
    start = html.index('<section id="task-summaries"')
    return html[start : html.index("</section>", start)]


def article(html: str, version: int) -> str:
    start = html.index(f'id="summary-v{version}"')
    return html[start : html.index("</article>", start)]


def states(html: str) -> dict[int, str]:
    return {
        int(v): s
        for v, s in re.findall(r'id="summary-v(\d+)" data-version="\d+" data-state="(\w+)"', html)
    }


def rollback(user: Any, task: Task, version: int, expected: int | None = None, **extra: Any) -> Any:
    data = {"version": version, "expected_version": task.version if expected is None else expected}
    return client_for(user).post(
        f"/tasks/{task.pk}/summaries/rollback/", {**data, **extra}, follow=True
    )


def rows(task: Task) -> list[tuple[int, bool]]:
    return list(
        ContextSummary.objects.filter(task=task)
        .order_by("version")
        .values_list("version", "active")
    )


# --- the card ------------------------------------------------------------------------


def test_the_card_lists_each_version_what_it_covers_and_the_one_in_use(world, summarized):
    html = card(page(world.users[Role.OPERATOR], summarized))
    assert states(html) == {2: "in_use", 1: "superseded"}
    assert html.index('id="summary-v2"') < html.index('id="summary-v1"')  # newest first
    assert "covers steps 1–4" in article(html, 2) and "covers steps 1–2" in article(html, 1)
    assert "deterministic digest" in article(html, 2)

    # The text is shown escaped: the step's error carried markup.
    v2 = ContextSummary.objects.get(task=summarized, version=2)
    assert "<b>nope</b>" in v2.text
    assert "&lt;b&gt;nope&lt;/b&gt;" in article(html, 2)
    full = page(world.users[Role.OPERATOR], summarized)
    assert "<b>nope" not in full
    assert 'id="summary-text-v2" data-anchor-open open' in html  # the one in use is open

    # Each event a version covers links to its row in the timeline (all on this page).
    v1 = ContextSummary.objects.get(task=summarized, version=1)
    linked = [int(i) for i in re.findall(r'href="#event-(\d+)"', article(html, 1))]
    assert linked == v1.event_ids and linked
    assert all(f'id="event-{i}"' in full for i in linked)


def test_an_operator_sees_a_rollback_per_earlier_version_and_a_reviewer_none(world, summarized):
    html = card(page(world.users[Role.OPERATOR], summarized))
    assert 'id="summary-rollback-v1"' in html and 'id="summary-rollback-v2"' not in html
    assert "Drop all summaries" in html
    versions = re.findall(r'name="expected_version" value="(\d+)"', html)
    assert versions == [str(summarized.version)] * 2
    assert html.count("csrfmiddlewaretoken") == 2

    seen = card(page(world.users[Role.REVIEWER], summarized))
    assert states(seen) == {2: "in_use", 1: "superseded"}
    assert "summary-rollback" not in seen and "Drop all summaries" not in seen


def test_a_task_without_summaries_says_so(world):
    task = drive(submit(world.tenant, [{"final": {}}]).pk)
    html = card(page(world.users[Role.OPERATOR], task))
    assert 'id="summaries-empty"' in html and "summary-v" not in html


def test_the_live_fragment_carries_the_card_and_links_only_rows_on_the_page(world, summarized):
    c = client_for(world.users[Role.OPERATOR])
    v1 = ContextSummary.objects.get(task=summarized, version=1)
    last = Event.objects.filter(task=summarized).order_by("-id").first()
    live = c.get(f"/tasks/{summarized.pk}/live/?after={last.pk}&first={max(v1.event_ids)}")
    html = live.content.decode()
    assert '<section id="task-summaries" class="card" data-live-panel' in html
    one = article(html, 1)
    assert re.findall(r'href="#event-(\d+)"', one) == [str(max(v1.event_ids))]
    assert one.count('title="not loaded on this page"') == len(v1.event_ids) - 1
    key = re.search(r'id="task-summaries"[^>]*data-key="([^"]*)"', html).group(1)  # type: ignore[union-attr]
    again = c.get(f"/tasks/{summarized.pk}/live/?after={last.pk}&first=0").content.decode()
    assert re.search(r'id="task-summaries"[^>]*data-key="([^"]*)"', again).group(1) != key  # type: ignore[union-attr]


# --- rolling back ---------------------------------------------------------------------


def test_an_operator_rolls_back_then_an_admin_drops_every_summary(world, summarized):
    operator = world.users[Role.OPERATOR]
    done = rollback(operator, summarized, 1, comment="v2 lost the amount")
    assert done.status_code == 200
    assert done.redirect_chain == [(f"/tasks/{summarized.pk}/#task-summaries", 302)]
    html = done.content.decode()
    assert "Context summary rolled back to v1" in html
    assert states(card(html)) == {2: "rolled_back", 1: "in_use"}
    assert rows(summarized) == [(1, True), (2, False)]
    event = Event.objects.get(task=summarized, type="summary_rolled_back")
    assert (event.actor, event.actor_role) == (operator.username, Role.OPERATOR)
    assert event.payload["comment"] == "v2 lost the amount"
    assert f'id="event-{event.pk}"' in html and "Summary rolled back to v1" in html
    assert "summary-rollback-v" not in card(html)  # nothing earlier than v1 is left

    dropped = rollback(world.users[Role.ADMIN], summarized, 0)
    assert dropped.status_code == 200
    html = dropped.content.decode()
    assert "Context summaries dropped" in html and 'id="summary-none-in-use"' in html
    assert states(card(html)) == {2: "rolled_back", 1: "rolled_back"}
    assert rows(summarized) == [(1, False), (2, False)]
    assert "Drop all summaries" not in card(html)


@pytest.mark.parametrize("role", [Role.REVIEWER, Role.REQUESTER])
def test_a_rollback_is_refused_for_other_roles(world, summarized, role):
    response = rollback(world.users[role], summarized, 1)
    assert response.status_code == 403
    assert "Your role does not allow this." in response.content.decode()
    assert rows(summarized) == [(1, True), (2, True)]
    assert not Event.objects.filter(task=summarized, type="summary_rolled_back").exists()


def test_a_stale_view_is_refused_with_the_current_state(world, summarized):
    response = rollback(world.users[Role.OPERATOR], summarized, 1, expected=summarized.version - 1)
    assert response.status_code == 409
    html = response.content.decode()
    assert "Not applied: this task has moved on since you loaded this view" in html
    assert f"(version {summarized.version})" in html
    assert states(card(html)) == {2: "in_use", 1: "superseded"}
    assert rows(summarized) == [(1, True), (2, True)]
    assert not Event.objects.filter(task=summarized, type="summary_rolled_back").exists()


@pytest.mark.parametrize(
    ("version", "status", "says"),
    [
        (2, 400, "roll back to a version before the active one (v2)"),
        (5, 400, "roll back to a version before the active one (v2)"),
        ("x", 400, "the rollback form was incomplete"),
    ],
)
def test_a_version_that_is_not_earlier_is_refused(world, summarized, version, status, says):
    response = rollback(world.users[Role.OPERATOR], summarized, version)
    assert response.status_code == status
    assert f"Not applied: {says}" in response.content.decode()
    assert rows(summarized) == [(1, True), (2, True)]


def test_another_tenants_task_is_not_found(world, summarized):
    other = TenantFactory(name="t-other")
    response = rollback(make_user(other, Role.OPERATOR), summarized, 1)
    assert response.status_code == 404
    assert rows(summarized) == [(1, True), (2, True)]


# --- what each decision was based on ----------------------------------------------------


def chips(html: str, step_no: int) -> list[tuple[str, str, str]]:
    """(data-cite, href or "", label) of each "Based on" chip of a step."""
    start = html.index(f'id="step-{step_no}"')
    body = html[start : html.index("</article>", start)]
    based = re.search(r'<dt>Based on</dt><dd class="cites"[^>]*>(.*?)</dd>', body, re.S)
    assert based, f"no 'Based on' in step {step_no}"
    found = re.findall(
        r'<(?:a|span) class="chip cite"(?: href="([^"]*)")? title="[^"]*"'
        r' data-cite="([^"]*)">([^<]*)<',
        based.group(1),
    )
    if not found:
        assert based.group(1) == "—"
    return [(cite, href, label) for href, cite, label in found]


def test_each_decision_shows_what_it_was_based_on(world, summarized):
    html = page(world.users[Role.REVIEWER], summarized)
    assert chips(html, 1) == [] and chips(html, 6) == [] and chips(html, 7) == []
    assert chips(html, 2) == [("step:1", "#step-1", "Step 1")]
    assert chips(html, 3) == [
        ("goal", "", "Goal"),
        ("input", "", "Input"),
        ("step:2", "#step-2", "Step 2"),
    ]
    hostile = "&lt;img src=x onerror=alert(1)&gt;"
    assert chips(html, 5) == [
        ("summary:v1", "#summary-v1", "Summary v1"),
        ("summary:v7", "", "Summary v7"),  # no such version: not a link
        ("answer:3", "", "Answer #3"),
        ("approval:5", "", "Approval #5"),
        ("step:99", "", "Step 99"),  # not on the page
        (hostile, "", hostile),
    ]
    assert HOSTILE not in html
    # The anchors the chips point at exist.
    assert 'id="step-1"' in html and 'id="summary-v1"' in html


def test_a_long_task_shows_its_newest_versions_and_the_one_in_use_not_all(world):
    from tasks_app.console.selectors import SUMMARIES_SHOWN

    task = submit(world.tenant, [{"final": {}}])
    total = SUMMARIES_SHOWN + 5
    ContextSummary.objects.bulk_create([
        ContextSummary(task=task, version=v, text=f"notes v{v}", covers_until_step=v,
                       active=v <= 3)  # rolled back to v3: later versions kept, inactive
        for v in range(1, total + 1)])
    html = page(world.users[Role.OPERATOR], task)

    shown = [int(v) for v in re.findall(r'id="summary-v(\d+)"', html)]
    assert shown == [*range(total, total - SUMMARIES_SHOWN, -1), 3]
    assert 'data-version="3" data-state="in_use"' in html
    assert f"{total - SUMMARIES_SHOWN - 1} older versions not shown" in html
