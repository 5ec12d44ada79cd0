"""Tether as an MCP server, driven by the `mcp` SDK's own client against a
live server (daphne, as in production and `scripts/start`) whose tasks a real
Celery worker runs.

The client is the SDK's: `streamable_http_client` + `ClientSession` (the
initialize handshake, MCP 2025-11-25), and `mcp.Client` in its default `auto`
mode, which speaks 2026-07-28 to a server that answers `server/discover` and
fulfils an elicitation (`InputRequiredResult`) through its callback.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval, RequesterScope
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tasks_app.services.demo import demo_agent_ensure
from tests.console.server import DaphneServer, daphne_servers
from tests.factories import TenantFactory, submit
from tests.helpers import wait_for
from tests.processes import CeleryWorkers, _base_env, _spawn, database_url, free_port, port_open
from workflows_app.services.workflows import workflow_create

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LOOKUP_FLOW = {
    "inputs": {"type": "object", "required": ["order_id"],
               "properties": {"order_id": {"type": "string"}}},
    "nodes": [{"id": "lookup", "tool": "lookup_order", "args": {"order_id": "${inputs.order_id}"}}],
    "output": {"order": "${inputs.order_id}"},
}
REFUND = [{"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 500,
                                             "reason": "damaged"}},
          {"final": {"refunded_cents": 500}}]


@pytest.fixture
def live(world: Any, celery_workers: CeleryWorkers, tmp_path: Path, settings: Any
         ) -> Iterator[DaphneServer]:
    """daphne on the test database, submitting through the broker to a real worker."""
    from django.db import connection

    celery_workers.start()
    base = {"DATABASE_URL": database_url(connection.settings_dict),
            "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL, "TETHER_RUNNER": "celery",
            "CELERY_BROKER_URL": celery_workers.broker_url,
            "CELERY_QUEUE": celery_workers.queue}
    with daphne_servers(tmp_path, base) as start:
        yield start()


@pytest.fixture
def published(world: Any) -> dict[str, Any]:
    """`support`, `triage` and the workflow `lookup-flow` published, `quiet` and
    `hidden-flow` not; another tenant with a published agent and a task."""
    AgentProfile.objects.filter(tenant=world.tenant, name="support").update(published=True)
    demo_agent_ensure(world.tenant, name="quiet")
    demo_agent_ensure(world.tenant, name="triage")
    AgentProfile.objects.filter(tenant=world.tenant, name="triage").update(published=True)
    for name, published in (("lookup-flow", True), ("hidden-flow", False)):
        workflow_create(tenant_id=world.tenant.pk, name=name, definition=LOOKUP_FLOW,
                        description="Look an order up.", published=published, actor=SYSTEM)
    other = TenantFactory(name="t-other")
    demo_agent_ensure(other, name="theirs")
    AgentProfile.objects.filter(tenant=other, name="theirs").update(published=True)
    theirs = submit(other, [{"final": {"secret": "theirs"}}], agent="theirs")
    return {"other_task": theirs,
            "key": api_key_create(user=world.users[Role.REQUESTER])}


def authorized(key: str) -> httpx2.AsyncClient:
    """The HTTP client the SDK's transport uses, sending the API key (a long read:
    a call may wait for its task)."""
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                              timeout=httpx2.Timeout(30, read=180))


@asynccontextmanager
async def mcp_session(server: DaphneServer, key: str, **options: Any
                      ) -> AsyncIterator[ClientSession]:
    """The SDK's transport and session, with the initialize handshake (2025-11-25)."""
    async with authorized(key) as http, \
            streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write, *_), \
            ClientSession(read, write, **options) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def modern_client(server: DaphneServer, key: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's `Client` in its default mode: 2026-07-28 against Tether."""
    async with authorized(key) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        async with Client(transport, **options) as client:
            yield client


async def refusal(call: Any) -> MCPError:
    """The protocol error a call is answered with."""
    try:
        result = await call
    except MCPError as exc:
        return exc
    raise AssertionError(f"the call was answered: {result}")


def run(server: DaphneServer, key: str, use: Callable[[ClientSession], Any]) -> Any:
    async def main() -> Any:
        async with mcp_session(server, key) as session:
            return await use(session)
    return asyncio.run(main())


def test_tools_are_the_published_agents_of_the_callers_tenant_within_its_scope(
        world, published, live):
    names = run(live, published["key"], lambda s: s.list_tools())
    assert sorted(t.name for t in names.tools) == [
        "get_task", "run_support", "run_triage", "run_workflow.lookup-flow"]
    support = next(t for t in names.tools if t.name == "run_support")
    assert support.input_schema["required"] == ["goal", "script"]  # a scripted agent
    assert support.description.startswith("Customer support")

    flow = next(t for t in names.tools if t.name == "run_workflow.lookup-flow")
    assert flow.input_schema["properties"]["input"] == LOOKUP_FLOW["inputs"]

    # A scope naming one agent narrows what the key lists (and may call); a
    # scope names agents, so a scoped key sees no workflow.
    RequesterScope.objects.create(tenant=world.tenant, user=world.users[Role.REQUESTER],
                                  agents=["triage"])
    scoped = run(live, published["key"], lambda s: s.list_tools())
    assert sorted(t.name for t in scoped.tools) == ["get_task", "run_triage"]
    refused = run(live, published["key"], lambda s: refusal(s.call_tool(
        "run_support", {"goal": "hi", "script": [{"final": {}}]})))
    assert refused.message == "Unknown tool: run_support"
    assert not Task.objects.filter(tenant=world.tenant).exists()

    # A reviewer may not submit: it lists no run tool, only get_task.
    reviewer = api_key_create(user=world.users[Role.REVIEWER])
    assert [t.name for t in run(live, reviewer, lambda s: s.list_tools()).tools] == ["get_task"]


def test_a_scoped_key_lists_and_runs_only_its_agents_and_its_task_names_the_key(
        world, published, live):
    from accounts_app.models import ApiKey

    scoped_raw = api_key_create(user=world.users[Role.REQUESTER])
    scoped = ApiKey.objects.get(prefix=scoped_raw[:12])
    ApiKey.objects.filter(pk=scoped.pk).update(agents=["triage"])
    listed = run(live, scoped_raw, lambda s: s.list_tools())
    assert sorted(t.name for t in listed.tools) == ["get_task", "run_triage"]
    # the same user's other key is not narrowed
    assert "run_support" in [t.name for t in run(live, published["key"],
                                                 lambda s: s.list_tools()).tools]
    refused = run(live, scoped_raw, lambda s: refusal(s.call_tool(
        "run_support", {"goal": "hi", "script": [{"final": {}}]})))
    assert refused.message == "Unknown tool: run_support"
    ran = run(live, scoped_raw, lambda s: s.call_tool(
        "run_triage", {"goal": "hi", "script": [{"final": {"ok": True}}]}))
    assert not ran.is_error, ran
    assert Task.objects.get(pk=ran.structured_content["task_id"]).api_key_id == scoped.pk


def test_a_call_that_finishes_returns_the_tasks_result(world, published, live):
    arguments = {"goal": "Where is A-1?", "idempotency_key": "mcp-finish-1",
                 "script": [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                            {"final": {"answer": "delivered"}}]}
    result = run(live, published["key"], lambda s: s.call_tool("run_support", arguments))

    assert not result.is_error, result
    done = result.structured_content
    assert done["status"] == TaskStatus.SUCCEEDED and done["result"] == {"answer": "delivered"}
    task = Task.objects.get(pk=done["task_id"])
    assert task.tenant_id == world.tenant.pk
    assert task.requester_id == world.users[Role.REQUESTER].pk
    assert json.loads(result.content[0].text) == done
    # The same idempotency key and arguments: the same task, not a second one.
    again = run(live, published["key"], lambda s: s.call_tool("run_support", arguments))
    assert again.structured_content["task_id"] == task.pk
    assert Task.objects.filter(tenant=world.tenant).count() == 1


def test_arguments_outside_the_schema_are_refused_with_field_errors(world, published, live):
    result = run(live, published["key"], lambda s: s.call_tool(
        "run_support", {"goal": "", "script": [{"final": {}}], "colour": "red"}))
    assert result.is_error
    error = result.structured_content["error"]
    assert error["code"] == "invalid" and error["details"]["arguments"]
    assert not Task.objects.filter(tenant=world.tenant).exists()


def test_a_published_workflow_runs_with_its_inputs(world, published, live):
    async def calls(session: ClientSession) -> tuple[Any, Any]:
        bad = await session.call_tool("run_workflow.lookup-flow", {"input": {}})
        good = await session.call_tool("run_workflow.lookup-flow", {"input": {"order_id": "A-2"}})
        return bad, good

    bad, good = run(live, published["key"], calls)
    assert bad.is_error and bad.structured_content["error"]["details"]["arguments"]
    done = good.structured_content
    assert (done["status"], done["workflow"], done["result"]) == (
        TaskStatus.SUCCEEDED, "lookup-flow", {"order": "A-2"})
    assert Task.objects.filter(tenant=world.tenant).count() == 1


def test_a_call_that_needs_an_approval_returns_a_handle_polled_until_a_reviewer_approves(
        world, published, live):
    first = run(live, published["key"], lambda s: s.call_tool(
        "run_support", {"goal": "Refund A-1", "script": REFUND, "wait_s": 30}))
    handle = first.structured_content
    assert not first.is_error
    assert handle["status"] == TaskStatus.WAITING_FOR_APPROVAL
    approval = Approval.objects.get(task_id=handle["task_id"])
    assert handle["waiting_for"] == {"kind": "approval", "id": approval.pk,
                                     "tool": "issue_refund"}

    polled = run(live, published["key"], lambda s: s.call_tool(
        "get_task", {"task_id": handle["task_id"]}))
    assert polled.structured_content["status"] == TaskStatus.WAITING_FOR_APPROVAL

    # A reviewer approves through the REST API, as usual.
    reviewer = api_key_create(user=world.users[Role.REVIEWER])
    decided = httpx.post(f"{live.url}/api/v1/approvals/{approval.pk}/approve",
                         json={"comment": "fine"}, headers={"Authorization": f"Token {reviewer}"},
                         timeout=30)
    assert decided.status_code == 200, decided.text

    def ended() -> dict[str, Any] | None:
        view = run(live, published["key"], lambda s: s.call_tool(
            "get_task", {"task_id": handle["task_id"], "wait_s": 5})).structured_content
        return view if view["status"] == TaskStatus.SUCCEEDED else None

    done = wait_for(ended, timeout=60, interval=0.2, message="the task to succeed")
    assert done["result"] == {"refunded_cents": 500}


def test_a_wrong_key_is_refused(world, published, live):
    for headers in ({"Authorization": "Bearer tth_not-a-key"}, {}):
        answer = httpx.post(f"{live.url}/mcp", headers={**headers, "Accept":
                            "application/json, text/event-stream"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "not_authenticated"
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    with pytest.raises(BaseException):  # noqa: B017, PT011 - the SDK's own wrapping of the 401
        run(live, "tth_not-a-key", lambda s: s.list_tools())


def test_tasks_are_resources_of_the_callers_tenant_only(world, published, live):
    mine = submit(world.tenant, [{"final": {"ok": True}}], requester=world.users[Role.REQUESTER])

    async def read(session: ClientSession) -> Any:
        listed = await session.list_resources()
        templates = await session.list_resource_templates()
        own = await session.read_resource(f"tether://tasks/{mine.pk}")
        other = published["other_task"].pk
        polled = await session.call_tool("get_task", {"task_id": other})
        refused = await refusal(session.read_resource(f"tether://tasks/{other}"))
        return listed, templates, own, refused, polled

    listed, templates, own, refused, polled = run(live, published["key"], read)
    assert [r.uri for r in listed.resources] == [f"tether://tasks/{mine.pk}"]
    assert templates.resource_templates[0].uri_template == "tether://tasks/{task_id}"
    view = json.loads(own.contents[0].text)
    assert view["task_id"] == mine.pk and view["goal"] == mine.goal
    assert refused.message == "Resource not found"
    assert "theirs" not in str(refused.error)
    assert polled.is_error and polled.structured_content["error"]["code"] == "not_found"


ASKING = [{"ask": "How much should be refunded for A-1 (in cents)?"},
          {"final": {"acknowledged": True}}]


def test_a_question_from_the_run_is_an_elicitation_the_client_answers(world, published, live):
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "700"})

    async def main() -> tuple[str, types.CallToolResult]:
        async with modern_client(live, published["key"], elicitation_callback=answer) as client:
            result = await client.call_tool("run_support", {
                "goal": "Refund part of A-1", "script": ASKING, "wait_s": 60})
            return client.protocol_version, result

    version, result = asyncio.run(main())
    assert version == "2026-07-28"  # the SDK client negotiated the per-request protocol
    assert [p.message for p in asked] == ["How much should be refunded for A-1 (in cents)?"]
    done = result.structured_content
    assert done["status"] == TaskStatus.SUCCEEDED, done
    assert done["result"] == {"acknowledged": True}
    question = Task.objects.get(pk=done["task_id"]).questions.get()
    assert (question.answer, question.channel) == ("700", "api")
    assert question.answered_by_id == world.users[Role.REQUESTER].pk


def test_a_workflows_approval_node_is_a_form_elicitation(world, published, live):
    workflow_create(tenant_id=world.tenant.pk, name="confirm-flow", published=True, actor=SYSTEM,
                    definition={"nodes": [{"id": "confirm",
                                           "human": {"approval": "Refund ${inputs.order_id}?"}}],
                                "inputs": LOOKUP_FLOW["inputs"],
                                "output": {"approved": "${nodes.confirm.approved}"}})
    forms: list[dict[str, Any]] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        forms.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"approved": True})

    async def main() -> types.CallToolResult:
        async with modern_client(live, published["key"], elicitation_callback=approve) as client:
            return await client.call_tool("run_workflow.confirm-flow",
                                          {"input": {"order_id": "A-1"}, "wait_s": 60})

    done = asyncio.run(main()).structured_content
    assert forms == [{"type": "object", "required": ["approved"], "properties": {
        "approved": {"type": "boolean"}, "comment": {"type": "string"}}}]
    assert (done["status"], done["result"]) == (TaskStatus.SUCCEEDED, {"approved": True}), done
    question = Task.objects.get(pk=done["task_id"]).questions.get()
    assert json.loads(question.answer) == {"approved": True}


