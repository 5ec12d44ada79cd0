"""Schedules: create, change, pause, resume, delete; every field checked before
anything is stored, every change an audit entry in its transaction.

- `target` is `{kind: name}` for a kind with a registered starter
  (`schedules_app.starters`); a kind that can tell (`agent`, and `workflow`
  when its app registers a check) must name a target of the same tenant.
- `goal` and `script` are an agent's: a blank goal becomes "Scheduled run of
  <agent>", a scripted agent needs a script and any other refuses one (as
  `task_submit` will when the run starts); other kinds take neither.
- `input` is a JSON object of at most `MAX_INPUT_BYTES`.
- `cron` (five fields) and `timezone` (IANA) are checked by `schedules_app.cron`;
  the next due time is computed from them, after now, whenever they change.
- Pausing stops the schedule firing; resuming starts again from the next due
  time after now: the due times passed while paused are not caught up.
"""
from __future__ import annotations

import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.named_resources import NamedResource, model_field_errors
from tasks_app.keys import canonical_json
from tasks_app.models import AgentProfile
from tasks_app.services.tasks import MAX_SCRIPT_ENTRIES

from ..cron import cron_problem, next_due_after, timezone_problem
from ..models import CatchUp, Overlap, Schedule
from ..starters import target_kind, target_kinds

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_TARGET_NAME = 200
MAX_INPUT_BYTES = 64 * 1024
MAX_GOAL_CHARS = 10_000
EDITABLE = ("target", "input", "goal", "script", "cron", "timezone", "overlap", "catch_up")
TIMING = ("cron", "timezone")


def default_goal(agent: str) -> str:
    return f"Scheduled run of {agent}"


def schedule_create(*, tenant_id: int, name: str, actor: Actor, **fields: Any) -> Schedule:
    """A new schedule, due first at the next time its cron gives after now."""
    return SCHEDULES.create(tenant_id=tenant_id, name=name, fields=fields, actor=actor,
                            defaults={"created_by_id": actor.user_id})


def schedule_update(*, tenant_id: int, name: str, changes: dict[str, Any],
                    actor: Actor) -> Schedule:
    """Change some fields; a changed cron or time zone gives a new next due time."""
    return SCHEDULES.update(tenant_id=tenant_id, name=name, changes=changes, actor=actor,
                            prepare=_before_changes)


def schedule_delete(*, tenant_id: int, name: str, actor: Actor) -> None:
    """The schedule and its run records go; the tasks it started stay."""
    with transaction.atomic():
        schedule = SCHEDULES.locked(tenant_id, name)
        schedule_audit(schedule, actor=actor, action="deleted", before=schedule_audited(schedule))
        schedule.delete()


def schedule_pause(*, tenant_id: int, name: str, actor: Actor) -> Schedule:
    return _set_paused(tenant_id=tenant_id, name=name, actor=actor, paused=True)


def schedule_resume(*, tenant_id: int, name: str, actor: Actor) -> Schedule:
    return _set_paused(tenant_id=tenant_id, name=name, actor=actor, paused=False)


def _set_paused(*, tenant_id: int, name: str, actor: Actor, paused: bool) -> Schedule:
    """Pausing twice (or resuming a running schedule) changes nothing and records nothing."""
    with transaction.atomic():
        schedule = SCHEDULES.locked(tenant_id, name)
        if schedule.paused == paused:
            return schedule
        before = schedule_audited(schedule)
        schedule.paused = paused
        if not paused:
            schedule.next_due_at = next_due_after(schedule.cron, schedule.timezone,
                                                  timezone.now())
        schedule.save(update_fields=["paused", "next_due_at", "updated_at"])
        schedule_audit(schedule, actor=actor, action="resumed" if not paused else "paused",
                       before=before)
    return schedule


def _before_changes(schedule: Schedule, changes: dict[str, Any]) -> None:
    """What follows from the fields that change, recomputed by `schedule_errors`: a
    new cron or time zone, the next due time; a new target, the default goal."""
    if any(key in changes and changes[key] != getattr(schedule, key) for key in TIMING):
        schedule.next_due_at = None  # type: ignore[assignment]
    if "target" in changes and "goal" not in changes and schedule.target_kind == "agent" \
            and schedule.goal == default_goal(schedule.target_name):
        schedule.goal = ""


