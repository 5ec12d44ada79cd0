"""Compensation: when a task fails for good, undo what its writes did.

For every step that wrote successfully (newest first) whose tool names a
`compensation_tool`, that tool is called once with the original call:
``{"original_args", "original_result", "original_key"}``. The call goes
through the idempotency ledger under a key derived from the original one, so
running compensation again (a redelivered message, a second worker) never
compensates twice. Each outcome is an event on the task's timeline
(`compensation_succeeded` / `compensation_failed`); a failed compensation is
left for a person, it is not retried blindly.

Runs after the FAILED transition commits, outside any transaction. That
message can be lost (the broker down at that moment, the worker killed
mid-run): the FAILED transition marks the task `compensation_due_at`, a run
that ends clears it, and the recovery sweep hands a task still due to a worker
again (`resweep_compensations`); the ledger makes a second run harmless.

A step whose decision carries its own compensation (a workflow node's
`compensate: {tool, args}`) is undone by that call instead, its arguments
built by the planner its app registered (`register_compensation_planner`).

An evaluation run (`Task.shadow_of`) is never compensated: its writes were
answered from another task's record or never made.

Retries (`tasks_app.retries`): a step a retry inherited is not compensated,
neither by the retry (it did not make the call) nor by the original once a
retry continues from it. Which steps are compensated is decided once, under
the original's row lock that `retries.services.task_retry` also takes, and
recorded (`compensating`): a retry never inherits a step whose effect
is being undone.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from foundations.actors import SYSTEM
from foundations.logs import log_scope
from tools_app.executor import OutcomeKind, ToolCall, ToolContext, execute_through_ledger
from tools_app.executor.types import ToolSpec
from tools_app.registry import tool_specs

from ..keys import compensation_key
from ..machine import TaskStatus
from ..models import Event, Step, StepKind, StepStatus, Task
from ..payloads import resolve_steps
from ..services.dispatch import schedule_compensation
from ..store.effects import compensation_settled, compensations_due
from ..store.events import event_note

log = logging.getLogger(__name__)

# (task, step) -> (compensation tool, its arguments), or None: not the planner's
# step. Raises ValueError when the arguments cannot be built (recorded as a
# failed compensation). Filled from AppConfig.ready (workflows_app).
CompensationPlanner = Callable[[Task, Step], "tuple[str, dict[str, Any]] | None"]
_PLANNERS: list[CompensationPlanner] = []


def register_compensation_planner(planner: CompensationPlanner) -> None:
    if planner not in _PLANNERS:
        _PLANNERS.append(planner)


def compensation_call(task: Task, step: Step,
                      specs: dict[str, ToolSpec]) -> tuple[str, dict[str, Any]] | None:
    """The call that undoes `step`: (tool, arguments), or None when nothing does."""
    for planner in _PLANNERS:
        planned = planner(task, step)
        if planned is not None:
            return planned
    spec = specs.get(step.tool)
    if spec is None or not spec.compensation_tool or spec.side_effect == "read":
        return None
    resolve_steps(step.task_id, [step])  # an output stored out of row
    return spec.compensation_tool, {"original_args": step.args, "original_result": step.output,
                                    "original_key": step.idempotency_key}


def compensate_task(task_id: int) -> int:
    """Compensate a FAILED task's successful writes; returns how many calls were made."""
    task = (Task.objects.filter(pk=task_id)
            .only("id", "tenant_id", "trace_id", "status", "input", "shadow_of").first())
    if task is None or task.status != TaskStatus.FAILED:
        return 0
    if task.shadow_of is not None:
        # an evaluation run did nothing real (`shadow`): there is nothing to undo,
        # and a compensation tool would be a real effect
        compensation_settled(task_id)
        return 0
    made, elsewhere = _compensate(task)
    if not elsewhere:  # else the run that holds a call clears it when it ends
        # This run ended: whatever failed in it is on the timeline, for a person.
        compensation_settled(task_id)
    return made


def compensate_logged(task_id: int) -> None:
    """`compensate_task` off any request, in a thread of its own: its database
    connection given back at the end, an error logged (a person sees the failed
    task; the recovery sweep hands out again a compensation still due)."""
    close_old_connections()
    try:
        with log_scope(task_id=task_id):
            compensate_task(task_id)
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("compensating task %s failed", task_id)
    finally:
        connection.close()


