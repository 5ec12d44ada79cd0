"""What a committed task event adds to the task's trace (`foundations.tracing`).

Called once per event, after its commit (`services.events.observe_committed`,
registered with `store.hooks`): a submission links the span that made it to
the task's trace; a person's part (an approval, a question, a reconciliation,
an escalation: asked and answered) becomes a span event; an event that ends
the task writes the task's root span, from submission to that commit, with the
one read of the task it needs. Nothing is done, and nothing read, when traces
are off.
"""
from __future__ import annotations

from foundations import tracing

from ..machine import FINAL_STATUS_OF
from ..models import Event, Task

# A person's part in a task, by the event that records it: the span event's name.
SPAN_EVENT_OF = {
    "need_approval": "approval_requested",
    "approval_granted": "approval_granted",
    "approval_rejected": "approval_rejected",
    "need_input": "question_asked",
    "input_received": "question_answered",
    "result_uncertain": "reconciliation_opened",
    "reconciled": "reconciliation_settled",
    "escalated": "escalated",
    "resumed": "resumed",
}


def trace_event(event: Event) -> None:
    if not tracing.enabled():
        return
    if event.type == "task_created":
        tracing.task_submitted(trace_id=event.trace_id)
    name = SPAN_EVENT_OF.get(event.type)
    if name is not None:
        payload = event.payload if isinstance(event.payload, dict) else {}
        tracing.task_event(trace_id=event.trace_id, name=name, at=event.created_at,
                           attributes={"tether.actor": event.actor,
                                       "tether.actor.role": event.actor_role,
                                       "tether.task.version": event.task_version,
                                       "tether.step.no": payload.get("step_no"),
                                       "gen_ai.tool.name": payload.get("tool")})
    status = FINAL_STATUS_OF.get(event.type)
    if status is None:
        return
    task = Task.objects.filter(pk=event.task_id).values(
        "created_at", "agent_snapshot", "tenant_id", "failure_reason").first()
    if task is None:
        return
    tracing.task_ended(
        trace_id=event.trace_id, task_id=event.task_id,
        agent=str((task["agent_snapshot"] or {}).get("name") or ""), status=status,
        started_at=task["created_at"], ended_at=event.created_at,
        attributes={"tether.tenant.id": task["tenant_id"],
                    "tether.task.failure_reason": task["failure_reason"] or None})
