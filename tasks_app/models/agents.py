"""Agent profiles: model settings, allowed tools and the budget a task runs under.

A task copies its profile into `Task.agent_snapshot` when it is created, so
editing a profile never changes a task that is already under way. The row is
the latest saved configuration; which version new tasks get is
`current_version` (and a release, see `versions.py`).
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models

from accounts_app.models import Tenant

from ..pricing import money_text


class OnExhaustion(models.TextChoices):
    FAIL = "fail"
    ESCALATE = "escalate"


def default_model() -> dict[str, Any]:
    return {"backend": "scripted", "name": "scripted", "system_prompt": ""}


class MemoryPolicy(models.TextChoices):
    OFF = "off"
    READ = "read"
    PROPOSE = "propose"
    AUTO = "auto"


class AgentProfile(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=64)
    description = models.TextField(blank=True)
    # {backend, name, base_url, api_key_env, temperature, top_p, system_prompt,
    #  timeout_s, max_retries, fallback: {name, base_url, api_key_env}}
    model = models.JSONField(default=default_model)
    tools = models.JSONField(default=list, help_text="Names of the tools this agent may call.")
    max_steps = models.PositiveIntegerField(default=50)
    max_model_calls = models.PositiveIntegerField(default=60)
    max_tool_calls = models.PositiveIntegerField(default=50)
    max_tokens = models.PositiveIntegerField(default=200_000)
    max_duration_s = models.PositiveIntegerField(default=3600)
    per_tool = models.JSONField(default=dict, blank=True, help_text="{tool name: max calls}")
    max_concurrent_tasks = models.PositiveIntegerField(default=20)
    # dollars a task may spend on model calls (`tasks_app.pricing`); null: no limit
    max_cost = models.DecimalField(max_digits=16, decimal_places=6, null=True, blank=True)
    on_exhaustion = models.CharField(
        max_length=8, choices=OnExhaustion.choices, default=OnExhaustion.FAIL
    )
    no_progress_repeats = models.PositiveIntegerField(
        default=3, help_text="The same tool with the same arguments this many times in a row."
    )
    no_progress_window = models.PositiveIntegerField(
        default=6, help_text="This many steps in a row with no new observable result."
    )
    approval_sla_s = models.PositiveIntegerField(default=86400)
    approval_on_expiry = models.CharField(
        max_length=8, choices=[("escalate", "escalate"), ("reject", "reject")], default="escalate"
    )
    allow_self_approval = models.BooleanField(default=False)
    result_schema = models.JSONField(default=dict, blank=True)
    # What the agent does with the tenant's memory (memory_app): `off` (nothing),
    # `read` (sees it), `propose` (sees it; its writes wait for a reviewer), `auto`
    # (sees it; its writes are written at once).
    memory_policy = models.CharField(max_length=16, choices=MemoryPolicy.choices,
                                     default=MemoryPolicy.OFF, db_default=MemoryPolicy.OFF)
    # Outside checks of a final answer (`tasks_app.runner.completion`): read-only
    # tools of the tenant, each `{"tool", "args"}` (args: a template, `${ output.x }`
    # the answer, `${ inputs.y }` the task's input), all of which must answer
    # {"pass": true}; a failed check goes back to the model, at most
    # `max_completion_attempts` answers, then `on_exhaustion`.
    completion_checks = models.JSONField(default=list, blank=True, db_default=[])
    max_completion_attempts = models.PositiveSmallIntegerField(default=3, db_default=3)
    # A decision whose `confidence` (0..1, as the model gave it) is below this goes
    # to a person: a tool call as an approval, a final answer for review. Null: off.
    min_confidence = models.FloatField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    # An admin's choice: only published agents are visible to the open
    # protocols (A2A, MCP); not configuration, so not versioned.
    published = models.BooleanField(default=False, db_default=False)
    # Versions (`versions.AgentVersion`): what new tasks get, and a release in progress.
    current_version = models.PositiveIntegerField(default=0, help_text="0: not versioned yet.")
    latest_version = models.PositiveIntegerField(default=0)
    release_candidate = models.PositiveIntegerField(null=True, blank=True)
    release_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    # {min_pass_rate, max_cost_ratio}: a candidate is released or promoted only
    # with a finished evaluation that meets it (`services.release_gates`); {}: no gate.
    release_gate = models.JSONField(default=dict, blank=True, db_default={})
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agent_unique_name")]

    def __str__(self) -> str:
        return self.name

    def budget(self) -> dict[str, Any]:
        budget: dict[str, Any] = {
            "max_steps": self.max_steps,
            "max_model_calls": self.max_model_calls,
            "max_tool_calls": self.max_tool_calls,
            "max_tokens": self.max_tokens,
            "max_duration_s": self.max_duration_s,
            "per_tool": dict(self.per_tool or {}),
            "max_concurrent_tasks": self.max_concurrent_tasks,
        }
        if self.max_cost is not None:
            # dollars as canonical text (JSON has no exact decimals); absent when
            # unset, so profiles without a cost budget keep their versions' shape
            budget["max_cost"] = money_text(Decimal(self.max_cost))
        return budget

    def snapshot(self) -> dict[str, Any]:
        """Everything a task needs from its profile, frozen at submission."""
        return {
            "name": self.name,
            "model": dict(self.model or {}),
            "tools": list(self.tools or []),
            "budget": self.budget(),
            "on_exhaustion": self.on_exhaustion,
            "no_progress_repeats": self.no_progress_repeats,
            "no_progress_window": self.no_progress_window,
            "approval_sla_s": self.approval_sla_s,
            "approval_on_expiry": self.approval_on_expiry,
            "allow_self_approval": self.allow_self_approval,
            "result_schema": dict(self.result_schema or {}),
            # absent when off, so profiles without memory keep their versions' shape
            **({"memory_policy": self.memory_policy}
               if self.memory_policy != MemoryPolicy.OFF else {}),
            # the same for the guards (absent when unused)
            **({"completion_checks": list(self.completion_checks),
                "max_completion_attempts": self.max_completion_attempts}
               if self.completion_checks else {}),
            **({"min_confidence": self.min_confidence}
               if self.min_confidence is not None else {}),
        }
