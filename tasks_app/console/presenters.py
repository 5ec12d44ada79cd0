"""Turning rows into what the console shows: event titles and tones, status
tones, budget meters, "what is it waiting for". Pure functions of their inputs;
the templates escape everything these return (model and tool text included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from ..context.refs import parse_cite
from ..machine import TaskStatus
from ..pricing import money, pico_text

S = TaskStatus

STATUS_LABELS: dict[str, str] = {
    S.CREATED: "Queued",
    S.RUNNING: "Running",
    S.WAITING_FOR_INPUT: "Waiting for input",
    S.WAITING_FOR_APPROVAL: "Waiting for approval",
    S.WAITING_FOR_RECONCILIATION: "Waiting for reconciliation",
    S.WAITING_FOR_HUMAN: "Escalated",
    S.SUCCEEDED: "Succeeded",
    S.FAILED: "Failed",
    S.CANCELED: "Canceled",
}

WAITING_LABELS: dict[str, str] = {
    S.WAITING_FOR_INPUT: "an answer to its question",
    S.WAITING_FOR_APPROVAL: "a reviewer's approval",
    S.WAITING_FOR_RECONCILIATION: "a reviewer to reconcile an uncertain tool result",
    S.WAITING_FOR_HUMAN: "an operator: it was escalated",
}

TONE_OF_EVENT = {
    "task_created": "neutral",
    "task_started": "info",
    "decision_recorded": "info",
    "step_succeeded": "success",
    "need_input": "warning",
    "input_received": "info",
    "need_approval": "warning",
    "approval_granted": "success",
    "approval_rejected": "danger",
    "retryable_error": "warning",
    "result_uncertain": "warning",
    "reconciled": "info",
    "escalated": "warning",
    "resumed": "info",
    "final_accepted": "success",
    "fatal_error": "danger",
    "budget_exhausted": "danger",
    "deadline_exceeded": "danger",
    "task_canceled": "neutral",
    "invalid_decision": "danger",
    "result_discarded": "neutral",
    "context_summarized": "neutral",
    "summary_rolled_back": "info",
    "breaker_opened": "danger",
    "breaker_waiting": "warning",
    "breaker_closed": "success",
    "rate_limit_waiting": "warning",
    "memory_written": "info",
    "memory_proposed": "warning",
    "memory_accepted": "success",
    "memory_rejected": "neutral",
    "completion_check": "info",
    "model_refused": "warning",
}


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, status)


def _short(value: Any, limit: int = 140) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class EventView:
    id: int
    type: str
    title: str
    detail: str
    tone: str
    actor: str
    actor_role: str
    task_version: int
    created_at: datetime | None
    payload: dict[str, Any]

    @property
    def by_person(self) -> bool:
        return self.actor_role not in ("", "system")

    @property
    def actor_display(self) -> str:
        """Workers are named host:pid:nonce; the timeline only needs "worker"."""
        return "worker" if self.actor.startswith("worker:") else self.actor


def present_event(event: Any) -> EventView:
    """An `Event` row as one line of the timeline."""
    p: dict[str, Any] = dict(event.payload or {})
    title, detail = _describe(event.type, p, event.actor)
    tone = TONE_OF_EVENT.get(event.type, "neutral")
    if event.type == "step_succeeded" and p.get("step_status") == "FAILED":
        tone = "danger"
    return EventView(
        id=event.pk,
        type=event.type,
        title=title,
        detail=detail,
        tone=tone,
        actor=event.actor,
        actor_role=event.actor_role,
        task_version=event.task_version,
        created_at=event.created_at,
        payload=p,
    )


Line = tuple[str, str]  # (title, detail) of an event on the timeline


def _describe(kind: str, p: dict[str, Any], actor: str) -> Line:
    """An event's title and detail, written by the family its kind belongs to."""
    step = f"Step {p['step_no']}" if p.get("step_no") else "Step"
    family = _FAMILIES.get(kind) or (_limit_line if kind.startswith("breaker_") else None)
    if family is None:
        return kind.replace("_", " ").capitalize(), ""
    return family(kind, p, actor, step)


