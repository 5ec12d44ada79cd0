"""Firing due schedules: a step of the workers' recovery sweep (registered with
`tasks_app.store.hooks.on_sweep`), so schedules need no `celery beat`. The sweep
runs under an advisory lock on PostgreSQL; this step is safe without it too.

Each sweep takes the due, unpaused schedules (`next_due_at <= now`) in small
batches, locked with `SKIP LOCKED` (a concurrent caller passes them by). For
each schedule, the due times that passed since `next_due_at` are handled oldest
first, and `next_due_at` moves past them:

- catch-up (due times that passed unfired, e.g. while no worker ran): a due
  time is *missed* when a later one has passed too, or when the sweep reaches
  it more than `ON_TIME_S` late. `none` runs no missed due time, `one` runs the
  latest due time only, `all` runs each, but only the latest `CATCH_UP_MAX`:
  older ones are passed over without a record. A due time not run is recorded
  `skipped_catch_up`.
- overlap, while the schedule's previous run's task is not finished: `skip`
  records the due time `skipped_overlap`; `queue` leaves it due (the schedule
  waits: each sweep looks again, and once the previous run ends, catch-up
  decides which of the due times that passed meanwhile run); `allow` starts it.
- a run starts through its target kind's starter (`schedules_app.starters`)
  with the idempotency key `schedule:<id>:<due time ISO>`, in the same
  transaction as its `ScheduleRun` row: a crash leaves neither or both, and
  the row's uniqueness on (schedule, due time) refuses a second firing. A
  target that cannot start (no starter for its kind, deleted since, disabled)
  is recorded `failed` with the reason, and the schedule goes on.

Nothing raises out of this step: a schedule whose firing fails unexpectedly is
logged, left due, and tried again at the next sweep.
"""
from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from foundations.actors import Actor
from foundations.errors import DomainError
from tasks_app.machine import NON_TERMINAL
from tasks_app.models import Task

from ..cron import due_times_between, next_due_after
from ..models import CatchUp, Overlap, RunOutcome, Schedule, ScheduleRun
from ..starters import ScheduledStart, target_kind

log = logging.getLogger(__name__)

CATCH_UP_MAX = 10
ON_TIME_S = 60
BATCH = 10
MAX_BATCHES = 20  # per sweep; the rest wait for the next one


def schedules_fire(*, now: datetime | None = None) -> dict[str, int]:
    """Fire every due schedule once; how many due times ended how (by outcome)."""
    now = now or timezone.now()
    seen: set[int] = set()
    outcomes: Counter[str] = Counter()
    for _ in range(MAX_BATCHES):
        with transaction.atomic():
            batch = list(
                Schedule.objects.select_for_update(skip_locked=True)
                .filter(paused=False, next_due_at__lte=now).exclude(pk__in=seen)
                .order_by("next_due_at", "id")[:BATCH])
            for schedule in batch:
                seen.add(schedule.pk)
                try:
                    with transaction.atomic():
                        outcomes.update(schedule_fire(schedule, now=now))
                except Exception:  # noqa: BLE001 - one schedule must not stop the others
                    log.exception("schedule %s could not fire; the next sweep tries again",
                                  schedule.pk)
        if len(batch) < BATCH:
            break
    return dict(outcomes)


def schedule_fire(schedule: Schedule, *, now: datetime) -> list[str]:
    """Handle the due times of one locked, due schedule (in the caller's transaction)."""
    due = due_times_between(schedule.cron, schedule.timezone, schedule.next_due_at, now,
                            limit=CATCH_UP_MAX)
    if not due:  # (cannot happen: the schedule is due) never stuck on it
        _advance(schedule, next_due_at=next_due_after(schedule.cron, schedule.timezone, now))
        return []
    outcomes: list[str] = []
    for index, due_at in enumerate(due):
        if not _runs(schedule.catch_up, due_at, latest=index == len(due) - 1, now=now):
            outcomes.append(_record(schedule, due_at, RunOutcome.SKIPPED_CATCH_UP))
        elif schedule.overlap != Overlap.ALLOW and _previous_run_going(schedule):
            if schedule.overlap == Overlap.QUEUE:
                _advance(schedule, next_due_at=due_at)  # stays due: the next sweep looks again
                return outcomes
            outcomes.append(_record(schedule, due_at, RunOutcome.SKIPPED_OVERLAP))
        else:
            outcomes.append(_start(schedule, due_at))
        schedule.last_due_at = due_at
    following = next_due_after(schedule.cron, schedule.timezone, due[-1])
    if following <= now:  # (only where a DST change bends the walk back)
        following = next_due_after(schedule.cron, schedule.timezone, now)
    _advance(schedule, next_due_at=following)
    return outcomes


def _runs(catch_up: str, due_at: datetime, *, latest: bool, now: datetime) -> bool:
    if catch_up == CatchUp.ALL:
        return True
    if not latest:
        return False
    return catch_up == CatchUp.ONE or now - due_at <= timedelta(seconds=ON_TIME_S)


def _previous_run_going(schedule: Schedule) -> bool:
    previous = (ScheduleRun.objects.filter(schedule=schedule, task__isnull=False)
                .order_by("-due_at").values_list("task_id", flat=True).first())
    return previous is not None and Task.objects.filter(
        pk=previous, status__in=NON_TERMINAL).exists()


def _advance(schedule: Schedule, *, next_due_at: datetime) -> None:
    schedule.next_due_at = next_due_at
    schedule.save(update_fields=["next_due_at", "last_due_at", "updated_at"])


def run_key(schedule: Schedule, due_at: datetime) -> str:
    return f"schedule:{schedule.pk}:{due_at.astimezone(UTC).isoformat()}"


def _record(schedule: Schedule, due_at: datetime, outcome: str, *, error: str = "") -> str:
    """A due time that started nothing; once only (the row of a due time fired before
    wins, e.g. when `next_due_at` was moved back)."""
    try:
        with transaction.atomic():
            _, created = ScheduleRun.objects.get_or_create(
                schedule=schedule, due_at=due_at,
                defaults={"outcome": outcome, "error": error[:2000]})
    except IntegrityError:  # a concurrent caller recorded it first
        return "already_fired"
    return outcome if created else "already_fired"


def _start(schedule: Schedule, due_at: datetime) -> str:
    if ScheduleRun.objects.filter(schedule=schedule, due_at=due_at).exists():
        return "already_fired"
    kind = target_kind(schedule.target_kind)
    if kind is None:
        return _record(schedule, due_at, RunOutcome.FAILED,
                       error=f"no starter for {schedule.target_kind!r} targets on this server")
    start = ScheduledStart(
        tenant_id=schedule.tenant_id, requester_id=schedule.created_by_id,
        name=schedule.target_name, input=dict(schedule.input or {}), goal=schedule.goal,
        script=schedule.script, idempotency_key=run_key(schedule, due_at),
        actor=Actor(name=f"schedule:{schedule.name}", role="system"))
    try:
        with transaction.atomic():  # the task and its row: both or neither
            submitted = kind.start(start)
            ScheduleRun.objects.create(schedule=schedule, due_at=due_at, task=submitted.task,
                                       outcome=RunOutcome.STARTED)
    except DomainError as exc:  # the target cannot start now: say why, keep going
        details = "; ".join(f"{field}: {' '.join(map(str, problems))}"
                            if isinstance(problems, list) else f"{field}: {problems}"
                            for field, problems in exc.details.items())
        return _record(schedule, due_at, RunOutcome.FAILED,
                       error=f"{exc.message} {details}".strip())
    except IntegrityError:  # a concurrent caller fired this due time first
        return "already_fired"
    return RunOutcome.STARTED
