"""The MCP handlers: tools, resources. Thin: each checks its input, calls the
catalog (`mcp_server_app.catalog`) off the event loop, and presents.

The caller was authenticated by the endpoint (`mcp_server_app.asgi`) and rides
in the ASGI scope under `CALLER`, which the SDK hands over as
`ctx.request.scope`: in stateless mode the handlers run in the session
manager's task group, not in the request's own task, so a context variable
set by the endpoint would not reach them.

A question from the run goes to the client as an elicitation when the client
speaks MCP 2026-07-28 and declared the elicitation capability: the call answers
with an `InputRequiredResult` (SEP-2322) carrying the question as a form
(`catalog.elicitation_form`) and a signed `request_state` (task, question,
caller); the client's retry brings the answer, which answers the task's
question through the same service as the REST API, and the wait goes on.
Only the task's requester is asked. Otherwise (or if the user declines) the
question waits for a person in the console or the API, as usual.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types
from channels.db import database_sync_to_async
from django.core import signing
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from accounts_app.models import ApiKey
from foundations.actors import Actor
from foundations.api_access import may
from foundations.errors import DomainError
from tasks_app.machine import TaskStatus
from tools_app.schemas import schema_errors

from . import catalog
from .catalog import Caller

CALLER = "tether.mcp_caller"
GET_TASK = "get_task"
ANSWER = "answer"  # the key of the one input request a question becomes
STATE_SALT = "tether.mcp.question"
STATE_MAX_AGE_S = 24 * 3600
TASK_URI = re.compile(r"\Atether://tasks/([0-9]{1,18})\Z")
ENDED_BADLY = (TaskStatus.FAILED, TaskStatus.CANCELED)

run_tools = database_sync_to_async(catalog.run_tools)
tool_of = database_sync_to_async(catalog.tool_of)
run_start = database_sync_to_async(catalog.run_start)
question_answer = database_sync_to_async(catalog.question_answer)
elicitation_form = database_sync_to_async(catalog.elicitation_form)
recent_tasks = database_sync_to_async(catalog.recent_tasks)
task_seen = database_sync_to_async(catalog.task_seen)


def caller_of_key(key: ApiKey) -> Caller | None:
    """The caller an authenticated key stands for (None: its user has no tenant)."""
    membership = getattr(key.user, "membership", None)
    if membership is None:
        return None
    actor = Actor(name=key.user.get_username(), role=membership.role, user_id=key.user.pk)
    return Caller(tenant_id=membership.tenant_id, user_id=key.user.pk, actor=actor,
                  may_submit=may(membership.role, "task.submit"),
                  may_answer=may(membership.role, "task.input"), api_key_id=key.pk)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    caller = ctx.request.scope.get(CALLER) if ctx.request is not None else None
    if not isinstance(caller, Caller):  # only the authenticating endpoint serves this server
        raise MCPError(types.INVALID_REQUEST, "not authenticated")
    return caller


# --- tools ---------------------------------------------------------------------------


async def list_tools(ctx: ServerRequestContext[Any, Any],
                     params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    tools = [types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
             for t in await run_tools(_caller(ctx))]
    tools.append(types.Tool(
        name=GET_TASK, input_schema=catalog.GET_TASK_SCHEMA,
        description="A task of yours: its status, its result once it ended, what it waits "
                    "for meanwhile. With wait_s, waits up to that long for it to settle.",
        annotations=types.ToolAnnotations(read_only_hint=True)))
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
                    ) -> types.CallToolResult | types.InputRequiredResult:
    caller = _caller(ctx)
    arguments = params.arguments or {}
    try:
        if params.request_state is not None:  # the retry that brings an elicitation's answer
            return await _after_answer(ctx, caller, params)
        if params.name == GET_TASK:
            problems = schema_errors(catalog.GET_TASK_SCHEMA, arguments)
            if problems:
                return _refused(DomainError("invalid", "The arguments are not valid.",
                                            details={"arguments": problems}))
            task = await task_seen(caller, arguments["task_id"])
            return await _settled(ctx, caller, task.pk, catalog.wait_of(arguments, 0.0))
        tool = await tool_of(caller, params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        task = await run_start(caller, tool, arguments)
        return await _settled(ctx, caller, task.pk,
                              catalog.wait_of(arguments, catalog.DEFAULT_WAIT_S))
    except DomainError as exc:
        return _refused(exc)


async def _settled(ctx: ServerRequestContext[Any, Any], caller: Caller, task_id: int,
                   wait_s: float, *, elicit: bool = True
                   ) -> types.CallToolResult | types.InputRequiredResult:
    view = await catalog.view_when_settled(caller, task_id, wait_s)
    waiting = view.get("waiting_for") or {}
    form = None
    if elicit and waiting.get("kind") == "question" and _elicits(ctx):
        form = await elicitation_form(caller, task_id=task_id, question_id=waiting["id"])
    if form is not None:
        schema, as_json = form
        state = {"task": task_id, "question": waiting["id"], "tenant": caller.tenant_id,
                 "user": caller.user_id, "wait_s": wait_s, "json": as_json}
        question = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=waiting["question"], requested_schema=schema))
        return types.InputRequiredResult(input_requests={ANSWER: question},
                                         request_state=signing.dumps(state, salt=STATE_SALT))
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(view, default=str))],
        structured_content=view,
        is_error=view["status"] in ENDED_BADLY,
    )


def _elicits(ctx: ServerRequestContext[Any, Any]) -> bool:
    """The client can be asked: an `InputRequiredResult` is a 2026-07-28 answer,
    and the client declared elicitation (stateless HTTP has no back channel for
    the older server-to-client request)."""
    capabilities = ctx.session.client_capabilities
    return (ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and capabilities is not None
            and capabilities.elicitation is not None)


async def _after_answer(ctx: ServerRequestContext[Any, Any], caller: Caller,
                        params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
    try:
        state = signing.loads(params.request_state or "", salt=STATE_SALT,
                              max_age=STATE_MAX_AGE_S)
    except signing.BadSignature:
        raise MCPError(types.INVALID_PARAMS, "request_state is not one this server gave") from None
    if (state["tenant"], state["user"]) != (caller.tenant_id, caller.user_id):
        raise MCPError(types.INVALID_PARAMS, "request_state is not one this server gave")
    answer = _accepted_answer((params.input_responses or {}).get(ANSWER), as_json=state["json"])
    if answer is not None:
        await question_answer(caller, task_id=state["task"], question_id=state["question"],
                              answer=answer)
        return await _settled(ctx, caller, state["task"], state["wait_s"])
    # Declined or dismissed: the question waits for a person (console, API).
    return await _settled(ctx, caller, state["task"], 0.0, elicit=False)


def _accepted_answer(reply: object, *, as_json: bool) -> str | None:
    """The answer an accepted form carries: its content as JSON for a question
    with an answer schema, else its one text field."""
    if not isinstance(reply, types.ElicitResult) or reply.action != "accept":
        return None
    if as_json:
        return json.dumps(reply.content or {})
    answer = (reply.content or {}).get("answer")
    return answer if isinstance(answer, str) and answer else None


def _refused(exc: DomainError) -> types.CallToolResult:
    body = exc.as_dict()
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))],
                                structured_content={"error": body}, is_error=True)


# --- resources -----------------------------------------------------------------------


async def list_resources(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None
                         ) -> types.ListResourcesResult:
    tasks = await recent_tasks(_caller(ctx))
    return types.ListResourcesResult(resources=[
        types.Resource(uri=catalog.task_uri(t.pk), name=f"task-{t.pk}", title=t.goal[:100],
                       description=t.status, mime_type="application/json")
        for t in tasks])


async def list_resource_templates(ctx: ServerRequestContext[Any, Any],
                                  params: types.PaginatedRequestParams | None
                                  ) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
        uri_template="tether://tasks/{task_id}", name="task", mime_type="application/json",
        description="A task of your tenant: status, result, what it waits for.")])


async def read_resource(ctx: ServerRequestContext[Any, Any],
                        params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    caller = _caller(ctx)
    match = TASK_URI.fullmatch(str(params.uri))
    try:
        if match is None:
            raise DomainError("not_found", "Resource not found.")
        view = await catalog.view_when_settled(caller, int(match.group(1)), 0.0)
    except DomainError:  # another tenant's task too: not found, never leaked
        raise MCPError(types.INVALID_PARAMS, "Resource not found", {"uri": str(params.uri)}
                       ) from None
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=str(params.uri), mime_type="application/json", text=json.dumps(view, default=str))])


server: Server[Any] = Server(
    "tether",
    title="Tether",
    instructions=(
        "Each run_<agent> tool starts a durable task of that agent and returns its result "
        "when it ends within wait_s; otherwise it returns the task's handle: poll it with "
        "get_task. A task may wait for a person (an approval, a question)."
    ),
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_resource_templates,
    on_read_resource=read_resource,
)