def _lifecycle_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """The task's own life: created, started, escalated, resumed, finished, canceled."""
    if kind == "task_created":
        return "Task created", _short(p.get("goal", ""))
    if kind == "task_started":
        return "Started", "admitted to run"
    if kind == "escalated":
        return "Escalated to an operator", str(p.get("reason", "")).replace("_", " ")
    if kind == "resumed":
        extend = p.get("extend") or {}
        more = ", ".join(f"{k.replace('max_', '')} +{v}" for k, v in extend.items())
        return f"Resumed by {actor}", more or _short(p.get("comment", ""))
    if kind == "final_accepted":
        return "Finished: result accepted", ""
    if kind == "task_canceled":
        return f"Canceled by {actor}", _short(p.get("reason", ""))
    # fatal_error, budget_exhausted, deadline_exceeded
    reason = str(p.get("reason") or kind).replace("_", " ")
    return f"Failed: {reason}", _short(p.get("comment") or "")


def _step_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """A step's tool call: decided, its result, a retry, an uncertain or discarded result."""
    tool = p.get("tool") or ""
    if kind == "decision_recorded":
        return f"{step}: decided to call {tool}", _short(p.get("reason") or "")
    if kind == "step_succeeded":
        ms = f" in {p['latency_ms']} ms" if p.get("latency_ms") is not None else ""
        cached = " (from the ledger)" if p.get("from_ledger") else ""
        if p.get("step_status") == "FAILED":
            err = p.get("error") or {}
            return f"{step}: {tool} returned an error{ms}", _short(err.get("message", ""))
        return f"{step}: {tool} succeeded{ms}{cached}", ""
    if kind == "retryable_error":
        delay = p.get("delay_s")
        when = f" in {delay:.2f} s" if isinstance(delay, int | float) else ""
        return f"{step}: retrying (attempt {p.get('attempt')}){when}", _short(
            (p.get("error") or {}).get("message", "")
        )
    if kind == "result_uncertain":
        answer = (p.get("status_answer") or {}).get("state", "no answer")
        return f"{step}: outcome of {tool} is uncertain", f"status query: {answer}"
    if kind == "invalid_decision":
        err = p.get("error") or {}
        return f"{step}: invalid model output", _short(err.get("message", ""))
    # result_discarded
    return f"{step}: a late result was discarded", str(p.get("reason", "")).replace("_", " ")


def _human_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """A question or an approval asked, and the person's answer or decision."""
    tool = p.get("tool") or ""
    if kind == "need_input":
        return f"{step}: asked a question", _short(p.get("question", ""))
    if kind == "input_received":
        return f"Answered by {actor}", _short(p.get("answer", ""))
    if kind == "need_approval":
        return f"{step}: {tool} needs approval", ""
    if kind == "approval_granted":
        verb = "Responded with a result" if p.get("decision") == "respond" else "Approved"
        edited = " (arguments edited)" if p.get("args_diff") else ""
        return f"{verb} by {actor}{edited}", _short(p.get("comment", ""))
    if kind == "approval_rejected":
        if p.get("decision") == "expired":
            return "Approval expired", ""
        return f"Rejected by {actor}", _short(p.get("comment", ""))
    # reconciled
    return f"Reconciled by {actor}: {p.get('outcome', '')}", _short(p.get("comment", ""))


def _context_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """The context's summaries: one written, or rolled back by an operator."""
    if kind == "context_summarized":
        return (
            f"Context summarized into v{p.get('version')}",
            f"steps 1-{p.get('covers_until_step')}, {p.get('method', '')}".rstrip(", "),
        )
    to = p.get("to_version")
    where = f"to v{to}" if to else "(all summaries dropped)"
    return f"Summary rolled back {where} by {actor}", _short(p.get("comment") or "")


def _limit_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """Waits on the outside: a breaker's states, a rate limit."""
    if kind.startswith("breaker_"):
        return _breaker_summary(kind, p)
    until = str(p.get("until") or "")[11:19]  # HH:MM:SS of the ISO time (UTC)
    detail = f"expected wait {float(p.get('wait_s') or 0):.1f} s"
    return (f"Waiting for rate limit of {p.get('kind', '')} {p.get('name', '')}",
            f"{detail}, until {until} UTC" if until else detail)


