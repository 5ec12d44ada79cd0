"""Child tasks: an agent started by another task's tool step (`agent:<name>`,
an agent calling an agent, or a workflow's `agent` node).

A child is an ordinary task (its own timeline, approvals, budget and agent
version) with the parent's tenant and requester, linked to it by `parent`,
`parent_step_no` and `depth`. What this module holds, below the runner:

- the tool spec an `agent:<name>` entry of a tool list stands for
  (`specs_for`: the registry's specs, plus one per agent named), whose
  argument schema is `{goal, input}`;
- starting the child of a step, once (`child_for_step`): its submission key
  derives from the step's server-made idempotency key, so a resumed or re-run
  step finds the child it started, and a crash between the child's commit
  and anything else never makes a second one; refused (a business error to
  the parent, no child) past `MAX_DEPTH` or when the agent is the parent's
  own or an ancestor's;
- what the child's end means to its parent's step (`outcome_of`);
- what follows a task's end (`on_task_ended`, a store hook): its parent is
  woken at once, and its unfinished children are canceled (recursively, as
  each of them ends in turn); the recovery sweep cancels any child whose
  parent ended should that be lost (`children_sweep`);
- the registration check: a profile may not reach itself through the
  `agent:` tools of the agents it lists (`agent_cycle_errors`).
"""
from __future__ import annotations

import contextlib
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists
from django.utils import timezone

from foundations.actors import Actor
from foundations.errors import DomainError
from tools_app.executor.types import OutcomeKind, ToolOutcome, ToolSpec
from tools_app.registry import tool_specs
from tools_app.schemas import schema_errors

from ..keys import canonical_json, sha256_hex
from ..machine import NON_TERMINAL, TERMINAL, TaskStatus
from ..models import AgentProfile, Task
from ..payloads import resolve_task
from ..store.creation import task_create
from ..store.events import event_append
from .admission import admission_after_commit
from .agent_versions import version_for_submission
from .dispatch import schedule_advance
from .tasks import MAX_SCRIPT_ENTRIES, task_cancel

log = logging.getLogger(__name__)

AGENT_TOOL_PREFIX = "agent:"
AGENT_KIND = "agent"
# How deep children nest: a root task is depth 0, its children 1, and so on.
MAX_DEPTH = 4
GOAL_MAX = 4000
CHILD_ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "minLength": 1, "maxLength": GOAL_MAX,
                 "description": "What the agent is to achieve, in plain words."},
        "input": {"type": "object", "description": "The data it works on."},
    },
    "required": ["goal"],
    "additionalProperties": False,
}
ACTOR = Actor(name="parent-task", role="system")


def is_agent_tool(name: str) -> bool:
    return name.startswith(AGENT_TOOL_PREFIX)


def agent_tool(agent: str) -> str:
    return f"{AGENT_TOOL_PREFIX}{agent}"


def agent_of_tool(name: str) -> str:
    return name[len(AGENT_TOOL_PREFIX):]


def agent_spec(agent: str, description: str = "") -> ToolSpec:
    """The spec of `agent:<agent>`: starting a child task is an idempotent write
    (its key finds the child it started), never retried as a call: the child
    has its own retries."""
    text = description.strip() or f"the agent {agent!r}"
    return ToolSpec(
        name=agent_tool(agent), kind=AGENT_KIND, args_schema=CHILD_ARGS_SCHEMA,
        side_effect="idempotent_write", max_retries=0, risk="low",
        description=(f"Hand a sub-task to another agent ({text[:500]}) and get its final "
                     "result. `goal`: what it is to do; `input`: the data it needs. The "
                     "agent sees only these, not your conversation."))


def specs_for(*, tenant_id: int, names: list[str]) -> dict[str, ToolSpec]:
    """The specs of a tool list: the registry's tools, and a spec for each
    `agent:<name>` whose agent is an enabled profile of the tenant."""
    agents = [agent_of_tool(n) for n in names if is_agent_tool(n)]
    if not agents:
        return tool_specs(tenant_id=tenant_id, names=names)
    specs = tool_specs(tenant_id=tenant_id, names=[n for n in names if not is_agent_tool(n)])
    for name, description in AgentProfile.objects.filter(
            tenant_id=tenant_id, name__in=agents, enabled=True).values_list("name",
                                                                           "description"):
        specs[agent_tool(name)] = agent_spec(name, description)
    return specs


