"""Agent profiles: create and update, every field checked before it is stored.

A profile names the tools its agent may call; each must be a tool of the
same tenant (another tenant's tool cannot be used), or `agent:<name>`, another
agent of the tenant that does not call this one back, even through others
(`services.children`). Per-tool limits may name
only those tools. The `model` settings are checked by the gateway's own
`model_settings_errors`, so the API, the console and the runner agree on
them; the key a model names must be a secret of the same tenant
(`api_key_secret`) or an environment variable the operator granted it
(`api_key_env`, see `accounts_app.vault.grants`). Tasks copy their profile at
submission: an update never changes a task that is already under way. Names
that are console routes (`new`) are reserved. Every change is an audit entry
(`audit_app`) in the change's transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from accounts_app.models import Tenant
from accounts_app.selectors import missing_secret_names
from accounts_app.vault.grants import env_granted, not_granted_message
from accounts_app.vault.references import model_env_names, model_secret_names
from audit_app.services import audit_record
from foundations.actors import SYSTEM, Actor
from foundations.named_resources import NamedResource, model_field_errors
from tools_app.models import Tool
from tools_app.schemas import check_schema

from ..gateway.model_settings import model_settings_errors
from ..models import AgentProfile, MemoryPolicy, OnExhaustion
from ..pricing import MAX_BUDGET, money, money_problem
from .agent_versions import version_record
from .children import agent_cycle_errors, is_agent_tool
from .completion_checks import completion_check_errors
from .release_gates import gate_errors

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# Names a profile cannot take: its console page would be a route (`/agents/new/`).
RESERVED_NAMES = frozenset({"new"})
MAX_INT = 2**31 - 1
BUDGET_FIELDS = (
    "max_steps",
    "max_model_calls",
    "max_tool_calls",
    "max_tokens",
    "max_duration_s",
    "max_concurrent_tasks",
)
EDITABLE = (
    "description",
    "model",
    "tools",
    *BUDGET_FIELDS,
    "max_cost",
    "per_tool",
    "on_exhaustion",
    "no_progress_repeats",
    "no_progress_window",
    "approval_sla_s",
    "approval_on_expiry",
    "allow_self_approval",
    "result_schema",
    "memory_policy",
    "completion_checks",
    "max_completion_attempts",
    "min_confidence",
    "enabled",
    "published",
    "release_gate",  # not the version's configuration: what a candidate must pass
)


def agent_create(
    *, tenant_id: int, name: str, actor: Actor = SYSTEM, **fields: Any
) -> AgentProfile:
    """Create a profile; its configuration is version 1, current at once."""
    return AGENTS.create(tenant_id=tenant_id, name=name, fields=fields, actor=actor,
                         on_save=lambda agent: version_record(agent=agent, actor=actor))


def agent_update(
    *, tenant_id: int, name: str, changes: dict[str, Any], actor: Actor = SYSTEM
) -> AgentProfile:
    """Change some fields; the merged profile is checked as a whole. A changed
    configuration is recorded as the next version, which new tasks get once it
    is released or promoted (`services.releases`)."""
    return AGENTS.update(tenant_id=tenant_id, name=name, changes=changes, actor=actor,
                         on_save=lambda agent: version_record(agent=agent, actor=actor))


def agent_audited(agent: AgentProfile) -> dict[str, Any]:
    """A profile as the audit log shows it: its configuration, description and
    switch, and which versions new tasks get."""
    return {**agent.snapshot(), "description": agent.description, "enabled": agent.enabled,
            "published": agent.published, "current_version": agent.current_version,
            "latest_version": agent.latest_version,
            "release_gate": dict(agent.release_gate or {}),
            "release": None if agent.release_candidate is None else {
                "candidate": agent.release_candidate, "percent": agent.release_percent}}


def agent_audit(agent: AgentProfile, *, actor: Actor, action: str,
                before: dict[str, Any] | None) -> None:
    """The audit entry of a change to `agent` (as it now stands), in the caller's
    transaction. The row is re-read for the version fields `version_record` wrote."""
    agent.refresh_from_db(fields=["current_version", "latest_version", "release_candidate",
                                  "release_percent"])
    audit_record(actor=actor, tenant_id=agent.tenant_id, kind="agent", name=agent.name,
                 action=action, before=before, after=agent_audited(agent), object_id=agent.pk)


AddError = Callable[[str, str], None]


def agent_errors(agent: AgentProfile) -> dict[str, list[str]]:
    """Field errors of a profile as a whole (empty when it may be stored): its
    model and keys, its tools, its budgets, its policies, what its answer must
    be. Normalises the cost budget and the empty defaults on `agent` as it goes."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    for field, messages in model_settings_errors(agent.model).items():
        key = field if field == "model" else f"model.{field}"
        errors.setdefault(key, []).extend(messages)
    _key_reference_errors(agent, errors)
    for message in gate_errors(agent.release_gate):
        add("release_gate", message)
    tools = _tools_errors(agent, add)
    _budget_errors(agent, tools, add)
    _policy_errors(agent, add)
    _answer_errors(agent, errors)
    return errors or model_field_errors(agent)


