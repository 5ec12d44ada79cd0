"""A tool step whose tool is `agent:<name>`: it starts a child task and waits
for it, holding no worker (`services.children` has the rules).

One database phase per pass (`child_step`, called by `executing.execute`): the child is found or
started (its key derives from the step's, so a re-run pass finds it); while it
runs, the slice ends with `Next.LATER` and a re-check delay that grows with
the wait (`recheck_s`), the lease is handed back, and the child's end wakes
the parent at once (`services.children.on_task_ended`). Once the child ended,
the step commits its outcome as any tool's does (`executing`'s commit:
the version check, so a cancel of the parent meanwhile fences it; the ledger's
record of the step's key): the child's result, or a `child_failed` business
error. A child that may not be started (bad arguments, too deep, a cycle) is
a business error at once, and no child exists.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from foundations.logs import bind_log
from tools_app.executor import OutcomeKind, ToolCall, ToolContext, ToolOutcome, ledger
from tools_app.executor.types import ToolSpec

from ..models import Step
from ..services.children import (
    ParentStep,
    agent_of_tool,
    agent_spec,
    child_for_step,
    is_agent_tool,
    outcome_of,
)
from ..snapshot import TaskSnapshot
from .results import Next, StepResult

RECHECK_S = (5.0, 60.0)  # the first re-check of a running child, and the longest


def is_child_step(step: Step) -> bool:
    return is_agent_tool(step.tool or "")


def recheck_s(step: Step) -> float:
    """How long the parent sleeps before it looks again, should no wake-up come:
    as long as it has waited so far, from 5 s to 60 s."""
    first, longest = RECHECK_S
    if step.started_at is None:
        return first
    waited = (timezone.now() - step.started_at).total_seconds()
    return min(longest, max(first, waited))


@dataclass(frozen=True)
class ChildEnded:
    """The step's outcome, to commit as any tool's (`executing`), with the
    ledger's claim on the step's key."""

    spec: ToolSpec
    outcome: ToolOutcome
    claim: ledger.Claim | None


def child_step(snap: TaskSnapshot, step: Step, *, owner: str) -> StepResult | ChildEnded:
    """A pass over the open step that calls an agent (a database phase): wait,
    or the outcome to commit."""
    bind_log(step_no=step.step_no, step_kind="tool_call")
    started = child_for_step(ParentStep(
        task_id=snap.id, tenant_id=snap.tenant_id, requester_id=snap.requester_id,
        trace_id=snap.trace_id, version=snap.version, step_no=step.step_no,
        step_key=step.idempotency_key, tool=step.tool, args=dict(step.args or {}),
        api_key_id=snap.api_key_id))
    if isinstance(started, ToolOutcome):
        outcome: ToolOutcome = started
    else:
        done = outcome_of(started)
        if done is None:
            return StepResult(Next.LATER, recheck_s(step),
                              f"waiting for child task {started.pk}")
        outcome = done
    return _ended(snap, step, outcome, owner=owner)


def _ended(snap: TaskSnapshot, step: Step, outcome: ToolOutcome, *, owner: str) -> ChildEnded:
    """The outcome with a claim on the step's key, taken again here: this
    process holds the task's lease, and starting a child is an idempotent
    write, so an earlier pass's claim is taken over. An outcome the ledger
    recorded before stands."""
    spec = agent_spec(agent_of_tool(step.tool))
    call = ToolCall(spec=spec, args=dict(step.args or {}), context=ToolContext(
        idempotency_key=step.idempotency_key, task_id=snap.id, step_id=step.pk,
        tenant_id=snap.tenant_id, trace_id=snap.trace_id))
    claimed = ledger.claim_or_answer(call, owner=owner, holds_task_lease=True)
    if isinstance(claimed, ledger.Claim):
        return ChildEnded(spec, outcome, claimed)
    if isinstance(claimed, ToolOutcome) and claimed.kind in (OutcomeKind.OK,
                                                             OutcomeKind.BUSINESS):
        return ChildEnded(spec, claimed, None)
    return ChildEnded(spec, outcome, None)
