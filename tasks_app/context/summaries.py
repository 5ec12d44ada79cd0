"""Context summaries: older steps folded into versioned running notes.

`summary_maybe_create` runs after a step commits. When the steps after the
active summary, beyond the last W (`CONTEXT_WINDOW_STEPS`), reach
`SUMMARY_THRESHOLD_STEPS` or `SUMMARY_THRESHOLD_CHARS`, they are folded with
the active summary into a new version: by the model for `openai` agents
(a call counted in the task's model calls and tokens, whatever comes of it;
falling back to the deterministic digest if the call fails), by a
deterministic digest otherwise. Each new text is checked against the facts
of the originals (`context.fact_check`): a model's summary that drops one is
refused (the digest is used), and what the text lacks is pinned verbatim with
its source events; the check is recorded on the version. Each version
records the step it covers until and the ids of the events it newly covers
(those since the version it was built on), and writes a `context_summarized`
event. Every read here is
bounded by the threshold, not by the task's history; at most
`MAX_BATCH_STEPS` steps are folded per call, so a big backlog (after a
rollback) is caught up over the next steps.

`summary_rollback` makes an earlier version the active one again (later
versions are deactivated, kept for audit) and writes a `summary_rolled_back`
event; the next summary is built on the restored version.

Invariants: the highest active version is the one the context uses; versions
are unique per task and never rewritten; a summary is written only if the
version it was built on is still the active one (checked under a brief lock
on the task row, which `summary_rollback` takes too).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import IntegerField, Max, Sum

from accounts_app.models import Role
from accounts_app.vault.lookup import model_keys
from foundations.actors import SYSTEM, Actor
from foundations.errors import conflict, forbidden, invalid, not_found

from ..gateway import GatewayError, get_backend
from ..gateway.base import CallGuard, CallLimiter
from ..machine import TERMINAL
from ..models import ContextSummary, Event, Step, Task
from ..payloads import resolve_steps
from ..services.spend import spend_of_call
from ..store.counters import task_model_call_count
from ..store.events import event_append
from .builder import ContextSources, active_summary, context_limits, step_chars, step_view
from .fact_check import Checked, check_summary, facts_to_keep

log = logging.getLogger(__name__)

MAX_BATCH_STEPS = 50
LINE_CHARS = 240
ROLLBACK_ROLES = (Role.OPERATOR, Role.ADMIN, "system")


# --- creating ----------------------------------------------------------------------


def summary_maybe_create(*, task_id: int, steps_count: int | None = None,
                         sources: ContextSources | None = None,
                         guard: CallGuard | None = None,
                         limiter: CallLimiter | None = None) -> ContextSummary | None:
    """Fold older steps into a new summary version if a threshold is passed.

    Called by the runner after a step commits, outside any transaction. A
    failure here is logged and leaves the context as it was: it never fails
    the step that was already committed. With `steps_count` and the `sources`
    the step's context was built from (the active summary and the recent
    steps with their sizes, as the caller last saw them) most calls decide
    that no summary is due without a query. The model's call goes through its
    breakers (`guard`) and rate limits (`limiter`): held by either, the summary
    is the deterministic digest.
    """
    try:
        if steps_count is not None and sources is not None and not _maybe_due(
                task_id, steps_count=steps_count, sources=sources):
            return None
        return _maybe_create(task_id, guard, limiter)
    except Exception:
        log.exception("summarizing the context of task %s failed", task_id)
        return None


def _maybe_due(task_id: int, *, steps_count: int, sources: ContextSources) -> bool:
    limits = context_limits()
    covered = sources.covered
    older = steps_count - covered - limits["window"]
    if older <= 0:
        return False
    if older >= limits["threshold_steps"]:
        return True
    until = covered + older
    sizes = {s.step_no: getattr(s, "chars", None) for s in sources.recent}
    if all(sizes.get(n) is not None for n in range(covered + 1, until + 1)):
        chars = sum(sizes[n] for n in range(covered + 1, until + 1))  # type: ignore[misc]
    else:
        chars = _chars_of(task_id, covered, until)
    return chars >= limits["threshold_chars"]


def _maybe_create(task_id: int, guard: CallGuard | None = None,
                  limiter: CallLimiter | None = None) -> ContextSummary | None:
    task = (Task.objects.only("id", "tenant_id", "trace_id", "status", "steps_count", "goal",
                              "agent_snapshot").filter(pk=task_id).first())
    if task is None or task.status in TERMINAL:
        return None
    limits = context_limits()
    base = active_summary(task_id)
    covered = base.covers_until_step if base else 0
    older = task.steps_count - covered - limits["window"]
    if older <= 0:
        return None
    if older < limits["threshold_steps"] and _chars_of(task_id, covered, covered + older) < limits[
            "threshold_chars"]:
        return None

    rows = list(Step.objects.filter(task_id=task_id, step_no__gt=covered,
                                    step_no__lte=covered + min(older, MAX_BATCH_STEPS))
                .defer("model_log", "late_output").order_by("step_no"))
    resolve_steps(task_id, rows)
    views, settled = [], []
    for row in rows:
        if row.is_open:  # not settled yet: it stays verbatim until it is
            break
        views.append(step_view(row, limit=limits["result_chars"]))
        settled.append(row)
    if not views:
        return None
    until = views[-1]["step_no"]
    event_ids = _events_covered(task_id, base_version=base.version if base else 0, until_step=until)
    facts = facts_to_keep(task_id, base=base, steps=settled, event_ids=event_ids)

    previous = base.text if base else ""
    method, tokens, model_name, error = "deterministic", 0, "", ""
    text = ""
    model = (task.agent_snapshot or {}).get("model") or {}
    if model.get("backend") == "openai":
        calls = 1
        try:
            keys = model_keys(tenant_id=task.tenant_id, model=model)  # the task's tenant only
            backend: Any = get_backend(model, keys, guard, limiter)
            notes = backend.summarize(
                goal=task.goal, previous=previous, steps=views, max_chars=limits["summary_chars"])
            text, tokens, model_name, method = notes.text, notes.tokens, notes.model, "model"
            if notes.usage is not None:  # priced and rolled up like a decision's call
                spend_of_call(task_id=task.pk, tenant_id=task.tenant_id,
                              agent=task.agent_snapshot or {}, model=notes.model,
                              usage=notes.usage, used_fallback=notes.used_fallback,
                              evaluation_run=task.shadow_of is not None)
        except GatewayError as exc:
            error, calls = str(exc), exc.calls  # none when a breaker held the call
        # A model call, answered or not, kept or not: it counts against the budget.
        task_model_call_count(task.pk, calls=calls, tokens=tokens)
    digest = deterministic_summary(previous=previous, views=views, until=until,
                                   max_chars=limits["summary_chars"])
    kept = check_summary(text or digest, facts=facts, base=base, method=method, digest=digest)
    if kept.refused:
        method = "deterministic"  # the model's summary lost facts: the digest is used instead
    return _record(task, base_version=base.version if base else 0, text=kept.text, until=until,
                   event_ids=event_ids, method=method, tokens=tokens, model_name=model_name,
                   error=error, from_step=views[0]["step_no"], kept=kept)


def _chars_of(task_id: int, after: int, until: int) -> int:
    """Size of the steps' outputs, errors and arguments, summed in the database."""
    size = (Step.objects.filter(task_id=task_id, step_no__gt=after, step_no__lte=until)
            .aggregate(n=Sum(step_chars(), output_field=IntegerField())))["n"]
    return int(size or 0)


