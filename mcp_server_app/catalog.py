"""What an MCP caller sees and may run, and the runs themselves.

A caller (`Caller`) is an API key's user, with what its role allows (the
access layer decides that, `foundations.api_access`). It sees the tenant's
*published* agents and workflows (an admin's choice, audited), as tools named
`run_<agent>` and `run_workflow.<workflow>` (an agent's name is a slug, so it
never holds a dot: the two never collide; both are names MCP allows, SEP-986),
and only when its role may submit tasks. Its scope (its user's
`RequesterScope`, narrowed by its key's: `approvals_app.policy.agents_in_scope`)
narrows the agents to those it names; a scope names agents, not workflows, so
a scoped caller sees no workflow. What is listed is what may be called: a call checks the same rules
again (`tool_of`), and the task services check the scope once more.

A call starts a task through the submission services (`task_submit`,
`submit_run`), with the caller's idempotency key if it gave one; the MCP
request id is no key (each client numbers its requests from 1).
"""

from __future__ import annotations

import asyncio
import math
from contextlib import aclosing, suppress
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import Max

from approvals_app.models import DecisionChannel, Question
from approvals_app.policy import agents_in_scope
from approvals_app.selectors import open_request_of
from approvals_app.services.answers import task_provide_input
from foundations.actors import Actor
from foundations.errors import invalid, not_found
from tasks_app.live.stream import End, Recorded, task_stream
from tasks_app.machine import TERMINAL
from tasks_app.models import AgentProfile, Event, Task
from tasks_app.selectors import task_of_tenant, tasks_of_tenant
from tasks_app.services.tasks import task_submit
from tools_app.schemas import schema_errors
from workflows_app.models import Workflow, WorkflowVersion
from workflows_app.selectors import run_of
from workflows_app.services.runs import submit_run

AGENT_PREFIX = "run_"
WORKFLOW_PREFIX = "run_workflow."
DEFAULT_WAIT_S = 20.0
MAX_WAIT_S = 120.0
RECENT_TASKS = 50
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,200}$"  # as the REST API's Idempotency-Key header

CONTROL_PROPERTIES: dict[str, Any] = {
    "idempotency_key": {
        "type": "string", "pattern": IDEMPOTENCY_KEY,
        "description": "Calling again with the same key and arguments returns the same task.",
    },
    "wait_s": {
        "type": "number", "minimum": 0, "maximum": MAX_WAIT_S,
        "description": f"How long to wait for the end (default {DEFAULT_WAIT_S:g} s): "
                       "after it, the call returns the task's handle; poll it with get_task.",
    },
}
# A question with no answer schema is asked as a form of one text field.
TEXT_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Your answer"}},
    "required": ["answer"],
}
# What a form elicitation may hold (flat, primitive properties), per property.
FORM_TYPES = frozenset({"string", "number", "integer", "boolean"})
FORM_KEYWORDS = frozenset({"type", "title", "description", "enum", "default", "minimum",
                           "maximum", "minLength", "maxLength", "format"})
