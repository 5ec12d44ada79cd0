"""The release gate's question to evaluations (registered with
`tasks_app.services.release_gates`): does a finished evaluation of this
candidate meet the gate? The latest finished one decides."""
from __future__ import annotations

from typing import Any

from tasks_app.models import AgentProfile

from ..models import Evaluation, EvaluationStatus


def candidate_refusal(agent: AgentProfile, candidate: int, gate: dict[str, Any]) -> str | None:
    latest = (Evaluation.objects.filter(agent=agent, candidate_version=candidate,
                                        status=EvaluationStatus.FINISHED)
              .order_by("-finished_at", "-id").first())
    if latest is None:
        return f"no finished evaluation of version {candidate}"
    summary = latest.summary or {}
    rate, ratio = summary.get("pass_rate", 0.0), summary.get("cost_ratio")
    minimum, maximum = gate.get("min_pass_rate"), gate.get("max_cost_ratio")
    if minimum is not None and rate < minimum:
        return f"evaluation {latest.pk} passed {rate:.0%} of its tasks, the gate asks {minimum:.0%}"
    if maximum is not None and (ratio is None or ratio > maximum):
        shown = "more (the baseline cost nothing)" if ratio is None else f"{ratio:g}x"
        return (f"evaluation {latest.pk} cost {shown} the baseline's, "
                f"the gate allows {maximum:g}x")
    return None