def _events_covered(task_id: int, *, base_version: int, until_step: int) -> list[int]:
    """Ids of the events after the base version's last one, up to the last
    event of step `until_step` (events of the human loop in between included)."""
    since = 0
    if base_version:
        ids = (ContextSummary.objects.filter(task_id=task_id, version=base_version)
               .values_list("event_ids", flat=True).first()) or []
        since = max((int(i) for i in ids), default=0)
    boundary = (Event.objects
                .filter(task_id=task_id, id__gt=since, payload__step_no__lte=until_step)
                .aggregate(m=Max("id")))["m"]
    if boundary is None:
        return []
    return list(Event.objects.filter(task_id=task_id, id__gt=since, id__lte=boundary)
                .order_by("id").values_list("id", flat=True))


def _record(task: Task, *, base_version: int, text: str, until: int, event_ids: list[int],
            method: str, tokens: int, model_name: str, error: str,
            from_step: int, kept: Checked) -> ContextSummary | None:
    with transaction.atomic():
        # Held for this instant only: a rollback committing between our read of
        # the base version and this write must win.
        version_now = (Task.objects.select_for_update().filter(pk=task.pk)
                       .values_list("version", flat=True).get())
        active = (ContextSummary.objects.filter(task_id=task.pk, active=True)
                  .order_by("-version").values_list("version", flat=True).first()) or 0
        if active != base_version:
            return None  # rolled back or summarized meanwhile: the next step decides again
        top = ContextSummary.objects.filter(task_id=task.pk).aggregate(m=Max("version"))["m"] or 0
        row = ContextSummary.objects.create(
            task_id=task.pk, version=top + 1, text=text, covers_until_step=until,
            event_ids=event_ids, active=True, created_by=f"summarizer:{method}",
            facts=kept.facts, pinned_facts=kept.pinned, fact_check=kept.record)
        payload: dict[str, Any] = {
            "version": row.version, "built_on": base_version, "from_step": from_step,
            "covers_until_step": until, "events_covered": len(event_ids), "method": method,
            "facts_checked": kept.record["checked"], "facts_pinned": kept.record["pinned_now"],
        }
        if kept.refused:
            payload["model_summary_refused"] = kept.record["refused"]["missing_count"]
        if tokens:
            payload["tokens"] = tokens
        if model_name:
            payload["model"] = model_name
        if error:
            payload["model_error"] = error[:500]
        event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                     task_version=version_now, type="context_summarized", actor=SYSTEM,
                     payload=payload)
    return row


