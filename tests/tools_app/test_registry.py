"""The runner's read of an agent's tools: served from this process's recent
read, cleared by any change saved here, fresh again after `SPECS_FRESH_S`."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks_app.models import Task, TaskStatus
from tests.factories import submit
from tests.helpers import drive
from tools_app import registry
from tools_app.models import Tool
from tools_app.registry import recent_tool_specs, tool_specs

pytestmark = pytest.mark.django_db

NAMES = ["lookup_order", "issue_refund"]


@pytest.fixture(autouse=True)
def _nothing_recent():
    registry.forget_recent_specs()
    yield
    registry.forget_recent_specs()


def _queries(fn):  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        value = fn()
    return value, len(captured.captured_queries)


def test_a_second_read_within_the_window_asks_the_database_nothing(world):
    first, asked = _queries(lambda: recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES))
    again, asked_again = _queries(lambda: recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES))
    assert (asked, asked_again) == (1, 0)
    assert again == first == tool_specs(tenant_id=world.tenant.pk, names=NAMES)
    assert set(again) == set(NAMES)
    # each reader gets its own mapping: one slice's edits never reach another's
    again.pop("lookup_order")
    assert "lookup_order" in recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)


def test_a_change_saved_in_this_process_applies_at_once(world):
    recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)
    refund = Tool.objects.get(tenant=world.tenant, name="issue_refund")
    refund.enabled = False
    refund.save()
    assert set(recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)) == {"lookup_order"}
    refund.enabled, refund.timeout_s = True, 7
    refund.save()
    assert recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)["issue_refund"].timeout_s == 7
    refund.delete()
    assert set(recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)) == {"lookup_order"}


def test_a_change_made_elsewhere_applies_once_the_window_has_passed(world, monkeypatch):
    recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)
    # An UPDATE that sends no signal, as another process's save looks from here.
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(enabled=False)
    assert set(recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)) == set(NAMES)
    monkeypatch.setattr(registry, "SPECS_FRESH_S", 0.0)
    assert set(recent_tool_specs(tenant_id=world.tenant.pk, names=NAMES)) == {"lookup_order"}


def test_the_runner_reads_each_agents_tools_once_per_window(world):
    """Two tasks of one agent, each in its own slice: the tools table is read once."""
    tasks = [submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                   {"final": {"answer": "ok"}}]) for _ in range(2)]
    tools_table = Tool._meta.db_table
    with CaptureQueriesContext(connection) as captured:
        for task in tasks:
            drive(task.pk)
    reads = [q for q in captured.captured_queries
             if q["sql"].startswith("SELECT") and f'FROM "{tools_table}"' in q["sql"]]
    for task in tasks:
        assert Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED
    assert len(reads) == 1, [q["sql"][:120] for q in reads]
