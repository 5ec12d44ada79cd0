"""The workflow pages in a real browser (headless Chromium through Playwright,
against daphne, live over the WebSocket): a run's graph is drawn, its boxes
lead to their steps, and a node's status changes on the open page when a
person answers the run's question through the API; the editor indents with
Tab and shows a definition's problems beside it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tests.console.test_browser import assert_not_reloaded, plant_marker, wait_live
from tests.console.test_workflow_pages import FLOW
from tests.fakes.runtime import add_tool
from tests.helpers import drive, wait_for
from workflows_app.models import Workflow
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import workflow_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _statuses(page: Any) -> dict[str, str]:
    return page.eval_on_selector_all(
        "#task-dag g.dag-node",
        "gs => Object.fromEntries(gs.map(g => [g.dataset.node, g.dataset.status]))")


def test_a_runs_graph_is_drawn_and_follows_the_run_live(world, page_as):
    from rest_framework.test import APIClient

    add_tool(world.tenant, "echo", "echo")
    workflow_create(tenant_id=world.tenant.pk, name="order_flow", definition=FLOW, actor=SYSTEM)
    task = submit_run(tenant_id=world.tenant.pk, requester_id=None, workflow="order_flow",
                      input={"order_id": "A-1"}, actor=SYSTEM).task
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_INPUT

    reviewer = page_as(world.users[Role.REVIEWER])
    page = reviewer.page
    reviewer.goto(f"/tasks/{task.pk}/")
    wait_live(page)
    plant_marker(page)
    assert _statuses(page) == {"lookup": "succeeded", "confirm": "waiting", "again": "pending",
                               "side": "skipped"}
    box = page.locator('#task-dag [data-node="confirm"] rect').bounding_box()
    assert box and box["width"] > 100 and box["height"] > 30, "the box is drawn"
    assert page.locator("#task-dag path.dag-edge").count() == 3

    # A box leads to its step's row, which opens.
    page.locator('#task-dag [data-node="lookup"] a').click()
    page.wait_for_selector("#step-details-1[open]")

    # A person answers through the API; the run goes on; the page follows.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users[Role.REVIEWER])}")
    answered = api.post(f"/api/v1/tasks/{task.pk}/input",
                        {"answer": json.dumps({"approved": True})}, format="json")
    assert answered.status_code in (200, 202), answered.content
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    wait_for(lambda: _statuses(page).get("confirm") == "succeeded", timeout=15,
             message="the confirm node to turn succeeded on the open page")
    wait_for(lambda: _statuses(page) == {"lookup": "succeeded", "confirm": "succeeded",
                                         "again": "succeeded", "side": "skipped"},
             timeout=15, message="every node's final status")
    page.wait_for_selector('#task-status[data-status="SUCCEEDED"]')
    assert_not_reloaded(page)
    reviewer.shot("workflow-run")


def test_the_editor_indents_with_tab_and_shows_problems_beside_it(world, page_as):
    admin = page_as(world.users[Role.ADMIN])
    page = admin.page
    admin.goto("/workflows/new/")
    page.fill("#id_name", "typed_flow")
    editor = page.locator("#id_definition")
    editor.fill("nodes:\n- id: ask")
    editor.press("Home")
    editor.press("Tab")
    assert editor.input_value() == "nodes:\n  - id: ask"  # two spaces, focus kept
    assert page.evaluate("document.activeElement.id") == "id_definition"
    editor.press("Shift+Tab")
    assert editor.input_value() == "nodes:\n- id: ask"
    editor.fill("nodes:\n  - id: ask\n    tool: no_such_tool\n")
    page.get_by_role("button", name="Create workflow").click()
    problems = page.locator("#definition-problems [data-problem]")
    problems.first.wait_for()
    assert problems.first.inner_text().startswith("definition.nodes[0].tool: ")
    assert "no_such_tool" in editor.input_value()  # what was typed is kept
    assert not Workflow.objects.filter(name="typed_flow").exists()
    admin.shot("workflow-editor-problems", phone=False)

    editor.fill("nodes:\n  - id: ask\n    human: {question: 'Which order?'}\n")
    page.get_by_role("button", name="Create workflow").click()
    page.wait_for_url("**/workflows/typed_flow/")
    assert "Which order?" in page.locator("#definition-text").inner_text()

    # A second version, released to a share of new runs from the page.
    page.get_by_role("link", name="Edit definition").click()
    editor.fill("nodes:\n  - id: ask\n    human: {question: 'Which one?'}\n")
    page.get_by_role("button", name="Save definition").click()
    page.wait_for_url("**/workflows/typed_flow/")
    assert "saved as version 2" in page.locator(".flash-success").inner_text()
    page.fill("#release-percent", "30")
    page.get_by_role("button", name="Release version 2 to this share").click()
    page.wait_for_selector("text=Release in progress: version 2 gets 30 % of new runs")
    workflow = Workflow.objects.get(name="typed_flow")
    assert (workflow.current_version, workflow.release_candidate, workflow.release_percent) == (
        1, 2, 30)
    assert "question" in page.locator("#version-2 .diff").inner_text()
    admin.shot("workflow-page", phone=False)


def test_a_wide_graph_scrolls_inside_its_card_at_1280_px(world, page_as):
    wide = {"nodes": [{"id": "start", "human": {"question": "Go?"}}] + [
        {"id": f"parallel_branch_number_{n}", "after": ["start"], "human": {"question": "?"}}
        for n in range(12)]}
    workflow_create(tenant_id=world.tenant.pk, name="wide_flow", definition=wide, actor=SYSTEM)
    task = submit_run(tenant_id=world.tenant.pk, requester_id=None, workflow="wide_flow",
                      input={}, actor=SYSTEM).task
    drive(task.pk)
    operator = page_as(world.users[Role.OPERATOR])
    page = operator.page
    operator.goto(f"/tasks/{task.pk}/")
    assert page.locator("#task-dag g.dag-node").count() == 13
    measured = page.evaluate("""() => {
      const wrap = document.querySelector("#task-dag .dag-wrap");
      return {page: document.documentElement.scrollWidth, window: window.innerWidth,
              svg: document.querySelector("#task-dag svg").getBoundingClientRect().width,
              wrap: wrap.clientWidth, overflow: getComputedStyle(wrap).overflowX};
    }""")
    assert measured["svg"] > measured["wrap"], measured  # wider than its card...
    assert measured["overflow"] == "auto"  # ...so it scrolls there
    assert measured["page"] <= measured["window"], f"the page scrolls sideways: {measured}"