# --- the deterministic digest ----------------------------------------------------------


def deterministic_summary(*, previous: str, views: list[dict[str, Any]], until: int,
                          max_chars: int) -> str:
    """One line per step, newest kept when it gets too long. A pure function:
    the same steps always give the same text."""
    lines = [ln for ln in previous.splitlines() if ln.startswith("- step ")]
    lines += [step_line(v) for v in views]
    header = f"Steps 1-{until}, one line each, oldest first."
    budget = max(0, max_chars - len(header) - 80)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > budget:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    out = [header]
    if len(kept) < len(lines):
        first = kept[0].split()[2] if kept else str(until + 1)
        out.append(f"(Steps before step {first} are no longer listed; "
                   "the pinned facts still hold.)")
    return "\n".join(out + kept)


def step_line(view: dict[str, Any]) -> str:
    n, status = view["step_no"], view["status"]
    if view["kind"] == "ask":
        output = view.get("output")
        answer = output.get("answer") if isinstance(output, dict) else None
        line = f"- step {n} asked {view.get('question')!r} -> answer: {answer!r}"
    elif view["kind"] == "invalid":
        error = view.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else error
        line = f"- step {n} output not accepted ({view.get('tool') or 'no tool'}): {message}"
    else:
        outcome = view.get("output") if "output" in view else view.get("error")
        call = f"{view.get('tool')}({_compact(view.get('args'))})"
        line = f"- step {n} {call} -> {status}: {_compact(outcome)}"
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3] + "..."


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"), sort_keys=True)


# --- rolling back ----------------------------------------------------------------------


