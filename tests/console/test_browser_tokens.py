"""The task page in a real browser (headless Chromium against daphne, live
through the Redis channel layer) shows a decision's tokens while the model
streams it, and drops them when the recorded decision lands. The model is
the fake OpenAI-compatible server, held midway through its stream."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import Step
from tests.console.test_browser import assert_not_reloaded, watched_live
from tests.factories import submit
from tests.fakes.fixtures import (
    openai_agent,
    openai_server,  # noqa: F401 - the fixture
)
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _drive_in_thread(task_id: int) -> threading.Thread:
    def run() -> None:
        try:
            drive(task_id)
        finally:
            connection.close()  # this thread's: the test database is dropped after

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_task_page_shows_the_tokens_as_they_arrive(world, page_as, openai_server):  # noqa: F811
    openai_agent(world.tenant, openai_server, name="llm", model={"stream": True, "timeout_s": 120})
    openai_server.push(
        reply("Let me look the order up.", tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply('{"answer": "A-1 is with Ada"}'))
    hold = openai_server.hold(after=10)  # the text, the call's name, a piece of its arguments
    task = submit(world.tenant, None, agent="llm", goal="Where is order A-1?")
    operator = watched_live(page_as, world.users[Role.OPERATOR], f"/tasks/{task.pk}/")
    page = operator.page
    assert page.locator("#live-tokens").is_hidden()

    runner = _drive_in_thread(task.pk)
    assert hold.reached.wait(30), "the model's stream never reached the hold"
    page.wait_for_selector("#live-tokens:not([hidden])")
    page.wait_for_selector("#live-tokens [data-tokens-calls]:has-text('lookup_order(')")
    assert page.locator("#live-tokens [data-tokens-text]").inner_text() == (
        "Let me look the order up.")
    assert "Step 1" in page.locator("#live-tokens [data-tokens-label]").inner_text()
    assert not Step.objects.filter(task=task).exists()  # nothing recorded yet
    operator.shot("task-tokens", phone=False)

    hold.release()
    page.wait_for_selector('#task-status[data-status="SUCCEEDED"]')
    page.wait_for_selector("#live-tokens[hidden]", state="attached")
    runner.join(timeout=30)
    assert_not_reloaded(page)
    assert Step.objects.get(task=task, step_no=1).decision["tool"] == "lookup_order"
    assert task.__class__.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