def test_a_declined_question_waits_for_a_person_and_a_forged_state_is_refused(
        world, published, live):
    async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def main() -> tuple[types.CallToolResult, MCPError]:
        async with modern_client(live, published["key"], elicitation_callback=decline) as client:
            declined = await client.call_tool("run_support", {
                "goal": "Refund part of A-1", "script": ASKING, "wait_s": 30})
            forged = await refusal(client.session.call_tool(
                "run_support", {}, request_state="forged", allow_input_required=True))
            return declined, forged

    declined, forged = asyncio.run(main())
    handle = declined.structured_content
    assert handle["status"] == TaskStatus.WAITING_FOR_INPUT
    assert handle["waiting_for"]["kind"] == "question"
    assert not Task.objects.get(pk=handle["task_id"]).questions.get().answer
    assert forged.message == "request_state is not one this server gave"


def test_without_elicitation_a_question_waits_for_a_person(world, published, live):
    first = run(live, published["key"], lambda s: s.call_tool(
        "run_support", {"goal": "Refund part of A-1", "script": ASKING, "wait_s": 30}))
    handle = first.structured_content
    assert handle["status"] == TaskStatus.WAITING_FOR_INPUT
    assert handle["waiting_for"]["kind"] == "question"
    assert handle["waiting_for"]["question"] == ASKING[0]["ask"]