# --- starting a child ------------------------------------------------------------------


def child_key(step_key: str) -> str:
    """The child's submission key: derived from its parent step's server-made key."""
    return f"child:{step_key}"


def _refused(type_: str, message: str, **more: Any) -> ToolOutcome:
    return ToolOutcome(kind=OutcomeKind.BUSINESS, error={"type": type_, "message": message,
                                                         **more})


@dataclass(frozen=True)
class ParentStep:
    """What starting a child needs of its parent and the step that starts it."""

    task_id: int
    tenant_id: int
    requester_id: int | None
    trace_id: str
    version: int
    step_no: int
    step_key: str
    tool: str
    args: dict[str, Any]
    api_key_id: int | None = None  # the parent's key: the child runs within its scope too


def child_for_step(parent: ParentStep) -> Task | ToolOutcome:
    """The child the step started, or started now (CREATED: admission starts
    it); a business error when it may not be started (nothing written)."""
    key = child_key(parent.step_key)
    existing = _existing(parent, key)
    if existing is not None:
        return existing
    agent = agent_of_tool(parent.tool)
    problems = schema_errors(CHILD_ARGS_SCHEMA, parent.args)
    if problems:
        return _refused("invalid_arguments", f"{parent.tool} takes {{goal, input}}: "
                        + "; ".join(problems), errors=problems)
    row = Task.objects.only("id", "status", "depth", "parent_id", "agent_id", "subject").get(
        pk=parent.task_id)
    if row.status != TaskStatus.RUNNING:  # it ended meanwhile (this outcome is then fenced);
        # a child started in the instant after is canceled by the sweep (`children_sweep`)
        return _refused("parent_ended", f"the task ended ({row.status}): no child is started")
    if row.depth + 1 > MAX_DEPTH:
        return _refused("depth_exceeded", f"child tasks nest at most {MAX_DEPTH} deep; this "
                        f"task is at depth {row.depth}", max_depth=MAX_DEPTH)
    profile = AgentProfile.objects.filter(tenant_id=parent.tenant_id, name=agent).first()
    if profile is None or not profile.enabled:
        return _refused("agent_unavailable", f"no enabled agent named {agent!r}")
    if profile.pk in _ancestor_agents(row):
        return _refused("agent_cycle", f"the agent {agent!r} is this task's own or one of "
                        "its ancestors': an agent cannot call itself, even indirectly")
    trace_id = secrets.token_hex(16)
    version = version_for_submission(profile, salt=key)
    model = version.config.get("model") or {}
    script = None
    if model.get("backend", "scripted") == "scripted":
        script = model.get("script")
        if not isinstance(script, list) or len(script) > MAX_SCRIPT_ENTRIES:
            return _refused("agent_unavailable", f"the scripted agent {agent!r} has no "
                            "`model.script` for the tasks other tasks start")
    goal, input_ = parent.args["goal"], dict(parent.args.get("input") or {})
    try:
        with transaction.atomic():
            child = task_create(
                actor=ACTOR, agent_name=agent, tenant_id=parent.tenant_id,
                requester_id=parent.requester_id, api_key_id=parent.api_key_id, agent=profile,
                agent_snapshot=version.config, agent_version=version.number, goal=goal,
                input=input_, script=script, trace_id=trace_id, idempotency_key=key,
                request_hash=sha256_hex(canonical_json({"agent": agent, "goal": goal,
                                                        "input": input_})),
                parent_id=parent.task_id, parent_step_no=parent.step_no, depth=row.depth + 1,
                subject=row.subject)  # about whom its parent is: its memory too
            event_append(task_id=parent.task_id, tenant_id=parent.tenant_id,
                         trace_id=parent.trace_id, task_version=parent.version,
                         type="child_started", actor=ACTOR,
                         payload={"step_no": parent.step_no, "task": child.pk, "agent": agent,
                                  "agent_version": version.number})
            admission_after_commit()
    except IntegrityError:
        existing = _existing(parent, key)  # a concurrent pass on the same step won
        if existing is None:
            raise
        return existing
    return child


def _existing(parent: ParentStep, key: str) -> Task | ToolOutcome | None:
    found = Task.objects.filter(tenant_id=parent.tenant_id, idempotency_key=key).first()
    # A child of another task under this key: the same call of a retry chain,
    # whose steps share their keys (`retries.lineage`): its child is this one's.
    if found is not None and found.parent_id is None:
        return _refused("child_conflict", "a task that is not a child task holds this step's key",
                        task=found.pk)
    return found