@dataclass(frozen=True)
class RolledBack:
    task_id: int
    version: int
    from_version: int
    deactivated: tuple[int, ...]
    event_id: int


def summary_rollback(*, task_id: int, tenant_id: int, version: int, actor: Actor,
                     expected_version: int | None = None, comment: str = "") -> RolledBack:
    """Make `version` (0: no summary) the active summary again.

    Later versions are deactivated, never deleted. Refused for a version that
    is not earlier than the active one, for another tenant's task (404), and
    on a stale `expected_version` of the task (409).
    """
    if actor.role not in ROLLBACK_ROLES:
        raise forbidden("forbidden", "only operators and admins can roll back a summary")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise invalid("invalid", "The request is not valid.", version=["a summary version number"])
    with transaction.atomic():
        task = (Task.objects.select_for_update()  # held for this instant only
                .only("id", "tenant_id", "trace_id", "version", "status")
                .filter(pk=task_id, tenant_id=tenant_id).first())
        if task is None:
            raise not_found("Task")
        if expected_version is not None and task.version != expected_version:
            raise conflict("stale_version", "the task has moved on since this view was taken",
                           expected_version=expected_version, current_version=task.version)
        current = (ContextSummary.objects.filter(task_id=task_id, active=True)
                   .order_by("-version").values_list("version", flat=True).first()) or 0
        if version >= current:
            raise invalid("invalid", "The request is not valid.",
                          version=[f"roll back to a version before the active one (v{current})"])
        if version and not ContextSummary.objects.filter(task_id=task_id, version=version).exists():
            raise invalid("invalid", "The request is not valid.",
                          version=[f"no summary v{version}"])
        later = ContextSummary.objects.filter(task_id=task_id, version__gt=version)
        deactivated = tuple(later.filter(active=True).order_by("version")
                            .values_list("version", flat=True))
        later.update(active=False)
        if version:
            ContextSummary.objects.filter(task_id=task_id, version=version).update(active=True)
        event = event_append(task_id=task_id, tenant_id=task.tenant_id, trace_id=task.trace_id,
                             task_version=task.version, type="summary_rolled_back", actor=actor,
                             payload={"to_version": version, "from_version": current,
                                      "deactivated": list(deactivated), "comment": comment[:2000]})
    return RolledBack(task_id=task_id, version=version, from_version=current,
                      deactivated=deactivated, event_id=event.pk)


# --- reading (for the task page and the API) ---------------------------------------------


def summary_list(*, task_id: int, tenant_id: int,
                 limit: int | None = None) -> list[dict[str, Any]]:
    """The summary versions of a task, newest first (the newest `limit` of them,
    and the one in use if it is older), with whether the context uses it."""
    versions = ContextSummary.objects.filter(task_id=task_id, task__tenant_id=tenant_id)
    in_use = (versions.filter(active=True).order_by("-version")
              .values_list("version", flat=True).first()) or 0
    versions = versions.defer("facts")
    rows = list(versions.order_by("-version")[:limit] if limit else versions.order_by("-version"))
    if limit and in_use and all(r.version != in_use for r in rows):
        rows += list(versions.filter(version=in_use))
    return [{"version": r.version, "text": r.text, "covers_until_step": r.covers_until_step,
             "event_ids": list(r.event_ids or []), "active": r.active,
             "fact_check": dict(r.fact_check or {}), "pinned_facts": list(r.pinned_facts or []),
             "in_use": r.version == in_use, "created_by": r.created_by,
             "created_at": r.created_at} for r in rows]


def summary_exists(*, task_id: int, tenant_id: int, version: int) -> bool:
    """Whether the task (of this tenant) has a summary `version`."""
    return ContextSummary.objects.filter(task_id=task_id, task__tenant_id=tenant_id,
                                         version=version).exists()


def summary_count(*, task_id: int, tenant_id: int) -> int:
    return ContextSummary.objects.filter(task_id=task_id, task__tenant_id=tenant_id).count()
