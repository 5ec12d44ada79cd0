"""Reads for the console pages: the filtered task list, the dashboard figures,
and everything the task page shows. Every function takes the tenant id and
scopes its queries by it; a task of another tenant simply is not found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from foundations.ids import parse_id
from tools_app.models import ToolExecution
from workflows_app.models import Workflow

from ..context.summaries import summary_list
from ..machine import NON_TERMINAL, TERMINAL, WAITING, TaskStatus
from ..models import AgentProfile, ContextSummary, DailySpend, Event, Step, Task
from ..models.spend import EVALUATION_AGENT_PREFIX
from ..payloads import resolve_ledger, resolve_steps
from ..pricing import pico_text
from ..selectors import tasks_of_tenant
from ..services.quotas import quota_summary
from .presenters import (
    CiteChip,
    EventView,
    bar_class,
    cite_chips,
    memory_shown,
    present_event,
    status_label,
)

S = TaskStatus
STATUS_GROUPS: dict[str, tuple[str, ...]] = {
    "active": NON_TERMINAL,
    "waiting": WAITING,
    "finished": TERMINAL,
}
TIMELINE_PAGE = 200
STEPS_SHOWN = 50
SUMMARIES_SHOWN = 10
CHILDREN_SHOWN = 50  # a 1,000-step task has over a hundred versions


# --- the task list -------------------------------------------------------------------


def filtered_tasks(
    tenant_id: int,
    *,
    status: str = "",
    agent: str = "",
    workflow: str = "",
    q: str = "",
    trace: str = "",
    requester_id: int | None = None,
    agent_version: int | None = None,
) -> QuerySet[Task]:
    """The tenant's tasks matching the list's filters, newest first.

    `q` matches a task id (``42`` or ``#42``), the start of a trace id, or
    words of the goal.
    """
    qs = tasks_of_tenant(tenant_id).select_related("requester")
    if status in STATUS_GROUPS:
        qs = qs.filter(status__in=STATUS_GROUPS[status])
    elif status in S.values:
        qs = qs.filter(status=status)
    if agent:
        qs = qs.filter(agent__name=agent)
    if workflow:
        qs = qs.filter(agent_snapshot__workflow__name=workflow)
    if trace:
        qs = qs.filter(trace_id=trace.strip().lower())
    q = q.strip()
    if q:
        cond = Q(goal__icontains=q)
        task_id = parse_id(q.lstrip("#"))
        if task_id is not None:
            cond |= Q(pk=task_id)
        if len(q) >= 4 and all(c in "0123456789abcdefABCDEF" for c in q):
            cond |= Q(trace_id__startswith=q.lower())
        qs = qs.filter(cond)
    if requester_id is not None:
        qs = qs.filter(requester_id=requester_id)
    if agent_version is not None:
        qs = qs.filter(agent_version=agent_version)
    return qs.order_by("-id")


def agent_names(tenant_id: int) -> list[str]:
    return list(
        AgentProfile.objects.filter(tenant_id=tenant_id)
        .order_by("name")
        .values_list("name", flat=True)
    )


def workflow_names(tenant_id: int) -> list[str]:
    return list(
        Workflow.objects.filter(tenant_id=tenant_id).order_by("name").values_list("name", flat=True)
    )


# --- the dashboard ---------------------------------------------------------------------


@dataclass(frozen=True)
class HourBar:
    """One hour of finished tasks; segment heights are classes relative to the busiest hour."""

    start: datetime
    succeeded: int
    failed: int
    canceled: int
    peak: int

    @property
    def total(self) -> int:
        return self.succeeded + self.failed + self.canceled

    @property
    def segments(self) -> list[tuple[str, int, str]]:
        return [
            (kind, n, bar_class(n, self.peak))
            for kind, n in (
                ("succeeded", self.succeeded),
                ("failed", self.failed),
                ("canceled", self.canceled),
            )
            if n
        ]


def dashboard(tenant_id: int, *, now: datetime | None = None, hours: int = 12) -> dict[str, Any]:
    now = now or timezone.now()
    # live work only: evaluation runs (`evals_app`) have their own page
    tasks = Task.objects.filter(tenant_id=tenant_id, shadow_of__isnull=True)
    counts = dict(tasks.order_by().values_list("status").annotate(n=Count("id")))
    waiting = [{"status": s, "label": status_label(s), "count": counts.get(s, 0)} for s in WAITING]
    week_ago = now - timedelta(days=7)
    failed_by_reason = list(
        tasks.filter(status=S.FAILED, finished_at__gte=week_ago)
        .order_by()
        .values("failure_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "failure_reason")[:8]
    )
    start = (now - timedelta(hours=hours - 1)).replace(minute=0, second=0, microsecond=0)
    per_hour: dict[tuple[datetime, str], int] = {}
    for hour, status, n in (
        tasks.filter(finished_at__gte=start)
        .order_by()
        .annotate(h=TruncHour("finished_at"))
        .values_list("h", "status")
        .annotate(n=Count("id"))
    ):
        per_hour[(hour, status)] = n
    buckets = []
    for i in range(hours):
        h = start + timedelta(hours=i)
        buckets.append(
            (
                h,
                per_hour.get((h, S.SUCCEEDED), 0),
                per_hour.get((h, S.FAILED), 0),
                per_hour.get((h, S.CANCELED), 0),
            )
        )
    peak = max([sum(b[1:]) for b in buckets] + [0])
    bars = [HourBar(h, ok, bad, gone, peak) for h, ok, bad, gone in buckets]
    day = tasks.filter(finished_at__gte=now - timedelta(hours=24)).order_by()
    day_counts = dict(day.values_list("status").annotate(n=Count("id")))
    finished_day = sum(day_counts.values())
    return {
        "counts": counts,
        "total": sum(counts.values()),
        "running": counts.get(S.RUNNING, 0),
        "queued": counts.get(S.CREATED, 0),
        "waiting": waiting,
        "waiting_total": sum(w["count"] for w in waiting),
        "failed_by_reason": failed_by_reason,
        "failed_week": sum(r["n"] for r in failed_by_reason),
        "bars": bars,
        "bars_peak": peak,
        "finished_hour": tasks.filter(finished_at__gte=now - timedelta(hours=1)).count(),
        "finished_day": finished_day,
        "succeeded_day": day_counts.get(S.SUCCEEDED, 0),
        "success_rate_day": (
            round(100 * day_counts.get(S.SUCCEEDED, 0) / finished_day) if finished_day else None
        ),
        "attention": list(
            tasks.filter(status__in=WAITING).select_related("agent").order_by("updated_at")[:8]
        ),
        "recent_failures": list(
            tasks.filter(status=S.FAILED).select_related("agent").order_by("-finished_at")[:5]
        ),
        "spend": spend_summary(tenant_id, today=now.date()),
        "quota": quota_summary(tenant_id),
    }


@dataclass(frozen=True)
class SpendRow:
    label: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: str  # dollars, exact


def spend_summary(tenant_id: int, *, today: date, days: int = 7) -> dict[str, Any]:
    """The tenant's model spend from the daily rollup (UTC days): each of the last
    `days` days, and today by agent and model."""
    since = today - timedelta(days=days - 1)
    rows = (DailySpend.objects.filter(tenant_id=tenant_id, day__gte=since)
            .exclude(agent__startswith=EVALUATION_AGENT_PREFIX).order_by())
    sums = {"calls": Sum("calls"), "input": Sum("input_tokens"), "output": Sum("output_tokens"),
            "cost": Sum("cost_pico")}
    per_day: dict[date, Any] = {r["day"]: r for r in rows.values("day").annotate(**sums)}

    def row(label: str, r: Any) -> SpendRow:
        r = r or {}
        return SpendRow(label, int(r.get("calls") or 0), int(r.get("input") or 0),
                        int(r.get("output") or 0), pico_text(int(r.get("cost") or 0)))

    by_day = [row(d.isoformat(), per_day.get(d)) for d in
              (today - timedelta(days=i) for i in range(days))]
    todays: list[Any] = list(rows.filter(day=today).values("agent", "model").annotate(**sums))
    todays.sort(key=lambda r: (-int(r["cost"] or 0), r["agent"], r["model"]))
    today_rows = [row(f"{r['agent']} · {r['model']}", r) for r in todays[:10]]
    week = sum(int(r.get("cost") or 0) for r in per_day.values())
    return {"today": by_day[0].cost, "week": pico_text(week), "by_day": by_day,
            "today_by_agent": today_rows}


# --- the task page -----------------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    step: Step
    ledger: ToolExecution | None
    cites: tuple[CiteChip, ...] = ()

    @property
    def rev(self) -> str:
        """Changes whenever anything shown for the step changes (live merge key)."""
        s = self.step
        ledger_rev = self.ledger.updated_at.isoformat() if self.ledger else ""
        done = s.finished_at.isoformat() if s.finished_at else ""
        return f"{s.status}|{s.attempt}|{done}|{ledger_rev}|{bool(s.late_output)}"

    @property
    def model_log(self) -> dict[str, Any]:
        return dict(self.step.model_log or {})

    @property
    def memory(self) -> tuple[tuple[CiteChip, bool], ...]:
        """The memory items the model was shown, each with whether it was cited."""
        return memory_shown(self.model_log, (self.step.decision or {}).get("cites"))

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return list(self.ledger.attempts or []) if self.ledger else []


def events_page(
    task_id: int, *, after: int = 0, before: int | None = None, limit: int = TIMELINE_PAGE
) -> tuple[list[EventView], bool]:
    """Events of a task as timeline rows, oldest first, and whether more exist
    (earlier ones when paging back with `before`, later ones otherwise)."""
    qs = Event.objects.filter(task_id=task_id)
    if before is not None:
        rows = list(qs.filter(id__lt=before).order_by("-id")[: limit + 1])
        more = len(rows) > limit
        return [present_event(e) for e in reversed(rows[:limit])], more
    rows = list(qs.filter(id__gt=after).order_by("id")[: limit + 1])
    return [present_event(e) for e in rows[:limit]], len(rows) > limit


def latest_events(task_id: int, *, limit: int = TIMELINE_PAGE) -> tuple[list[EventView], bool]:
    """The last `limit` events, oldest first, and whether earlier ones exist."""
    rows = list(Event.objects.filter(task_id=task_id).order_by("-id")[: limit + 1])
    return [present_event(e) for e in reversed(rows[:limit])], len(rows) > limit


def step_views(task_id: int, *, limit: int = STEPS_SHOWN) -> tuple[list[StepView], int]:
    """The latest steps with their ledger rows, and how many steps there are in all."""
    total = Step.objects.filter(task_id=task_id).count()
    steps = list(Step.objects.filter(task_id=task_id).order_by("-step_no")[:limit])
    steps.reverse()
    resolve_steps(task_id, steps)
    keys = [s.idempotency_key for s in steps if s.idempotency_key]
    # by key only: a retry's inherited or reused keys have the original task's rows
    rows = list(ToolExecution.objects.filter(idempotency_key__in=keys))
    resolve_ledger(rows)
    ledger = {row.idempotency_key: row for row in rows}
    shown = frozenset(s.step_no for s in steps)
    versions = (
        frozenset(ContextSummary.objects.filter(task_id=task_id).values_list("version", flat=True))
        if any((s.decision or {}).get("cites") for s in steps)
        else frozenset()
    )
    return [
        StepView(
            s,
            ledger.get(s.idempotency_key),
            cite_chips(
                (s.decision or {}).get("cites") or (), step_nos=shown, summary_versions=versions
            ),
        )
        for s in steps
    ], total


def children_of(task: Task, *, limit: int = CHILDREN_SHOWN) -> dict[str, Any]:
    """The task's child tasks, oldest first: {children, children_total}."""
    children = list(Task.objects.filter(parent_id=task.pk).order_by("id")
                    .only("id", "goal", "status", "parent_step_no")[:limit])
    total = (len(children) if len(children) < limit
             else Task.objects.filter(parent_id=task.pk).count())
    return {"children": children, "children_total": total}


# --- the task page: context summaries ----------------------------------------------------

SUMMARY_METHODS = {
    "summarizer:deterministic": "deterministic digest",
    "summarizer:model": "written by the model",
}


@dataclass(frozen=True)
class SummaryView:
    """One summary version as the task page shows it. `events` pairs each event
    id the version covers with whether that event's row is on the page."""

    version: int
    text: str
    covers_until_step: int
    created_at: datetime | None
    created_by: str
    active: bool
    in_use: bool
    events: tuple[tuple[int, bool], ...]
    fact_check: dict[str, Any] = field(default_factory=dict)  # `context.fact_check`'s record
    pinned_facts: tuple[dict[str, Any], ...] = ()

    @property
    def refused(self) -> dict[str, Any] | None:
        """The model's summary this version refused (it dropped facts), if any."""
        refused = self.fact_check.get("refused")
        return refused if isinstance(refused, dict) else None

    @property
    def method(self) -> str:
        return SUMMARY_METHODS.get(self.created_by, self.created_by)

    @property
    def state(self) -> str:
        """in_use; superseded (folded into the newer one in use); rolled_back."""
        if self.in_use:
            return "in_use"
        return "superseded" if self.active else "rolled_back"

    @property
    def linked(self) -> int:
        return sum(1 for _, on_page in self.events if on_page)


def summary_views(task_id: int, tenant_id: int, *, first_on_page: int,
                  limit: int | None = SUMMARIES_SHOWN) -> list[SummaryView]:
    """The task's newest summary versions (and the one in use), newest first. An
    event is on the page when its id is at least `first_on_page` (0: the whole
    timeline is shown)."""
    return [
        SummaryView(
            version=row["version"],
            text=row["text"],
            covers_until_step=row["covers_until_step"],
            created_at=row["created_at"],
            created_by=row["created_by"],
            active=row["active"],
            in_use=row["in_use"],
            events=tuple((int(i), int(i) >= first_on_page) for i in row["event_ids"]),
            fact_check=row["fact_check"],
            pinned_facts=tuple(row["pinned_facts"]),
        )
        for row in summary_list(task_id=task_id, tenant_id=tenant_id, limit=limit)
    ]


def summaries_key(views: list[SummaryView]) -> str:
    """Changes whenever anything the summaries card shows changes (live refresh)."""
    return ",".join(
        f"{v.version}{'u' if v.in_use else 'a' if v.active else 'r'}{v.linked}" for v in views
    )