class Compensations:
    """A worker process's compensations, beside its slices: never on the Celery
    pool's thread. A compensation calls tools one after another, each up to
    its timeout; run there, it kept the process from taking any message (a
    slice, another compensation), and failures against a downstream that hangs
    stalled the worker. The message hands it here and is done; up to
    `TETHER_COMPENSATION_THREADS` run at once per process, up to `WAITING` more
    wait for a thread, and a further one blocks the handing thread until one
    ends (the worker then takes no message, as when its driver is full). One
    lost with its process, running or waiting, is handed out again by the
    recovery sweep (`compensation_due_at`)."""

    WAITING = 100

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._pool: ThreadPoolExecutor | None = None
        self._slots: threading.BoundedSemaphore | None = None

    def submit(self, task_id: int) -> None:
        pool, slots = self._here()
        slots.acquire()
        pool.submit(compensate_logged, task_id).add_done_callback(lambda _: slots.release())

    def _here(self) -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
        with self._lock:
            if self._pool is None or self._slots is None or self._pid != os.getpid():
                size = int(settings.TETHER["COMPENSATION_THREADS"])  # a forked child: its own
                self._pool = ThreadPoolExecutor(size, thread_name_prefix="tether-compensation")
                self._slots = threading.BoundedSemaphore(size + self.WAITING)
                self._pid = os.getpid()
            return self._pool, self._slots


compensations = Compensations()


def resweep_compensations(*, batch: int = 100) -> int:
    """Hand out again the compensations of FAILED tasks still due (their message
    lost, their worker killed); each comes back once more after another
    `TETHER_COMPENSATION_RESWEEP_S` unless a run ends first. Returns how many."""
    with transaction.atomic():
        due = compensations_due(batch=batch)
        for task_id in due:
            transaction.on_commit(functools.partial(schedule_compensation, task_id))
    return len(due)


def _compensate(task: Task) -> tuple[int, bool]:
    """(calls made, whether a call was left to another run that holds it)."""
    specs = tool_specs(tenant_id=task.tenant_id)
    steps = compensable_steps(task, specs)
    # Each run its own owner: a run that finds a live claim of another (a
    # redelivered message, a resweep) leaves that call to it, and one that finds
    # a dead run's claim recovers it as the ledger does any interrupted call.
    owner = f"compensation:{task.pk}:{uuid.uuid4().hex[:12]}"
    made, elsewhere = 0, False
    for step in steps:
        try:
            planned = compensation_call(task, step, specs)
        except ValueError as exc:
            _event(task, "compensation_failed", {"step_no": step.step_no, "tool": step.tool,
                                                 "error": str(exc)})
            continue
        if planned is None:
            continue
        compensation_tool, args = planned
        payload = {
            "step_no": step.step_no,
            "tool": step.tool,
            "compensation_tool": compensation_tool,
        }
        compensator = specs.get(compensation_tool)
        if compensator is None:
            _event(
                task,
                "compensation_failed",
                {**payload, "error": "the compensation tool is missing or disabled"},
            )
            continue
        call = ToolCall(
            spec=compensator,
            args=args,
            context=ToolContext(
                idempotency_key=compensation_key(step.idempotency_key),
                task_id=task.pk,
                step_id=step.pk,
                tenant_id=task.tenant_id,
                trace_id=task.trace_id,
            ),
        )
        outcome = execute_through_ledger(call, owner=owner)
        if outcome.from_ledger:
            # compensated before, or being compensated: nothing new to record
            elsewhere = elsewhere or outcome.kind is OutcomeKind.PROCESSING
            continue
        made += 1
        if outcome.kind is OutcomeKind.OK:
            _event(task, "compensation_succeeded", {**payload, "result": outcome.result})
        else:
            _event(
                task,
                "compensation_failed",
                {**payload, "outcome": outcome.kind.value, "error": outcome.error},
            )
    return made, elsewhere


def compensable_steps(task: Task, specs: dict[str, ToolSpec]) -> list[Step]:
    """The steps to compensate, newest first; decided once, under the task's row lock."""
    with transaction.atomic():
        # Serialises with a retry of this task taking its steps (`retries.services`).
        Task.objects.select_for_update().filter(pk=task.pk).values_list("id").first()
        steps = list(
            Step.objects.filter(task_id=task.pk, kind=StepKind.TOOL, status=StepStatus.SUCCEEDED,
                                inherited_from__isnull=True)  # inherited: not this task's call
            .exclude(tool="")
            .order_by("-step_no")
        )
        taken = dict(Step.objects.filter(inherited_from__in=[s.pk for s in steps])
                     .values_list("inherited_from_id", "task_id"))
        for step in steps:
            if step.pk in taken:
                _event(task, "compensation_skipped", {
                    "step_no": step.step_no, "tool": step.tool,
                    "reason": f"retry task {taken[step.pk]} continues from this step"})
        steps = [s for s in steps if s.pk not in taken]
        chosen = [s.step_no for s in steps if _undoable(task, s, specs)]
        if chosen and not Event.objects.filter(task_id=task.pk,
                                               type="compensating").exists():
            _event(task, "compensating", {"step_nos": chosen})
    return steps


def _undoable(task: Task, step: Step, specs: dict[str, ToolSpec]) -> bool:
    try:
        return compensation_call(task, step, specs) is not None
    except ValueError:
        return True  # it is to be undone; its failure is recorded when it is tried


def _event(task: Task, type: str, payload: dict) -> None:  # type: ignore[type-arg]
    event_note(task_id=task.pk, type=type, actor=SYSTEM, payload=payload)
