"""A frozen view of a task, read once per step; policy, budgets and progress
checks are pure functions of it. A read of the task, below the runner that
takes it and the context builder that reads it (the layers in pyproject.toml)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import Task
from .payloads import resolve_task


@dataclass(frozen=True)
class TaskSnapshot:
    id: int
    tenant_id: int
    requester_id: int | None
    trace_id: str
    status: str
    version: int
    goal: str
    input: dict[str, Any]
    script: tuple[Any, ...] | None
    agent: dict[str, Any]
    steps_count: int
    model_calls: int
    tool_calls: int
    tokens: int
    per_tool: dict[str, int]
    budget_extension: dict[str, Any]  # {budget name: n, "per_tool": {tool: n}}
    last_call_hash: str
    repeat_count: int
    stale_steps: int
    started_at: datetime | None
    deadline_at: datetime | None
    key_lineage: int | None = None  # the root of its retry chain (`retries.lineage`)
    cost_pico: int = 0  # spent on model calls so far (`tasks_app.pricing`)
    subject: str = ""  # who the task is about ("" for none): its memory scope
    agent_id: int | None = None  # its profile (None: a workflow run)
    shadow_of: int | None = None  # an evaluation run: the recorded task it replays
    shadow_live_reads: bool = False
    api_key_id: int | None = None  # the key that submitted it: its scope narrows the requester's

    @classmethod
    def of(cls, task: Task) -> TaskSnapshot:
        resolve_task(task)  # an input stored out of row, read back (no query for any other)
        return cls(
            id=task.pk,
            tenant_id=task.tenant_id,
            requester_id=task.requester_id,
            trace_id=task.trace_id,
            status=task.status,
            version=task.version,
            goal=task.goal,
            input=dict(task.input or {}),
            script=tuple(task.script) if task.script is not None else None,
            agent=dict(task.agent_snapshot or {}),
            steps_count=task.steps_count,
            model_calls=task.model_calls,
            tool_calls=task.tool_calls,
            tokens=task.tokens,
            per_tool=dict(task.per_tool or {}),
            budget_extension=dict(task.budget_extension or {}),
            last_call_hash=task.last_call_hash,
            repeat_count=task.repeat_count,
            stale_steps=task.stale_steps,
            started_at=task.started_at,
            deadline_at=task.deadline_at,
            key_lineage=task.key_lineage,
            cost_pico=task.cost_pico,
            subject=task.subject,
            agent_id=task.agent_id,
            shadow_of=task.shadow_of,
            shadow_live_reads=task.shadow_live_reads,
            api_key_id=task.api_key_id,
        )

    @property
    def is_retry(self) -> bool:
        """A retry of another task (its chain's root is another task)."""
        return self.key_lineage is not None and self.key_lineage != self.id

    def limit(self, name: str) -> int:
        base = int((self.agent.get("budget") or {}).get(name) or 0)
        return base + int(self.budget_extension.get(name) or 0)

    @property
    def on_exhaustion(self) -> str:
        return self.agent.get("on_exhaustion", "fail")
