"""Rebuilding a task's state from its event log, and checking it against the row.

The event log is append-only and every transition writes exactly one event in
the transaction that moves the task (`store.tasks`): its type is the
transition's event, its payload carries `from` and `to`, its `task_version` the
version the transition produced. Folding those events in id order must give
the stored status and version; anything else means the row or the log was
changed behind the services' back.

Besides status and version, the log also yields:
- steps: every event that creates a step names it (`decision_recorded`,
  `invalid_decision`, `need_input`, `need_approval`, `final_accepted`, and the
  failure or escalation that refuses a call), so the highest `step_no` seen is
  the number of steps;
- a retry's inherited steps and tool calls, from its `retry_created` event;
- tool calls: a tool outcome committed (`step_succeeded`), an approval answered
  with the reviewer's response, a reconciliation marking the call succeeded or
  failed.

Read-only: nothing here writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import TRANSITIONS, TaskStatus, target_of
from ..models import Event, Step, StepKind, Task


@dataclass(frozen=True)
class ReplayedState:
    task_id: int
    status: str
    version: int
    transitions: int
    steps: int
    tool_calls: int
    final_step_no: int | None
    problems: tuple[str, ...]  # places where the log contradicts itself


def _counts_a_tool_call(type_: str, payload: dict) -> bool:
    if type_ == "step_succeeded":
        return True
    if type_ in ("approval_granted", "approval_decided"):  # a reply's card: `approval_decided`
        return payload.get("decision") == "respond"
    if type_ == "reconciled":
        return payload.get("outcome") in ("succeeded", "failed")
    return False


def task_replay(task_id: int) -> ReplayedState:
    """Fold the task's events (oldest first) into the state they describe."""
    status, version = str(TaskStatus.CREATED), 0
    transitions = steps = tool_calls = 0
    final_step_no: int | None = None
    problems: list[str] = []
    events = (Event.objects.filter(task_id=task_id).order_by("id")
              .only("id", "type", "task_version", "payload"))
    for event in events.iterator(chunk_size=500):
        payload = event.payload if isinstance(event.payload, dict) else {}
        step_no = payload.get("step_no")
        if isinstance(step_no, int) and step_no > steps:
            steps = step_no
        if event.type == "retry_created":
            # a retry starts with the steps (and their tool calls) it inherited
            inherited = payload.get("inherited") or {}
            steps = max(steps, int(inherited.get("steps") or 0))
            tool_calls += int(inherited.get("tool_calls") or 0)
        if event.type not in TRANSITIONS:
            continue
        transitions += 1
        where = f"event {event.pk} ({event.type}, v{event.task_version})"
        target = target_of(status, event.type)
        if target is None:
            problems.append(f"{where}: {event.type} is not allowed from {status}")
        if payload.get("from") != status:
            problems.append(f"{where}: says from {payload.get('from')}, the log was at {status}")
        if target is not None and payload.get("to") != target:
            problems.append(f"{where}: says to {payload.get('to')}, the table says {target}")
        if event.task_version != version + 1:
            problems.append(f"{where}: version {event.task_version} follows {version}")
        status = str(payload.get("to") or target or status)
        version = event.task_version
        if _counts_a_tool_call(event.type, payload):
            tool_calls += 1
        if event.type == "final_accepted" and isinstance(step_no, int):
            final_step_no = step_no
    return ReplayedState(task_id=task_id, status=status, version=version, transitions=transitions,
                         steps=steps, tool_calls=tool_calls, final_step_no=final_step_no,
                         problems=tuple(problems))


def task_replay_check(task_id: int) -> list[str]:
    """Every difference between the replayed state and the stored one (empty: they agree)."""
    task = Task.objects.get(pk=task_id)
    replayed = task_replay(task_id)
    mismatches = list(replayed.problems)

    def differ(what: str, from_log: object, stored: object) -> None:
        if from_log != stored:
            mismatches.append(f"{what}: the events say {from_log!r}, the task says {stored!r}")

    differ("status", replayed.status, task.status)
    differ("version", replayed.version, task.version)
    differ("steps", replayed.steps, task.steps_count)
    differ("tool_calls", replayed.tool_calls, task.tool_calls)
    rows = Step.objects.filter(task_id=task_id).count()
    if rows != task.steps_count:
        mismatches.append(f"steps: {rows} step rows, the task counts {task.steps_count}")
    if task.status == TaskStatus.SUCCEEDED:
        final = (Step.objects.filter(task_id=task_id, step_no=replayed.final_step_no,
                                     kind=StepKind.FINAL).values_list("output", flat=True).first()
                 if replayed.final_step_no else None)
        differ("result", final, task.result)
    return mismatches
