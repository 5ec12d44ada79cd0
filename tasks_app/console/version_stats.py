"""Reads for the agents page: an agent's versions side by side on their tasks.

One grouped query per metric family, whatever the number of tasks: task
outcomes and usage from the task rows, the human loop (escalations, approvals,
questions, reconciliations opened) from the transition events that open them.
Per-task averages are over finished tasks, so a version still running many
tasks is not flattered by their partial counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Avg, Count, Q

from ..machine import NON_TERMINAL, TaskStatus
from ..models import AgentProfile, AgentVersion, Event, Task
from ..pricing import pico_text

# The transition event that opens each kind of human intervention.
HUMAN_EVENTS = {
    "need_approval": "approvals",
    "need_input": "questions",
    "result_uncertain": "reconciliations",
    "escalated": "escalations",
}


@dataclass
class VersionStats:
    number: int
    tasks: int = 0
    finished: int = 0
    succeeded: int = 0
    avg_steps: float | None = None
    avg_model_calls: float | None = None
    avg_tool_calls: float | None = None
    avg_tokens: float | None = None
    avg_cost_pico: float | None = None
    human: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HUMAN_EVENTS.values(), 0))

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None

    @property
    def cost_per_task(self) -> str | None:
        """Mean dollars per finished task (rounded to a whole pico-dollar)."""
        return None if self.avg_cost_pico is None else pico_text(round(self.avg_cost_pico))

    @property
    def interventions(self) -> int:
        return self.human["approvals"] + self.human["questions"] + self.human["reconciliations"]

    def per_task(self, count: int) -> float | None:
        return count / self.tasks if self.tasks else None

    @property
    def escalations_per_task(self) -> float | None:
        return self.per_task(self.human["escalations"])

    @property
    def interventions_per_task(self) -> float | None:
        return self.per_task(self.interventions)


def versions_compared(agent: AgentProfile, numbers: list[int]) -> list[VersionStats]:
    """Stats of the given versions of `agent` (in the order given)."""
    stats = {n: VersionStats(number=n) for n in numbers}
    finished = ~Q(status__in=NON_TERMINAL)
    rows = (
        Task.objects.filter(agent_id=agent.pk, agent_version__in=numbers)
        .values("agent_version")
        .annotate(
            tasks=Count("id"),
            finished=Count("id", filter=finished),
            succeeded=Count("id", filter=Q(status=TaskStatus.SUCCEEDED)),
            avg_steps=Avg("steps_count", filter=finished),
            avg_model_calls=Avg("model_calls", filter=finished),
            avg_tool_calls=Avg("tool_calls", filter=finished),
            avg_tokens=Avg("tokens", filter=finished),
            avg_cost_pico=Avg("cost_pico", filter=finished),
        )
    )
    for outcome in rows:
        number: int = outcome["agent_version"]  # type: ignore[assignment]
        s = stats[number]
        for key, value in outcome.items():
            if key != "agent_version":
                setattr(s, key, value)
    human = (
        Event.objects.filter(
            task__agent_id=agent.pk, task__agent_version__in=numbers, type__in=list(HUMAN_EVENTS)
        )
        .values("task__agent_version", "type")
        .annotate(n=Count("id"))
    )
    for opened in human:
        version: int = opened["task__agent_version"]  # type: ignore[assignment]
        stats[version].human[HUMAN_EVENTS[opened["type"]]] = opened["n"]
    return [stats[n] for n in numbers]


def default_pair(agent: AgentProfile) -> list[int]:
    """What to compare when nothing is chosen: current with the candidate, else
    with the latest saved version, else with the one before it."""
    current = agent.current_version
    other = agent.release_candidate or (
        agent.latest_version if agent.latest_version != current else current - 1
    )
    return [current, other] if other and other != current else [current]


def chosen_pair(agent: AgentProfile, raw: list[str]) -> list[int]:
    """The versions the page was asked to compare (existing ones, at most two, no
    repeats); the default pair when none is usable."""
    asked: list[int] = []
    for value in raw[:2]:
        if value.isdigit() and len(value) < 10 and int(value) not in asked:
            asked.append(int(value))
    known = set(
        AgentVersion.objects.filter(agent=agent, number__in=asked).values_list("number", flat=True)
    )
    picked = [n for n in asked if n in known]
    return picked or default_pair(agent)