def schedule_audited(schedule: Schedule) -> dict[str, Any]:
    return {"target": schedule.target, "input": schedule.input, "goal": schedule.goal,
            "script": schedule.script, "cron": schedule.cron, "timezone": schedule.timezone,
            "overlap": schedule.overlap, "catch_up": schedule.catch_up,
            "paused": schedule.paused}


def schedule_audit(schedule: Schedule, *, actor: Actor, action: str,
                   before: dict[str, Any] | None) -> None:
    after = None if action == "deleted" else schedule_audited(schedule)
    audit_record(actor=actor, tenant_id=schedule.tenant_id, kind="schedule",
                 name=schedule.name, action=action, before=before, after=after,
                 object_id=schedule.pk)


def schedule_errors(schedule: Schedule) -> dict[str, list[str]]:
    """Field errors of a schedule as a whole (empty when it may be stored). Fills
    in what follows from valid fields: an agent's default goal, the next due time."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    for field, problem in _target_errors(schedule).items():
        add(field, problem)
    if not isinstance(schedule.input, dict):
        add("input", "a JSON object")
    elif len(canonical_json(schedule.input).encode()) > MAX_INPUT_BYTES:
        add("input", f"at most {MAX_INPUT_BYTES // 1024} KiB of JSON")
    if not isinstance(schedule.goal, str) or len(schedule.goal) > MAX_GOAL_CHARS:
        add("goal", f"text of at most {MAX_GOAL_CHARS} characters")
    if schedule.script is not None and (
            not isinstance(schedule.script, list) or len(schedule.script) > MAX_SCRIPT_ENTRIES):
        add("script", f"a list of at most {MAX_SCRIPT_ENTRIES} decisions")
    if cron := cron_problem(schedule.cron):
        add("cron", cron)
    if zone := timezone_problem(schedule.timezone):
        add("timezone", zone)
    if schedule.overlap not in Overlap.values:
        add("overlap", f"one of {', '.join(Overlap.values)}")
    if schedule.catch_up not in CatchUp.values:
        add("catch_up", f"one of {', '.join(CatchUp.values)}")
    if errors:
        return errors
    if schedule.next_due_at is None:
        schedule.next_due_at = next_due_after(schedule.cron, schedule.timezone, timezone.now())
    return model_field_errors(schedule)


def _target_errors(schedule: Schedule) -> dict[str, str]:
    target = schedule.target
    kinds = target_kinds()
    shape = f"an object naming one target: {' or '.join(f'{{{k!r}: name}}' for k in kinds)}"
    if not isinstance(target, dict) or len(target) != 1:
        return {"target": shape}
    [(kind, name)] = target.items()
    registered = target_kind(kind)
    if registered is None:
        return {"target": f"{kind!r} is not a kind of target this server runs; {shape}"}
    if not isinstance(name, str) or not 0 < len(name) <= MAX_TARGET_NAME:
        return {"target": f"the {kind}'s name: text of 1 to {MAX_TARGET_NAME} characters"}
    if registered.exists is not None and not registered.exists(schedule.tenant_id, name):
        return {"target": f"no {kind} named {name!r} in this tenant"}
    if kind == "agent":
        return _agent_errors(schedule, name)
    problems = {}
    if schedule.goal:
        problems["goal"] = f"only an agent's run takes a goal, not a {kind}'s"
    if schedule.script is not None:
        problems["script"] = f"only a scripted agent's run takes a script, not a {kind}'s"
    return problems


def _agent_errors(schedule: Schedule, agent: str) -> dict[str, str]:
    """As `task_submit` will check each run: a scripted agent needs a script, others
    take none. (Read from the profile as saved; each run checks its own version.)"""
    if not schedule.goal:
        schedule.goal = default_goal(agent)
    model = AgentProfile.objects.filter(tenant_id=schedule.tenant_id, name=agent).values_list(
        "model", flat=True).first() or {}
    backend = (model or {}).get("backend") or "scripted"
    if backend == "scripted" and schedule.script is None:
        return {"script": f"agent {agent!r} is scripted: its runs need a script, "
                          "a list of decisions"}
    if backend != "scripted" and schedule.script is not None:
        return {"script": f"agent {agent!r} uses the {backend} backend; a script is only "
                          "for scripted agents"}
    return {}


SCHEDULES = NamedResource(
    model=Schedule, noun="schedule", article="a", editable=EDITABLE, errors=schedule_errors,
    audit=schedule_audit, audited=schedule_audited, name_pattern=NAME,
    name_rule="letters, digits, _ and - (max 64)", rename_hint="create a new schedule instead",
)
