"""The tool calls of one model reply, run together (an agent's reply with
several tool calls).

Each call is its own step as always (its key, its policy check, its ledger
claim, its lease, breaker and timeout); `waves` records them and awaits them
together, at most `PARALLEL_TOOL_CALLS` at once. A call that needs approval
gets its own card (`recording.Deferred`) and the reply's other calls run
without waiting for it. Before anything new is decided, `deciding.plan_step`
asks here what of the reply is still open:

- calls in flight, retrying or uncertain (a crash, a backoff, an approved
  card): resumed together (`waves.resume_wave`), each through the ledger;
- cards not yet decided: the task waits for them (`wait_for_approvals`), and
  each is decided on its own (`approvals_app.services.decisions`); the task
  runs again when the last one is decided.

The model is asked again only when every call of the reply is settled: its
next request carries each call's result, rejection, error or cancellation in
the reply's order (`gateway.messages`).
"""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from approvals_app.services.opening import approvals_rebind
from foundations.actors import Actor

from ..machine import TaskStatus
from ..models import Step, StepKind, StepStatus, Task
from ..snapshot import TaskSnapshot
from ..store.tasks import task_transition
from .results import CONTINUE, STOP, Stale, StepResult
from .stopping import known

RESUMABLE = (StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.UNCERTAIN)


def agent_runs_together(snap: TaskSnapshot) -> bool:
    """Does this agent's task run the calls of one reply together? (A workflow
    run does too, but its orchestrator names its open steps: `OpenSteps`.)"""
    return (not snap.agent.get("parallel_calls")
            and int(settings.TETHER["PARALLEL_TOOL_CALLS"]) > 1)


@dataclass(frozen=True)
class OpenCalls:
    resumable: list[Step]  # in flight, retrying or uncertain: resume them
    awaiting: list[Step]  # their cards not decided yet


def open_calls(task_id: int) -> OpenCalls:
    steps = list(Step.objects.filter(
        task_id=task_id, kind=StepKind.TOOL,
        status__in=(*RESUMABLE, StepStatus.PENDING_APPROVAL)).order_by("step_no"))
    return OpenCalls([s for s in steps if s.status in RESUMABLE],
                     [s for s in steps if s.status == StepStatus.PENDING_APPROVAL])


def wait_for_approvals(snap: TaskSnapshot, awaiting: list[Step], actor: Actor) -> StepResult:
    """The reply's other calls are settled: the task waits for its cards (a
    database phase). The task's row is locked first, as a decision locks it,
    so a card decided meanwhile is seen: with none left, the task goes on."""
    with transaction.atomic():
        if not Task.objects.select_for_update().filter(
                pk=snap.id, version=snap.version, status=TaskStatus.RUNNING).exists():
            raise Stale()
        pending = list(Step.objects.filter(pk__in=[s.pk for s in awaiting],
                                           status=StepStatus.PENDING_APPROVAL)
                       .order_by("step_no").values_list("step_no", "tool"))
        if not pending:
            return CONTINUE
        done = task_transition(task_id=snap.id, event="need_approval", actor=actor,
                               expected_version=snap.version, known=known(snap),
                               payload={"step_no": pending[0][0], "tool": pending[0][1],
                                        "step_nos": [n for n, _ in pending]})
        approvals_rebind(task_id=snap.id, task_version=done.version)
    return STOP
