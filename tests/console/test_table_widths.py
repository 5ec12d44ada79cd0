"""The console's tables fit a 1,280 px wide window: with long names, long
descriptions and a full page of rows, no column is cut off and the page does
not scroll sideways. Narrower, a table may scroll inside its own wrapper, but
is never cut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from notify_app.models import EventType
from notify_app.services.subscriptions import webhook_create
from tasks_app.services.agents import agent_update
from tests.evals_app.conftest import evaluate, refunding
from tests.evals_app.conftest import refunds as refunds  # noqa: F401,PLC0414 (the fixture)
from tests.factories import actor_of, make_user, submit
from tests.fakes.runtime import add_agent
from tests.helpers import drive
from tools_app.breakers import Target, admit, breaker_policy, record
from tools_app.services import tool_create
from workflows_app.services.workflows import workflow_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG_DESCRIPTION = (
    "Handles refunds, replacements and escalations for orders that arrived damaged, late or "
    "incomplete, and writes to the customer once the warehouse confirms the return"
)
TOOLS = ["lookup_order", "issue_refund", "notify_customer"]
# Everything the layout of one table row is measured by, at the window's width.
MEASURE = """() => {
  const tables = [...document.querySelectorAll("main table")].map((table) => {
    const wrap = table.closest(".table-wrap") || table.parentElement;
    const box = wrap.getBoundingClientRect();
    const cells = [...table.querySelectorAll("th, td")];
    return {
      cls: table.className,
      tableWidth: table.scrollWidth,
      wrapWidth: wrap.clientWidth,
      wrapRight: box.left + wrap.clientLeft + wrap.clientWidth,
      cellsRight: Math.max(...cells.map((c) => c.getBoundingClientRect().right)),
      wrapOverflowX: getComputedStyle(wrap).overflowX,
    };
  });
  return {page: document.documentElement.scrollWidth, window: window.innerWidth, tables};
}"""


SCRIPTED_AGENT = "customer-support-escalations-for-damaged-deliveries-scripted"


def _stress_agents(tenant: Any) -> None:
    """Agents with long names and descriptions, long model names, every tool, one
    with an open model breaker; and a scripted one for the tasks."""
    add_agent(tenant, SCRIPTED_AGENT, TOOLS, description=LONG_DESCRIPTION)
    for n in range(6):
        add_agent(
            tenant,
            f"customer-support-escalations-for-damaged-deliveries-{n:02d}",
            TOOLS,
            description=LONG_DESCRIPTION,
            model={"backend": "openai", "name": f"gpt-4o-mini-2024-07-18-support-finetune-{n}",
                   "base_url": f"http://127.0.0.1:9/v{n}"},
        )
    target = Target.model(tenant_id=tenant.pk, base_url="http://127.0.0.1:9/v0",
                          name="gpt-4o-mini-2024-07-18-support-finetune-0")
    record(target, owner="w", failed=True, policy=breaker_policy({"failures": 1}),
           seen=admit(target, owner="w", probe_ttl_s=5))


def _stress_tasks(world: Any) -> None:
    """A full page of tasks with long goals, a long agent name, a long requester
    name, and some waiting for an approval (a long status label)."""
    requester = make_user(world.tenant, Role.REQUESTER,
                          username="a.requester.with.a.long.single.sign.on.name@example.com")
    script = [
        {"tool": "issue_refund",
         "args": {"order_id": "A-1", "amount_cents": 1500, "reason": "damaged"}},
        {"final": {"refunded_cents": 1500}},
    ]
    for n in range(25):
        task = submit(world.tenant, script, agent=SCRIPTED_AGENT, requester=requester,
                      goal=f"Refund the damaged kettle on order A-1 and {LONG_DESCRIPTION} ({n})")
        if n < 3:
            drive(task.pk)


def _assert_fits(measured: dict[str, Any], path: str) -> None:
    assert measured["page"] <= measured["window"], (
        f"{path}: the page scrolls sideways ({measured['page']} > {measured['window']} px)")
    assert measured["tables"], f"{path}: no table to measure"
    for table in measured["tables"]:
        assert table["tableWidth"] <= table["wrapWidth"], f"{path}: a table is too wide: {table}"
        assert table["cellsRight"] <= min(table["wrapRight"], measured["window"]) + 0.5, (
            f"{path}: a column ends outside the table's box: {table}")


def test_the_agents_and_tasks_tables_fit_1280_px(world, page_as, tmp_path: Path):
    _stress_agents(world.tenant)
    _stress_tasks(world)
    admin = page_as(world.users[Role.ADMIN])
    page = admin.page
    page.set_viewport_size({"width": 1280, "height": 900})
    for path, name in (("/agents/", "agents"), ("/tasks/", "tasks")):
        admin.goto(path)
        page.wait_for_selector("main table tbody tr")
        page.screenshot(path=str(tmp_path / f"{name}-1280.png"), full_page=True,
                        animations="disabled")
        _assert_fits(page.evaluate(MEASURE), path)
    rows = page.locator("main table tbody tr").count()
    assert rows == 25  # a full page of tasks was measured

    # Narrower than the table can be, it scrolls inside its wrapper: never cut.
    page.set_viewport_size({"width": 700, "height": 900})
    for path in ("/agents/", "/tasks/"):
        admin.goto(path)
        page.wait_for_selector("main table tbody tr")
        measured = page.evaluate(MEASURE)
        assert measured["page"] <= measured["window"], f"{path} at 700 px scrolls sideways"
        for table in measured["tables"]:
            if table["tableWidth"] > table["wrapWidth"]:
                assert table["wrapOverflowX"] in ("auto", "scroll"), (
                    f"{path} at 700 px: a wide table is cut, not scrolled: {table}")


def _stress_other_tables(world: Any) -> None:
    """Long names and values on the tools, secrets, webhooks, audit and workflows pages."""
    admin = actor_of(world.users[Role.ADMIN])
    tenant_id = world.tenant.pk
    for n in range(3):
        tool_create(tenant_id=tenant_id, actor=admin,
                    name=f"lookup_customer_order_history_in_the_warehouse_system_{n}",
                    kind="http", url=f"http://127.0.0.1:9/orders/history/by-customer/{n}",
                    description=LONG_DESCRIPTION, side_effect="read")
        secret_create(tenant_id=tenant_id, actor=admin, value="x",
                      name=f"warehouse_system_api_key_for_the_customer_order_history_{n:02d}")
        webhook_create(tenant_id=tenant_id, actor=admin, description=LONG_DESCRIPTION,
                       url=("http://127.0.0.1:9/hooks/tether/customer-support-escalations/"
                            f"damaged-deliveries/eu-west-1/primary-receiver-{n}"),
                       events=list(EventType.values))
        workflow_create(
            tenant_id=tenant_id, actor=admin, description=LONG_DESCRIPTION,
            name=f"customer_support_escalations_for_damaged_deliveries_in_the_warehouse_{n}",
            definition={"nodes": [{"id": "ask", "human": {"question": LONG_DESCRIPTION}}]})
    agent_update(tenant_id=tenant_id, name="support", actor=admin, changes={
        "description": LONG_DESCRIPTION * 2,
        "model": {"backend": "scripted", "system_prompt": LONG_DESCRIPTION.replace(" ", "_")}})


@pytest.mark.parametrize("path", ["/tools/", "/secrets/", "/webhooks/", "/audit/", "/workflows/"])
def test_the_other_console_tables_fit_1280_px(world, page_as, tmp_path: Path, path: str):
    _stress_other_tables(world)
    admin = page_as(world.users[Role.ADMIN])
    page = admin.page
    page.set_viewport_size({"width": 1280, "height": 900})
    admin.goto(path)
    page.wait_for_selector("main table tbody tr")
    page.screenshot(path=str(tmp_path / "page-1280.png"), full_page=True, animations="disabled")
    _assert_fits(page.evaluate(MEASURE), path)


def test_the_evaluation_tables_fit_1280_px(refunds, page_as, tmp_path: Path):
    """The evaluations list, an evaluation's per-task table (baseline and candidate
    side by side) and a replay's comparison, with diverging replays."""
    orders = [f"ORDER-2026-12-{n:04d}-DAMAGED-KETTLE-RETURN" for n in range(8)]
    recorded = refunds.record(*orders)

    def candidate(done: int, order: str) -> Any:
        return refunding(amount=7 if order in orders[:4] else 5)(done, order)
    refunds.plans["candidate"] = candidate
    evaluation = evaluate(refunds, scorer="subset")
    operator = page_as(refunds.operator)
    page = operator.page
    page.set_viewport_size({"width": 1280, "height": 900})
    pages = {"list": "/evaluations/", "detail": f"/evaluations/{evaluation['id']}/",
             "compare": f"/evaluations/{evaluation['id']}/tasks/{recorded[0].pk}/"}
    for name, path in pages.items():
        operator.goto(path)
        page.wait_for_selector("main table tbody tr")
        page.screenshot(path=str(tmp_path / f"{name}-1280.png"), full_page=True,
                        animations="disabled")
        _assert_fits(page.evaluate(MEASURE), path)
    assert page.locator(".align-row").count() == 3  # the comparison's rows were measured
