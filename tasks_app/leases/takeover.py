"""A lease whose holder died is settled through the ledger, never blindly replayed.

The next caller that takes an expired lease asks the ledger about the dead
holder's call (its idempotency key):
- settled (SUCCEEDED, FAILED_*, UNCERTAIN) or never started: nothing to do;
- interrupted (IN_PROGRESS, its claim expired): a tool that honours keys
  (read, idempotent_write) is called again *under the holder's own key*, so
  the downstream deduplicates it and the ledger records the outcome the
  holder's task then reads (one effect); a plain write is marked UNCERTAIN and
  its task is woken: its status query, else a reconciliation, settles it.
Both are events on the dead holder's task (`lease_settled`).
"""
from __future__ import annotations

from dataclasses import dataclass

from foundations.actors import Actor
from tools_app.executor import ToolCall, ToolContext, execute_through_ledger, ledger
from tools_app.registry import tool_specs

from ..models import Task
from ..services.dispatch import schedule_advance
from ..store.events import event_note


@dataclass(frozen=True)
class Holder:
    key: str
    task_id: int
    step_no: int
    token: int
    tenant_id: int
    resource: str


def settle_dead_holder(dead: Holder, *, owner: str, actor: Actor) -> str:
    """Settle the dead holder's call; returns what was decided."""
    row = ledger.interrupted_call(dead.key)
    if row is None:
        return "settled"
    task = Task.objects.filter(pk=row.task_id).only("trace_id", "tenant_id").first()
    spec = tool_specs(tenant_id=dead.tenant_id, names=[row.tool]).get(row.tool)
    if spec is not None and spec.honours_keys and task is not None:
        call = ToolCall(spec=spec, args=dict(row.args or {}), context=ToolContext(
            idempotency_key=dead.key, task_id=row.task_id, step_id=row.step_id,
            tenant_id=dead.tenant_id, trace_id=task.trace_id,
            fence=f"{dead.resource}#{dead.token}"))
        outcome = execute_through_ledger(call, owner=f"lease-takeover:{owner}")
        decision, detail = "rerun", {"outcome": outcome.kind.value}
    else:
        ledger.mark_interrupted(dead.key)
        decision, detail = "reconciliation", {}
        schedule_advance(row.task_id)  # its status query or reconciliation comes sooner
    event_note(task_id=row.task_id, type="lease_settled", actor=actor,
               payload={"resource": dead.resource, "step_no": dead.step_no,
                        "decision": decision, **detail})
    return decision