def _memory_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """Memory writes: saved, proposed, and a reviewer's decision on a proposal."""
    if kind == "memory_written":
        return (f"{step}: saved to memory as {p.get('item', '')}",
                f"{p.get('kind')}, {p.get('scope')}")
    if kind == "memory_proposed":
        return (f"{step}: proposed a memory write (#{p.get('proposal')})",
                f"{p.get('kind')}, {p.get('scope')}; a reviewer decides")
    if kind == "memory_accepted":
        return f"Memory write #{p.get('proposal')} accepted by {actor}", str(p.get("item", ""))
    return f"Memory write #{p.get('proposal')} rejected by {actor}", _short(p.get("note", ""))


def _answer_line(kind: str, p: dict[str, Any], actor: str, step: str) -> Line:
    """What came of the model's answer: a completion check, a refusal."""
    if kind == "completion_check":
        verdict = "passed" if p.get("passed") else "failed"
        return (f"{step}: completion check {p.get('check')} of {p.get('of')} {verdict} "
                f"(answer {p.get('attempt')})",
                _short(f"{p.get('tool', '')}: {p.get('reason', '')}"))
    went = {"fallback": "sent to the fallback model", "again": "asked again",
            "person": "escalated to a person"}.get(str(p.get("then")), "")
    return (f"The model refused to answer ({p.get('reason', '')})",
            f"{p.get('model', '')}; {went}")


_FAMILIES: dict[str, Callable[[str, dict[str, Any], str, str], Line]] = {
    **dict.fromkeys(("task_created", "task_started", "escalated", "resumed", "final_accepted",
                     "fatal_error", "budget_exhausted", "deadline_exceeded", "task_canceled"),
                    _lifecycle_line),
    **dict.fromkeys(("decision_recorded", "step_succeeded", "retryable_error",
                     "result_uncertain", "invalid_decision", "result_discarded"), _step_line),
    **dict.fromkeys(("need_input", "input_received", "need_approval", "approval_granted",
                     "approval_rejected", "reconciled"), _human_line),
    **dict.fromkeys(("context_summarized", "summary_rolled_back"), _context_line),
    "rate_limit_waiting": _limit_line,
    **dict.fromkeys(("memory_written", "memory_proposed", "memory_accepted", "memory_rejected"),
                    _memory_line),
    **dict.fromkeys(("completion_check", "model_refused"), _answer_line),
}


def _breaker_summary(kind: str, p: dict[str, Any]) -> tuple[str, str]:
    what = f"{p.get('kind', '')} {p.get('name', '')}".strip()
    until = str(p.get("until") or "")[11:19]  # HH:MM:SS of the ISO time (UTC)
    if kind == "breaker_opened":
        again = "opened again (the probe failed)" if p.get("reopened") else "opened"
        return f"Breaker of {what} {again}", f"until {until} UTC" if until else ""
    if kind == "breaker_waiting":
        return f"Waiting: breaker of {what} open", f"until {until} UTC" if until else ""
    return f"Breaker of {what} closed", "a probe succeeded; the task goes on"


@dataclass(frozen=True)
class Meter:
    label: str
    used: float | Decimal
    limit: float | Decimal | None
    unit: str = ""

    @property
    def percent(self) -> int:
        if not self.limit:
            return 0
        return max(0, min(100, int(round(100 * float(self.used) / float(self.limit)))))

    @property
    def step_class(self) -> str:
        """A width class in 5% steps (no inline styles under our CSP)."""
        return f"w-{5 * round(self.percent / 5)}"

    @property
    def tone(self) -> str:
        if self.percent >= 90:
            return "danger"
        if self.percent >= 70:
            return "warning"
        return "ok"