def test_under_uvicorn_with_its_lifespan_mcp_serves_and_shuts_down_cleanly(
        world, published, tmp_path, settings):
    """uvicorn sends lifespan events (daphne does not): /mcp still starts its
    session manager on the first request, and a shutdown ends without an error."""
    from django.db import connection

    port = free_port()
    env = _base_env()
    env.update({"DJANGO_SETTINGS_MODULE": "tests.settings", "TETHER_RUNNER": "manual",
                "DATABASE_URL": database_url(connection.settings_dict),
                "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL})
    proc = _spawn(f"uvicorn-{port}", [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1",
                                      "--port", str(port), "--lifespan", "on",
                                      "config.asgi:application"], env=env, log_dir=tmp_path)
    try:
        wait_for(lambda: port_open("127.0.0.1", port) or not proc.alive(), timeout=60,
                 message="uvicorn to listen")
        server = DaphneServer(port=port, env=env, log_path=proc.log_path)  # (its URL only)
        tools = run(server, published["key"], lambda s: s.list_tools())
        assert "run_support" in {t.name for t in tools.tools}
        proc.popen.send_signal(signal.SIGTERM)
        # (uvicorn re-raises the signal once it has shut down)
        assert proc.popen.wait(timeout=30) in (0, -signal.SIGTERM), proc.log_tail()
    finally:
        if proc.alive():
            proc.kill()
    log = proc.log_path.read_text()
    assert "Application shutdown complete." in log
    assert "Traceback" not in log and "destroyed but it is pending" not in log, log


def test_with_its_database_down_mcp_answers_503(tmp_path, settings):
    from django.db import connection

    down = database_url({**connection.settings_dict, "PORT": str(free_port())})
    with daphne_servers(tmp_path, {"CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL}) as start:
        server = start(DATABASE_URL=down, DB_POOL_MAX_SIZE="2", DB_POOL_TIMEOUT_S="0.5")
        answer = httpx.post(f"{server.url}/mcp", headers={"Authorization": "Bearer tth_any"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "database_unavailable"
    assert int(answer.headers["Retry-After"]) > 0
