"""An MCP tool call cut by a crash, with real processes: a Celery worker is
killed (SIGKILL to its process group) while its `tools/call` is in flight on
the test MCP server (the SDK's own server, a process of its own); another
worker, with beat running the recovery sweep, finishes the task.

- `record` confirmed as an `idempotent_write` (its server dedupes by the key in
  `_meta`): the call runs again with the same key, one effect on the server.
- `record` confirmed as a plain `write`: never replayed blindly; the call
  becomes UNCERTAIN and a human reconciles it; the server saw one call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from approvals_app.models import Reconciliation
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import submit
from tests.fakes.mcp_process import McpTestServer
from tests.fakes.runtime import add_agent
from tests.helpers import wait_for
from tests.system.history import assert_history_intact
from tools_app.mcp.services import mcp_server_create
from tools_app.models import LedgerStatus, ToolExecution
from tools_app.services import tool_update

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TOOL_TIMEOUT_S = 5.0
RECOVERY_TIMEOUT_S = 150.0


def _world_with(world: Any, server: McpTestServer, **settings: Any) -> None:
    mcp_server_create(tenant_id=world.tenant.pk, name="shop", url=server.url)
    # Saving the tool confirms it (the hints suggested an idempotent write).
    tool_update(tenant_id=world.tenant.pk, name="shop__record",
                changes={"timeout_s": TOOL_TIMEOUT_S, **settings})
    add_agent(world.tenant, "mcp-agent", ["shop__record"])


def _finished(task_id: int) -> Task | None:
    task = Task.objects.get(pk=task_id)
    return task if task.is_terminal or task.is_waiting else None


def _crash_mid_call(celery_workers: Any, server: McpTestServer, gate: Path, task: Task) -> Task:
    """Wait until the server has the call (in flight, held by the gate), kill the
    worker, open the gate, start a worker with beat; the task once it stops."""
    first = celery_workers.start()
    wait_for(lambda: server.calls_of("record"), timeout=60, message="the call to reach the server")
    first.kill()
    assert not first.alive()
    gate.touch()
    celery_workers.start(beat=True)
    return wait_for(lambda: _finished(task.pk), timeout=RECOVERY_TIMEOUT_S,
                    message="the task to finish or wait")


def _task(world: Any, gate: Path) -> Task:
    return submit(world.tenant, [
        {"tool": "shop__record", "args": {"note": "refund sent", "gate": str(gate)}},
        {"final": {"recorded": True}},
    ], agent="mcp-agent")


def test_an_idempotent_mcp_call_cut_by_a_crash_runs_again_with_its_key(
        world, mcp_server, celery_workers, tmp_path):
    _world_with(world, mcp_server, max_retries=3)
    gate = tmp_path / "gate"

    done = _crash_mid_call(celery_workers, mcp_server, gate, _task(world, gate))

    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    step = done.steps.get(step_no=1)
    calls = mcp_server.calls_of("record")
    # Called again after the crash, with the same key in _meta: one effect.
    assert len(calls) == 2 and {c["key"] for c in calls} == {step.idempotency_key}
    assert mcp_server.state()["effects"] == {step.idempotency_key: 1}
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == LedgerStatus.SUCCEEDED and len(ledger.attempts) == 2
    assert "outcome" not in ledger.attempts[0]  # the first call died with its worker
    assert step.output == {"receipt": f"r-{step.idempotency_key[:8]}", "note": "refund sent"}
    assert_history_intact(done)


def test_a_plain_write_mcp_call_cut_by_a_crash_is_not_replayed(
        world, mcp_server, celery_workers, tmp_path):
    _world_with(world, mcp_server, side_effect="write", requires_approval=False, max_retries=0)
    gate = tmp_path / "gate"

    done = _crash_mid_call(celery_workers, mcp_server, gate, _task(world, gate))

    assert done.status == TaskStatus.WAITING_FOR_RECONCILIATION, celery_workers.logs()
    step = done.steps.get(step_no=1)
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == LedgerStatus.UNCERTAIN and len(ledger.attempts) == 1
    assert Reconciliation.objects.filter(task=done, status="open").exists()
    # Never sent again: the one call the server saw is the one the crash cut.
    assert [c["key"] for c in mcp_server.calls_of("record")] == [step.idempotency_key]
