"""Starting a workflow run: a task like any other, whose decision maker is the
workflow's orchestrator (`orchestrator.WorkflowBackend`).

The task's snapshot holds everything the run needs, frozen at submission as
an agent's configuration is: the definition of the version it got, the tools
its nodes name (its allow-list: a node can call nothing else), and its budget.
No agent profile is involved (the task's `agent` is empty).
"""
from __future__ import annotations

import secrets
from typing import Any

from django.db import IntegrityError, transaction

from foundations.actors import Actor
from foundations.errors import invalid
from tasks_app.keys import canonical_json, sha256_hex
from tasks_app.models import Step, Task
from tasks_app.services.admission import admission_after_commit
from tasks_app.services.quotas import spend_refusal
from tasks_app.services.tasks import Submitted, earlier_submission, same_submission
from tasks_app.store.creation import task_create
from tools_app.schemas import schema_errors

from ..definition import MAX_MAP_ITEMS, Definition, load
from ..models import Workflow, WorkflowRun, WorkflowVersion
from ..orchestrator import BACKEND
from .workflows import version_for_run

# What a run may spend unless its definition says less: every node, every map
# item and each of their retries is a step.
DEFAULT_MAX_DURATION_S = 7 * 86400


def run_snapshot(workflow: Workflow, version: WorkflowVersion,
                 definition: Definition) -> dict[str, Any]:
    per_call = sum(n.retries + 1 for n in definition.nodes)
    steps = per_call + sum((n.retries + 1) * MAX_MAP_ITEMS for n in definition.nodes
                           if n.kind == "map") + 1
    budget = {
        "max_steps": definition.budget.get("max_steps", steps),
        "max_tool_calls": definition.budget.get("max_tool_calls", steps),
        "max_model_calls": definition.budget.get("max_steps", steps),  # one decision per step
        "max_tokens": 10**9,  # its decisions use no model tokens
        "max_duration_s": definition.budget.get("max_duration_s", DEFAULT_MAX_DURATION_S),
        "per_tool": {},
        "max_concurrent_tasks": 0,
    }
    return {
        "name": f"workflow:{workflow.name}",
        "workflow": {"name": workflow.name, "version": version.number},
        # the key of the process-wide cache of loaded definitions: with the
        # definition's digest, a reused id (a restored or flushed database) never
        # finds another definition
        "model": {"backend": BACKEND, "definition": version.definition,
                  "definition_key": f"{workflow.pk}:{version.number}:"
                                    f"{sha256_hex(canonical_json(version.definition))[:16]}"},
        "tools": definition.tools,
        "budget": budget,
        "on_exhaustion": "fail",
        # the graph bounds the run; a map's items may well repeat a call's shape
        "no_progress_repeats": 0,
        "no_progress_window": 0,
        "approval_sla_s": 0,
        "approval_on_expiry": "escalate",
        "allow_self_approval": False,
        "result_schema": {},
        # the orchestrator decides every ready call at once; none depends on another
        "parallel_calls": True,
    }


def submit_run(*, tenant_id: int, requester_id: int | None, workflow: str,
               input: dict[str, Any] | None, actor: Actor, goal: str = "",
               idempotency_key: str | None = None, api_key_id: int | None = None) -> Submitted:
    """Create the run's task in CREATED (admission starts it). With an
    `idempotency_key`, the same body returns the same run; another body under
    the same key is a conflict. `api_key_id`: the key that submitted it, whose
    scope narrows what the run's tool nodes may call, as for an agent's task."""
    input = input if input is not None else {}
    body = {"workflow": workflow, "goal": goal, "input": input}
    request_hash, earlier = earlier_submission(tenant_id, idempotency_key, body)
    if earlier is not None:
        return earlier
    spend_refusal(tenant_id)
    found = Workflow.objects.filter(tenant_id=tenant_id, name=workflow).first()
    if found is None:
        raise invalid("invalid", "The request is not valid.",
                      workflow=[f"no workflow named {workflow!r}"])
    if not found.enabled:
        raise invalid("invalid", "The request is not valid.",
                      workflow=[f"workflow {workflow!r} is disabled"])
    trace_id = secrets.token_hex(16)
    version = version_for_run(found, salt=idempotency_key or trace_id)
    definition = load(version.definition)
    problems = schema_errors(definition.inputs_schema, input)
    if problems:
        raise invalid("invalid", "The input does not match the workflow's `inputs` schema.",
                      input=problems)
    try:
        with transaction.atomic():
            task = task_create(
                actor=actor, agent_name=f"workflow:{workflow}", tenant_id=tenant_id,
                requester_id=requester_id, api_key_id=api_key_id, agent=None,
                agent_snapshot=run_snapshot(found, version, definition), agent_version=None,
                goal=goal or f"Run workflow {workflow} (version {version.number})",
                input=input, script=None, trace_id=trace_id,
                idempotency_key=idempotency_key or None, request_hash=request_hash)
            WorkflowRun.objects.create(task=task, workflow=found, version=version.number)
            admission_after_commit()
    except IntegrityError:
        existing = Task.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return same_submission(existing, request_hash)
    return Submitted(task=task, created=True)



def retry_step_of_node(task: Task, node: str) -> int | None:
    """Where a retry of the run `task` starts to run `node` again: its first
    step (the steps before it are inherited, and every call the retry makes
    again with the same tool and arguments gets the same key from the ledger,
    so nothing that happened happens twice). None: the node never ran (the
    retry starts where the run stopped). 400 for a task that is no workflow
    run, or a node its definition does not have."""
    definition = (task.agent_snapshot or {}).get("model") or {}
    if not (task.agent_snapshot or {}).get("workflow"):
        raise invalid("invalid", "The request is not valid.",
                      from_node=["this task is not a workflow run"])
    if node not in {n.id for n in load(definition["definition"]).nodes}:
        raise invalid("invalid", "The request is not valid.",
                      from_node=[f"the run's workflow has no node {node!r}"])
    for step_no, decision in (Step.objects.filter(task_id=task.pk).order_by("step_no")
                              .values_list("step_no", "decision")):
        if ((decision or {}).get("workflow") or {}).get("node") == node:
            return int(step_no)
    return None