def _tools_errors(agent: AgentProfile, add: AddError) -> list[str]:
    """Its tools: registered in the tenant, or agents that never call it back.
    Returns the tools as far as they are a list of names."""
    tools = agent.tools
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        add("tools", "a list of tool names")
        tools = []
    elif len(set(tools)) != len(tools):
        add("tools", "a tool is listed twice")
    known = set(
        Tool.objects.filter(tenant_id=agent.tenant_id, name__in=tools).values_list(
            "name", flat=True
        )
    )
    for missing in [t for t in tools if t not in known and not is_agent_tool(t)]:
        add("tools", f"no tool named {missing!r} in this tenant")
    # `agent:<name>`: another agent of the tenant, which never calls this one back
    for cycle in agent_cycle_errors(tenant_id=agent.tenant_id, name=agent.name, tools=tools):
        add("tools", cycle)
    return tools


def _budget_errors(agent: AgentProfile, tools: list[str], add: AddError) -> None:
    """The budgets: counts, the cost in dollars (or none), and calls per tool."""
    for field in BUDGET_FIELDS:
        value = getattr(agent, field)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
            add(f"budget.{field}", f"an integer from 1 to {MAX_INT}")
    if agent.max_cost is not None:  # dollars, or null for no cost budget
        if problem := money_problem(agent.max_cost, maximum=MAX_BUDGET):
            add("budget.max_cost", problem)
        elif money(agent.max_cost) == 0:  # would stop every task before its first call
            add("budget.max_cost", "more than 0 dollars, or null for no limit")
        else:
            agent.max_cost = money(agent.max_cost)
    per_tool = agent.per_tool
    if not isinstance(per_tool, dict):
        add("budget.per_tool", "an object {tool name: max calls}")
    else:
        for tool, limit in per_tool.items():
            if tool not in tools:
                add("budget.per_tool", f"{tool!r} is not one of this agent's tools")
            if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_INT:
                add("budget.per_tool", f"{tool}: an integer from 0 to {MAX_INT}")


def _policy_errors(agent: AgentProfile, add: AddError) -> None:
    """No progress, approvals' SLA and expiry, exhaustion, memory, and the flags."""
    for field in ("no_progress_repeats", "no_progress_window"):
        value = getattr(agent, field)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
            add(field, "an integer from 1 to 1000")
    sla = agent.approval_sla_s
    if isinstance(sla, bool) or not isinstance(sla, int) or not 0 <= sla <= MAX_INT:
        add("approval_sla_s", f"seconds, from 0 (no expiry) to {MAX_INT}")
    if agent.on_exhaustion not in OnExhaustion.values:
        add("on_exhaustion", f"one of {', '.join(OnExhaustion.values)}")
    if agent.memory_policy not in MemoryPolicy.values:
        add("memory_policy", f"one of {', '.join(MemoryPolicy.values)}")
    if agent.approval_on_expiry not in ("escalate", "reject"):
        add("approval_on_expiry", "escalate or reject")
    for flag in ("allow_self_approval", "enabled", "published"):
        if not isinstance(getattr(agent, flag), bool):
            add(flag, "true or false")


def _answer_errors(agent: AgentProfile, errors: dict[str, list[str]]) -> None:
    """What its final answer must be: the result's schema, the completion checks."""
    if agent.result_schema not in ({}, None):
        problems = check_schema(agent.result_schema)
        if problems:
            errors["result_schema"] = problems
    if agent.result_schema is None:
        agent.result_schema = {}
    for field, messages in completion_check_errors(
            agent.tenant_id, agent.completion_checks, agent.max_completion_attempts,
            agent.min_confidence).items():
        errors.setdefault(field, []).extend(messages)
    if agent.completion_checks is None:
        agent.completion_checks = []


def _key_reference_errors(agent: AgentProfile, errors: dict[str, list[str]]) -> None:
    """The model's keys: secrets of the agent's own tenant, variables granted to it."""
    secrets = {f"model.{f}": n for f, n in model_secret_names(agent.model).items()
               if f"model.{f}" not in errors}
    missing = set(missing_secret_names(agent.tenant_id, set(secrets.values())))
    for field, name in secrets.items():
        if name in missing:
            errors.setdefault(field, []).append(f"no secret named {name!r} in this tenant")
    envs = {f"model.{f}": n for f, n in model_env_names(agent.model).items()
            if f"model.{f}" not in errors}
    if envs:
        tenant = Tenant.objects.filter(pk=agent.tenant_id).values_list("name", flat=True).first()
        for field, name in envs.items():
            if not env_granted(name, tenant=tenant or ""):
                errors.setdefault(field, []).append(not_granted_message(name))


AGENTS = NamedResource(
    model=AgentProfile, noun="agent", article="an", editable=EDITABLE, errors=agent_errors,
    audit=agent_audit, audited=agent_audited, name_pattern=NAME,
    name_rule="letters, digits, _ and - (max 64)", reserved=RESERVED_NAMES,
    rename_hint="create a new profile instead",
)
