"""Builds what the model sees for one decision, reading O(window) rows.

Context = system prompt + pinned facts (goal, input, the result format,
answers, approvals and rejections, and the facts the summary in use pinned
verbatim: `fact:<n>`) + the latest active summary + the steps
after it verbatim (long tool results truncated, with a reference to the full
step) + the tool catalogue.

The verbatim part is the last W steps (`CONTEXT_WINDOW_STEPS`) plus the older
ones not summarized yet, at most `SUMMARY_THRESHOLD_STEPS` of them: once that
many pile up, `context.summaries` folds them into a new summary version, so
the window shrinks back to W. Every query here is bounded (a fixed number of
queries, each reading at most W + threshold rows): step 1,000 costs what step
10 costs.

Item ids a decision may cite: ``goal``, ``input``, ``result_schema``,
``answer:<question id>``, ``approval:<approval id>``, ``summary:v<version>``,
``step:<step no>``, and what registered sources add (`context.sources`: the
tenant's memory, ``mem:<id>@<version>``, for an agent whose `memory_policy` is
not `off`, within `TETHER_MEMORY_CONTEXT_TOKENS`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db.models import Case, IntegerField, TextField, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Length

from approvals_app.selectors import pinned_human_facts
from tools_app.executor.types import ToolSpec

from ..gateway.base import ContextItem, ContextSnapshot, ToolSpecView
from ..models import ContextSummary, Step
from ..payloads import REF, resolve_steps
from ..snapshot import TaskSnapshot
from .facts import pinned_text
from .sources import extra_items

MAX_PINNED_HUMAN_FACTS = 20
MAX_INPUT_CHARS = 8000
MAX_SAID_CHARS = 1000
CHARS_PER_TOKEN = 4  # the memory share's estimate: no tokenizer is loaded for it
MEMORY_WRITERS = frozenset({"propose", "auto"})


def context_limits() -> dict[str, int]:
    """Window, threshold and size settings, with defaults for older settings files."""
    cfg = settings.TETHER
    return {
        "window": int(cfg.get("CONTEXT_WINDOW_STEPS", 8)),
        "result_chars": int(cfg.get("CONTEXT_RESULT_CHARS", 2000)),
        "threshold_steps": int(cfg.get("SUMMARY_THRESHOLD_STEPS", 8)),
        "threshold_chars": int(cfg.get("SUMMARY_THRESHOLD_CHARS", 16000)),
        "summary_chars": int(cfg.get("SUMMARY_MAX_CHARS", 4000)),
    }


def _truncate(value: Any, limit: int, ref: str) -> Any:
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit], "full_result": ref, "size": len(text)}


def step_view(step: Step, *, limit: int) -> dict[str, Any]:
    """One step as the model sees it. `reply_of` (annotated by the query) links a
    step to the previous one when both came from the same model reply."""
    ref = f"step:{step.step_no}"
    view: dict[str, Any] = {"id": ref, "step_no": step.step_no, "kind": step.kind,
                            "status": step.status}
    reply_of = getattr(step, "reply_of", None)
    if reply_of not in (None, ""):
        view["reply_of"] = int(reply_of)
    decision = step.decision or {}
    if step.kind == "read":  # an original read back: bounded when read, shown whole
        limit = max(limit, int(settings.TETHER.get("READ_SOURCE_MAX_CHARS", 8000)) + 400)
    if step.kind in ("tool", "read"):
        view.update(tool=step.tool, args=_truncate(step.args, limit, ref))
        if decision.get("reason"):
            view["reason"] = str(decision["reason"])[:MAX_SAID_CHARS]
    elif step.kind == "ask":
        view["question"] = decision.get("question")
    elif step.kind == "memory":
        view["memory"] = decision.get("memory")
    elif step.kind == "final":  # a final answer a reviewer sent back (else the task ended)
        view["raw"] = json.dumps(decision.get("result"), default=str)[:MAX_SAID_CHARS]
    elif step.kind == "invalid":
        if step.tool:
            view["tool"] = step.tool
        if step.args:
            view["args"] = _truncate(step.args, limit, ref)
        if decision.get("raw"):
            view["raw"] = str(decision["raw"])[:MAX_SAID_CHARS]
        elif decision.get("kind") == "final":
            view["raw"] = json.dumps(decision.get("result"), default=str)[:MAX_SAID_CHARS]
    if step.output is not None:
        view["output"] = _truncate(step.output, limit, ref)
    if step.error is not None:
        view["error"] = _truncate(step.error, limit, ref)
    return view


def active_summary(task_id: int) -> ContextSummary | None:
    """The summary the context uses: the highest active version (one indexed row)."""
    return (
        ContextSummary.objects.filter(task_id=task_id, active=True)
        .defer("event_ids", "facts", "fact_check")
        .order_by("-version")
        .first()
    )


def recent_limit() -> int:
    """How many steps after the summary the context shows at most."""
    limits = context_limits()
    return limits["window"] + limits["threshold_steps"]


def step_chars() -> Any:
    """A step's size for the summary threshold: its output, error and arguments as
    text (an output stored out of row: its size, as the reference says)."""
    output = Case(When(output__has_key=REF, then=Cast(KT("output__size"), IntegerField())),
                  default=Length(Cast("output", TextField())))
    return (Coalesce(output, 0)
            + Coalesce(Length(Cast("error", TextField())), 0)
            + Coalesce(Length(Cast("args", TextField())), 0))


def recent_steps(task_id: int, *, after_step: int, limit: int) -> list[Step]:
    """The last `limit` steps after `after_step`, oldest first, without their
    (large) model logs, each with its size (`chars`)."""
    rows: list[Step] = list(
        Step.objects.filter(task_id=task_id, step_no__gt=after_step)
        .defer("model_log", "late_output")
        .annotate(reply_of=KT("model_log__from_reply_of_step"),
                  chars=step_chars())
        .order_by("-step_no")[:limit]
    )
    rows.reverse()
    resolve_steps(task_id, rows)  # the model sees a large output as any other, truncated
    return rows


@dataclass(frozen=True)
class ContextSources:
    """The rows a context is built from: a fixed number of bounded reads."""

    summary: ContextSummary | None
    recent: list[Step]
    human_facts: list[dict[str, Any]]

    @property
    def covered(self) -> int:
        """The step the active summary covers until (0 without a summary)."""
        return self.summary.covers_until_step if self.summary else 0

    def on_summary(self, summary: ContextSummary) -> ContextSources:
        """These sources once `summary` (a new version) is the active one: the
        steps it covers leave the verbatim part, as `gather` would read it."""
        recent = [s for s in self.recent if s.step_no > summary.covers_until_step]
        return replace(self, summary=summary, recent=recent)

    def with_step(self, step: Step) -> ContextSources:
        """These sources after `step` committed, as `gather` would read them then
        (the step's size measured as PostgreSQL prints its JSON, near enough)."""
        step.reply_of = (step.model_log or {}).get("from_reply_of_step")  # type: ignore[attr-defined]
        step.chars = sum(  # type: ignore[attr-defined]
            len(json.dumps(v, ensure_ascii=False, default=str))
            for v in (step.output, step.error, step.args) if v is not None)
        # in step order: the calls of one reply commit in the order they end
        recent = sorted([s for s in self.recent if s.step_no != step.step_no] + [step],
                        key=lambda s: s.step_no)
        return replace(self, recent=recent[-recent_limit():])


def gather(task_id: int, *, human_facts: list[dict[str, Any]] | None = None,
           steps_count: int | None = None, retry: bool = False) -> ContextSources:
    """Read what a context needs; `human_facts` already read are not read again.
    A task without steps has no summary, no steps and no human facts (each
    answer or approval belongs to a step): nothing is read for its first step.
    A retry (`retry`) keeps the human facts of the steps it inherited."""
    if steps_count == 0:
        return ContextSources(summary=None, recent=[], human_facts=[])
    summary_row = active_summary(task_id)
    recent = recent_steps(task_id, after_step=summary_row.covers_until_step if summary_row else 0,
                          limit=recent_limit())
    if human_facts is None:
        human_facts = pinned_human_facts(task_id=task_id, limit=MAX_PINNED_HUMAN_FACTS,
                                         retry=retry)
    return ContextSources(summary=summary_row, recent=recent, human_facts=human_facts)


def build_context(snap: TaskSnapshot, *, tools: dict[str, ToolSpec],
                  sources: ContextSources | None = None) -> ContextSnapshot:
    limits = context_limits()
    model = snap.agent.get("model") or {}

    sources = sources or gather(snap.id, retry=snap.is_retry)
    summary_row = sources.summary
    after_step = sources.covered
    recent = sources.recent

    pinned: list[ContextItem] = [
        ContextItem(id="goal", role="pinned", text=f"Goal: {snap.goal}"),
    ]
    if snap.input:
        text = json.dumps(snap.input, default=str)
        if len(text) > MAX_INPUT_CHARS:
            text = text[:MAX_INPUT_CHARS] + f"... [truncated, {len(text)} chars in all]"
        pinned.append(ContextItem(id="input", role="pinned", text=f"Input: {text}",
                                  data=snap.input))
    schema = snap.agent.get("result_schema") or {}
    if schema:
        pinned.append(ContextItem(
            id="result_schema", role="pinned", data=schema,
            text="The final answer must be a JSON object matching this JSON Schema: "
                 + json.dumps(schema, sort_keys=True)))
    for fact in sources.human_facts:
        pinned.append(ContextItem(id=fact["id"], role="pinned", text=fact["text"], data=fact))
    if recent and recent[0].step_no > after_step + 1:
        # After a summary rollback (or while the summarizer lags): the steps
        # between the summary and the window are shown again once summarized.
        pinned.append(ContextItem(
            id="omitted", role="pinned",
            text=f"Steps {after_step + 1}-{recent[0].step_no - 1} are not shown here "
                 "(not summarized yet)."))

    summary = None
    if summary_row is not None:
        for n, fact in enumerate(summary_row.pinned_facts or (), start=1):
            # facts no summary text kept: verbatim, with their source (`context.fact_check`)
            pinned.append(ContextItem(id=f"fact:{n}", role="pinned", text=pinned_text(fact),
                                      data=fact))
        summary = ContextItem(
            id=f"summary:v{summary_row.version}", role="summary", text=summary_row.text,
            data={"version": summary_row.version,
                  "covers_until_step": summary_row.covers_until_step},
        )

    policy = str(snap.agent.get("memory_policy") or "off")
    memory: tuple[ContextItem, ...] = ()
    if policy != "off":
        tokens = int(settings.TETHER.get("MEMORY_CONTEXT_TOKENS", 800))
        memory = extra_items(snap, budget_chars=tokens * CHARS_PER_TOKEN)

    window = tuple(step_view(s, limit=limits["result_chars"]) for s in recent)
    allowed = set(snap.agent.get("tools") or [])
    specs = tuple(
        ToolSpecView(name=s.name, description=s.description, args_schema=s.args_schema)
        for name, s in sorted(tools.items())
        if name in allowed
    )
    return ContextSnapshot(
        task_id=snap.id,
        trace_id=snap.trace_id,
        goal=snap.goal,
        model=model,
        system_prompt=str(model.get("system_prompt") or ""),
        pinned=tuple(pinned),
        summary=summary,
        window=window,
        tools=specs,
        model_calls_so_far=snap.model_calls,
        script=snap.script,
        memory=memory,
        offers=_offers(policy, summary=summary, memory=memory, window=window,
                       confidence=snap.agent.get("min_confidence") is not None),
    )


def _offers(policy: str, *, summary: ContextItem | None, memory: tuple[ContextItem, ...],
            window: tuple[dict[str, Any], ...], confidence: bool) -> tuple[str, ...]:
    """The built-in decisions offered besides `ask_user`: `remember` to an agent
    that may write memory; `read_source` when something shown is shortened
    (a summary, memory items, a truncated result) and can be read back; and
    `confidence` (a decision's `_confidence`) to an agent with `min_confidence`."""
    offers = ["remember"] if policy in MEMORY_WRITERS else []
    if summary is not None or memory or any(_is_truncated(v) for v in window):
        offers.append("read_source")
    if confidence:
        offers.append("confidence")
    return tuple(offers)


def _is_truncated(view: dict[str, Any]) -> bool:
    return any(isinstance(view.get(k), dict) and view[k].get("truncated")
               for k in ("args", "output", "error"))