def _ancestor_agents(task: Task) -> set[int]:
    """The agent of the task and of each of its ancestors (at most MAX_DEPTH reads)."""
    found: set[int] = set()
    current: Task | None = task
    for _ in range(MAX_DEPTH + 1):
        if current is None:
            break
        if current.agent_id is not None:
            found.add(current.agent_id)
        if current.parent_id is None:
            break
        current = Task.objects.only("id", "parent_id", "agent_id").filter(
            pk=current.parent_id).first()
    return found


def outcome_of(child: Task) -> ToolOutcome | None:
    """What the child's end is to its parent's step; None while it runs."""
    if child.status not in TERMINAL:
        return None
    if child.status == TaskStatus.SUCCEEDED:
        resolve_task(child)  # a result stored out of row
        return ToolOutcome(kind=OutcomeKind.OK, result=child.result)
    reason = child.failure_reason or str(child.status).lower()
    return _refused("child_failed", f"the child task {child.pk} ended {child.status}: {reason}",
                    status=str(child.status), failure_reason=child.failure_reason,
                    task=child.pk)


# --- what a task's end sets off ------------------------------------------------------------


def on_task_ended(task_id: int) -> None:
    """After a task's end committed: wake its parent (its step is waiting on
    it), and cancel its unfinished children (each one's end does the same)."""
    unfinished = Task.objects.filter(parent_id=task_id, status__in=NON_TERMINAL)
    row = Task.objects.filter(pk=task_id).annotate(busy=Exists(unfinished)).values_list(
        "parent_id", "busy").first()  # one query: most tasks have neither
    if row is None:
        return
    parent_id, busy = row
    if parent_id is not None:
        wake(parent_id)
    if busy:
        for child_id in unfinished.values_list("pk", flat=True):
            _cancel_child(child_id, parent_id=task_id)


def wake(task_id: int) -> None:
    """Run a parent waiting on a child now: due at once (for the sweep, should
    the message be lost) and enqueued; a parent a worker holds just now comes
    back at its own re-check."""
    if Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING, lease_owner="").update(
            next_run_at=timezone.now()):
        schedule_advance(task_id)


def _cancel_child(child_id: int, *, parent_id: int) -> None:
    with contextlib.suppress(DomainError):  # it ended meanwhile
        task_cancel(task_id=child_id, actor=ACTOR, reason=f"its parent task {parent_id} ended")


def children_sweep() -> None:
    """The recovery sweep's part: a child whose parent ended is not left running
    (the cancel that follows the parent's end was lost: a worker died)."""
    for child_id, parent_id in Task.objects.filter(
            parent__isnull=False, status__in=NON_TERMINAL,
            parent__status__in=TERMINAL).values_list("pk", "parent_id")[:500]:
        _cancel_child(child_id, parent_id=parent_id)


# --- registration ------------------------------------------------------------------------


def agent_cycle_errors(*, tenant_id: int, name: str, tools: list[str]) -> list[str]:
    """The problems of a profile named `name` listing `tools`: an `agent:X`
    must name another agent of the tenant, and X may not reach `name` through
    the `agent:` tools of the agents it lists (transitively)."""
    called = [agent_of_tool(t) for t in tools if is_agent_tool(t)]
    if not called:
        return []
    graph = {n: [agent_of_tool(t) for t in (ts or []) if isinstance(t, str) and is_agent_tool(t)]
             for n, ts in AgentProfile.objects.filter(tenant_id=tenant_id).values_list(
                 "name", "tools")}
    graph[name] = called
    problems = []
    for target in called:
        if target == name:
            problems.append(f"{agent_tool(target)}: an agent cannot call itself")
        elif target not in graph:
            problems.append(f"no agent named {target!r} in this tenant")
        else:
            path = _path_to(graph, target, name)
            if path is not None:
                problems.append(f"{agent_tool(target)}: {' -> '.join([name, *path])} calls "
                                f"{name!r} back (a cycle)")
    return problems


def _path_to(graph: dict[str, list[str]], start: str, goal: str) -> list[str] | None:
    """A path of calls from `start` to `goal`, or None."""
    seen = {start}
    stack: list[list[str]] = [[start]]
    while stack:
        path = stack.pop()
        for nxt in graph.get(path[-1], []):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append([*path, nxt])
    return None