def budget_meters(task: Any, *, now: datetime | None = None) -> list[Meter]:
    """Use against the task's frozen budget plus any extension granted on resume."""
    budget = dict((task.agent_snapshot or {}).get("budget") or {})
    ext = dict(task.budget_extension or {})

    def limit(key: str) -> float | None:
        base = budget.get(key)
        return None if base is None else base + ext.get(key, 0)

    meters = [
        Meter("Steps", task.steps_count, limit("max_steps")),
        Meter("Model calls", task.model_calls, limit("max_model_calls")),
        Meter("Tool calls", task.tool_calls, limit("max_tool_calls")),
        Meter("Tokens", task.tokens, limit("max_tokens")),
    ]
    if task.cost_pico or budget.get("max_cost") is not None:
        cap = money(budget.get("max_cost"))
        extra = money(ext.get("max_cost")) or Decimal(0)
        meters.append(Meter("Cost", Decimal(pico_text(task.cost_pico)),
                            None if cap is None else cap + extra, unit="USD"))
    if task.started_at:
        end = task.finished_at or now or timezone.now()
        meters.append(
            Meter(
                "Duration",
                int((end - task.started_at).total_seconds()),
                limit("max_duration_s"),
                unit="s",
            )
        )
    per_tool_limits = budget.get("per_tool") or {}
    for name, used in sorted((task.per_tool or {}).items()):
        meters.append(Meter(f"{name} calls", used, per_tool_limits.get(name)))
    return meters


def bar_class(value: int, peak: int) -> str:
    """A height class in 10% steps for the dashboard's throughput bars."""
    if not peak or not value:
        return "h-0"
    return f"h-{max(1, round(10 * value / peak))}"


# --- what a decision was based on ---------------------------------------------------------

CITES_SHOWN = 20
CITE_CHARS = 60


@dataclass(frozen=True)
class CiteChip:
    """One id a decision cites, as a chip: `href` is "" when it points at
    nothing shown on the page."""

    ref: str
    label: str
    title: str
    href: str = ""


def memory_chip(ref: str, item_id: int | None, version: int | None) -> CiteChip:
    """A memory item (`mem:<id>@<version>`), linked to its page in the Memory pages."""
    try:
        href = reverse("memory:memory-item", args=[item_id])
    except NoReverseMatch:  # memory's pages are not installed
        href = ""
    return CiteChip(ref, f"Memory #{item_id} v{version}", "a memory item", href)


def memory_shown(model_log: dict[str, Any], cites: Any) -> tuple[tuple[CiteChip, bool], ...]:
    """The memory items a model was shown for a decision (`memory_shown`, at most
    `CITES_SHOWN`), each with whether the decision cited it."""
    shown = model_log.get("memory_shown")
    if not isinstance(shown, list):
        return ()
    cited = {str(c) for c in cites} if isinstance(cites, list | tuple) else set()
    chips = []
    for raw in shown[:CITES_SHOWN]:
        cite = parse_cite(str(raw))
        if cite.kind == "mem":
            chips.append((memory_chip(str(raw), cite.number, cite.version), str(raw) in cited))
    return tuple(chips)


def cite_chips(
    cites: Any, *, step_nos: set[int] | frozenset[int], summary_versions: set[int] | frozenset[int]
) -> tuple[CiteChip, ...]:
    """The first `CITES_SHOWN` cites of a decision (`goal`, `input`, `answer:3`,
    `approval:5`, `summary:v2`, `step:4`), linked to the step or summary they
    name when it is on the page. Anything else is shown as given, shortened."""
    if not isinstance(cites, list | tuple):
        return ()
    chips = []
    for raw in cites[:CITES_SHOWN]:
        ref = _short(str(raw), CITE_CHARS)
        cite = parse_cite(str(raw))
        n = cite.number
        if cite.kind == "goal":
            chips.append(CiteChip(ref, "Goal", "the task's goal"))
        elif cite.kind == "input":
            chips.append(CiteChip(ref, "Input", "the task's input"))
        elif cite.kind == "step":
            href = f"#step-{n}" if n in step_nos else ""
            chips.append(CiteChip(ref, f"Step {n}", f"the result of step {n}", href))
        elif cite.kind == "summary":
            href = f"#summary-v{n}" if n in summary_versions else ""
            chips.append(CiteChip(ref, f"Summary v{n}", "a context summary", href))
        elif cite.kind == "answer":
            chips.append(CiteChip(ref, f"Answer #{n}", "a person's answer to a question"))
        elif cite.kind == "approval":
            chips.append(CiteChip(ref, f"Approval #{n}", "a reviewer's decision"))
        elif cite.kind == "mem":
            chips.append(memory_chip(ref, cite.number, cite.version))
        else:
            chips.append(CiteChip(ref, ref, "an id the model cited"))
    return tuple(chips)