GET_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task_id": {"type": "integer", "minimum": 1},
                   "wait_s": CONTROL_PROPERTIES["wait_s"]},
    "required": ["task_id"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Caller:
    """Who calls, as the catalog needs it: tenant, user, the actor recorded on
    events, and whether its role may submit tasks and answer its own."""

    tenant_id: int
    user_id: int
    actor: Actor
    may_submit: bool
    may_answer: bool
    api_key_id: int | None = None  # the key it called with: its scope narrows the user's


@dataclass(frozen=True)
class RunTool:
    """A published agent or workflow, as the caller sees it."""

    name: str
    kind: str  # "agent" or "workflow"
    target: str  # the agent's or workflow's name
    description: str
    input_schema: dict[str, Any]


def run_tools(caller: Caller) -> list[RunTool]:
    """The tools this caller may call, by name."""
    if not caller.may_submit:
        return []
    allowed = agents_in_scope(tenant_id=caller.tenant_id, requester_id=caller.user_id,
                              api_key_id=caller.api_key_id)
    agents = AgentProfile.objects.filter(tenant_id=caller.tenant_id, published=True,
                                         enabled=True).order_by("name")
    tools = [_agent_tool(agent) for agent in agents if allowed is None or agent.name in allowed]
    if allowed is None:
        workflows = Workflow.objects.filter(tenant_id=caller.tenant_id, published=True,
                                            enabled=True).order_by("name")
        tools += [_workflow_tool(w) for w in workflows]
    return tools


def tool_of(caller: Caller, name: str) -> RunTool | None:
    return next((tool for tool in run_tools(caller) if tool.name == name), None)


def _agent_tool(agent: AgentProfile) -> RunTool:
    properties: dict[str, Any] = {
        "goal": {"type": "string", "minLength": 1, "description": "What the agent should do."},
        "input": {"type": "object", "description": "Structured input for the task."},
        **CONTROL_PROPERTIES,
    }
    required = ["goal"]
    if (agent.model or {}).get("backend", "scripted") == "scripted":
        # A scripted agent (demos, tests) runs the decisions it is given, as in the REST API.
        properties["script"] = {"type": "array", "items": {"type": "object"},
                                "description": "The scripted agent's decisions, in order."}
        required.append("script")
    return RunTool(
        name=AGENT_PREFIX + agent.name, kind="agent", target=agent.name,
        description=agent.description or f"Run the agent {agent.name} on a goal.",
        input_schema={"type": "object", "properties": properties, "required": required,
                      "additionalProperties": False},
    )


def _workflow_tool(workflow: Workflow) -> RunTool:
    version = WorkflowVersion.objects.filter(workflow=workflow,
                                             number=workflow.current_version).first()
    inputs = (version.definition.get("inputs") if version is not None else None) or {
        "type": "object"}
    return RunTool(
        name=WORKFLOW_PREFIX + workflow.name, kind="workflow", target=workflow.name,
        description=workflow.description or f"Run the workflow {workflow.name}.",
        input_schema={
            "type": "object",
            "properties": {"input": inputs,
                           "goal": {"type": "string", "description": "A note for the run."},
                           **CONTROL_PROPERTIES},
            "required": ["input"],
            "additionalProperties": False,
        },
    )


def wait_of(arguments: dict[str, Any], default: float) -> float:
    value = arguments.get("wait_s", default)
    return min(max(float(value), 0.0), MAX_WAIT_S)


def run_start(caller: Caller, tool: RunTool, arguments: dict[str, Any]) -> Task:
    """Start the task a call asks for (or find the one its idempotency key
    made). Arguments that do not match the tool's schema are refused with
    field errors and nothing is written."""
    problems = schema_errors(tool.input_schema, arguments)
    if problems:
        raise invalid("invalid", "The arguments do not match the tool's input schema.",
                      arguments=problems)
    key = arguments.get("idempotency_key")
    if tool.kind == "workflow":
        submitted = submit_run(
            tenant_id=caller.tenant_id, requester_id=caller.user_id, workflow=tool.target,
            goal=arguments.get("goal", ""), input=arguments.get("input") or {},
            idempotency_key=key, actor=caller.actor, api_key_id=caller.api_key_id)
    else:
        submitted = task_submit(
            tenant_id=caller.tenant_id, requester_id=caller.user_id, agent=tool.target,
            goal=arguments["goal"], input=arguments.get("input") or {},
            script=arguments.get("script"), idempotency_key=key, actor=caller.actor,
            api_key_id=caller.api_key_id)
    return submitted.task


def task_seen(caller: Caller, task_id: int) -> Task:
    """A task of the caller's tenant; another tenant's is not found."""
    task = task_of_tenant(caller.tenant_id, task_id)
    if task is None:
        raise not_found("Task")
    return task


def task_view(task: Task) -> dict[str, Any]:
    """What a client is told about a task: where it is, and what it waits for."""
    view: dict[str, Any] = {
        "task_id": task.pk,
        "status": task.status,
        "agent": task.agent.name if task.agent is not None else None,
        "goal": task.goal,
        "created_at": task.created_at.isoformat(),
        "uri": task_uri(task.pk),
    }
    if task.agent is None:
        run = run_of(task)
        view["workflow"] = run.workflow.name if run is not None else None
    if task.status in TERMINAL:
        view["result"] = task.result
        if task.failure_reason:
            view["failure_reason"] = task.failure_reason
            view["failure_detail"] = task.failure_detail
    else:
        view["waiting_for"] = open_request_of(task_id=task.pk)
    return view


def task_uri(task_id: int) -> str:
    return f"tether://tasks/{task_id}"


def recent_tasks(caller: Caller) -> list[Task]:
    return list(tasks_of_tenant(caller.tenant_id).order_by("-id")[:RECENT_TASKS])


def elicitation_form(caller: Caller, *, task_id: int, question_id: int
                     ) -> tuple[dict[str, Any], bool] | None:
    """How to ask the caller a question of its own task: the form's schema, and
    whether the answer is that form's content as JSON (a question with an
    answer schema: a workflow's form, an approval node) or its one text field.
    None when the caller may not answer it, or its schema is more than a flat
    form of primitive fields (which MCP's form elicitation cannot carry)."""
    task = task_seen(caller, task_id)
    if not caller.may_answer or task.requester_id != caller.user_id:
        return None
    decision = (Question.objects.filter(pk=question_id, task_id=task.pk)
                .values_list("step__decision", flat=True).first()) or {}
    schema = decision.get("answer_schema")
    if not schema:
        return TEXT_ANSWER, False
    properties = schema.get("properties") if schema.get("type") == "object" else None
    if not isinstance(properties, dict) or not properties or not all(
            isinstance(p, dict) and p.get("type") in FORM_TYPES for p in properties.values()):
        return None
    form = {"type": "object", "properties": {
        name: {k: v for k, v in prop.items() if k in FORM_KEYWORDS}
        for name, prop in properties.items()}}
    if schema.get("required"):
        form["required"] = list(schema["required"])
    return form, True


def question_answer(caller: Caller, *, task_id: int, question_id: int, answer: str) -> bool:
    """The caller's answer to the question its own task asked it (an
    elicitation). False when it may not answer, or that question is no longer
    open (a person answered it meanwhile)."""
    task = task_seen(caller, task_id)
    if not caller.may_answer or task.requester_id != caller.user_id:
        return False
    waiting = open_request_of(task_id=task.pk)
    if not waiting or waiting["kind"] != "question" or waiting["id"] != question_id:
        return False
    task_provide_input(task_id=task.pk, answer=answer, actor=caller.actor,
                       channel=DecisionChannel.API)
    return True


@database_sync_to_async
def _view_of(caller: Caller, task_id: int) -> tuple[dict[str, Any], int]:
    """The task's view, and the id of its last event when it was read."""
    task = task_seen(caller, task_id)
    last = Event.objects.filter(task_id=task_id).aggregate(m=Max("id"))["m"] or 0
    return task_view(task), last


def _settled(view: dict[str, Any]) -> bool:
    return view["status"] in TERMINAL or bool(view.get("waiting_for"))


async def view_when_settled(caller: Caller, task_id: int, wait_s: float) -> dict[str, Any]:
    """The task once it ends or waits for a person, or as it is after `wait_s`:
    read again at each of its transitions, which the task's event source
    (`tasks_app.live.stream`, shared with the SSE endpoint and A2A) announces."""
    view, last = await _view_of(caller, task_id)
    if _settled(view) or wait_s <= 0:
        return view
    with suppress(TimeoutError):
        async with asyncio.timeout(wait_s), aclosing(
                task_stream(task_id, after=last, idle_s=math.inf)) as items:
            async for item in items:
                if isinstance(item, Recorded) and "to" not in (item.event["payload"] or {}):
                    continue  # not a transition: the view has not changed
                if isinstance(item, Recorded | End):
                    view, _ = await _view_of(caller, task_id)
                    if _settled(view) or isinstance(item, End):
                        return view
    return (await _view_of(caller, task_id))[0]
