"""Builds what the model sees for one decision, reading O(window) rows.

Context = system prompt + pinned facts (goal, input, answers, approvals and
rejections) + the latest active summary (citing the events it covers) + the
last W steps verbatim (long tool results truncated, with a reference to the
full step) + the tool catalogue. The cost of a step does not grow with the
length of the task's history: every query here is bounded.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from approvals_app.selectors import pinned_human_facts
from tools_app.executor.types import ToolSpec

from ..gateway.base import ContextItem, ContextSnapshot, ToolSpecView
from ..models import ContextSummary, Step
from ..runner.snapshot import TaskSnapshot

MAX_PINNED_HUMAN_FACTS = 20


def _truncate(value: Any, limit: int, ref: str) -> Any:
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit], "full_result": ref, "size": len(text)}


def step_view(step: Step, *, limit: int) -> dict[str, Any]:
    ref = f"step:{step.step_no}"
    view: dict[str, Any] = {"id": ref, "step_no": step.step_no, "kind": step.kind, "status": step.status}
    if step.kind == "tool":
        view.update(tool=step.tool, args=step.args)
    elif step.kind == "ask":
        view["question"] = step.decision.get("question")
    elif step.kind == "invalid":
        view["raw"] = str(step.decision.get("raw", ""))[:500]
    if step.output is not None:
        view["output"] = _truncate(step.output, limit, ref)
    if step.error is not None:
        view["error"] = _truncate(step.error, limit, ref)
    return view


def build_context(snap: TaskSnapshot, *, tools: dict[str, ToolSpec]) -> ContextSnapshot:
    cfg = settings.TETHER
    window = cfg["CONTEXT_WINDOW_STEPS"]
    limit = cfg["CONTEXT_RESULT_CHARS"]
    model = snap.agent.get("model") or {}

    summary_row = (
        ContextSummary.objects.filter(task_id=snap.id, active=True).order_by("-version").first()
    )
    after_step = summary_row.covers_until_step if summary_row else 0
    recent = list(
        Step.objects.filter(task_id=snap.id, step_no__gt=after_step)
        .order_by("-step_no")[:window]
    )
    recent.reverse()

    pinned: list[ContextItem] = [
        ContextItem(id="goal", role="pinned", text=f"Goal: {snap.goal}"),
    ]
    if snap.input:
        pinned.append(ContextItem(id="input", role="pinned",
                                  text=f"Input: {json.dumps(snap.input, default=str)}", data=snap.input))
    for fact in pinned_human_facts(task_id=snap.id, limit=MAX_PINNED_HUMAN_FACTS):
        pinned.append(ContextItem(id=fact["id"], role="pinned", text=fact["text"], data=fact))

    summary = None
    if summary_row is not None:
        summary = ContextItem(
            id=f"summary:v{summary_row.version}", role="summary", text=summary_row.text,
            data={"event_ids": summary_row.event_ids, "covers_until_step": summary_row.covers_until_step},
        )

    specs = tuple(
        ToolSpecView(name=s.name, description=s.description, args_schema=s.args_schema)
        for name, s in sorted(tools.items())
        if name in (snap.agent.get("tools") or [])
    )
    return ContextSnapshot(
        task_id=snap.id,
        trace_id=snap.trace_id,
        goal=snap.goal,
        model=model,
        system_prompt=str(model.get("system_prompt") or ""),
        pinned=tuple(pinned),
        summary=summary,
        window=tuple(step_view(s, limit=limit) for s in recent),
        tools=specs,
        model_calls_so_far=snap.model_calls,
        script=snap.script,
    )
