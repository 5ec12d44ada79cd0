"""The A2A server (`a2a_app`) through the official `a2a-sdk` client, against a
live ASGI server (daphne) whose submissions a real Celery worker runs, the
model a fake OpenAI-compatible server at the edge of the process."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.client.errors import AgentCardResolutionError
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from accounts_app.models import Role as TetherRole
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Question, RequesterScope
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.console.server import DaphneServer
from tests.factories import TenantFactory, make_user
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - a fixture
from tests.fakes.openai_server import FakeOpenAI, reply

pytestmark = [pytest.mark.system, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

S = TaskState



@pytest.fixture
def live(world, celery_workers, web, openai_server: FakeOpenAI):  # type: ignore[no-untyped-def]  # noqa: F811
    """A published agent `llm` of t-main on the fake model, a worker, the server, and a
    requester's key."""
    openai_agent(world.tenant, openai_server, tools=["lookup_order"], published=True,
                 description="Answers questions about orders.")
    celery_workers.start()
    server = web(TETHER_RUNNER="celery", CELERY_BROKER_URL=celery_workers.broker_url,
                 CELERY_QUEUE=celery_workers.queue)
    return server, api_key_create(user=world.users[TetherRole.REQUESTER])


def agent_url(server: DaphneServer, tenant: str = "t-main", agent: str = "llm") -> str:
    return f"{server.url}/a2a/{tenant}/{agent}"


async def _client(url: str, key: str | None) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"} if key else {},
                             timeout=60)
    card = await A2ACardResolver(http, url).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card), http


def message(*parts: Any, task_id: str = "", message_id: str | None = None) -> Message:
    return Message(message_id=message_id or uuid.uuid4().hex, role=Role.ROLE_USER,
                   task_id=task_id, parts=list(parts))


async def _stream(client: Any, msg: Message) -> list[StreamResponse]:
    return [event async for event in client.send_message(SendMessageRequest(message=msg))]


async def _subscribe(client: Any, task_id: str, started: asyncio.Event) -> list[StreamResponse]:
    """The events of a subscription; `started` is set once the server sent the first."""
    out = []
    async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
        out.append(event)
        started.set()
    return out


def states(events: list[StreamResponse]) -> list[int]:
    return [e.task.status.state if e.HasField("task") else e.status_update.status.state
            for e in events if e.HasField("task") or e.HasField("status_update")]


def test_the_card_then_a_message_streamed_to_completion_and_resent(live, openai_server):  # noqa: F811
    server, key = live
    openai_server.push(
        reply(tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply('{"answer": "A-1 is for Ada"}'),
    )

    async def run() -> tuple[Any, ...]:
        async with httpx.AsyncClient() as anonymous:
            card = await A2ACardResolver(anonymous, agent_url(server)).get_agent_card()
        client, http = await _client(agent_url(server), key)
        msg = message(new_text_part("Who ordered A-1?"), new_data_part({"order_id": "A-1"}))
        events = await _stream(client, msg)
        again = await _stream(client, msg)  # the same messageId: the same task
        task_id = events[0].task.id
        got = await client.get_task(GetTaskRequest(id=task_id))
        listed = await client.list_tasks(ListTasksRequest(include_artifacts=True))
        await http.aclose()
        return card, events, again, got, listed

    card, events, again, got, listed = asyncio.run(run())
    # the card: the agent, its tools as skills, streaming, a bearer scheme
    (interface,) = card.supported_interfaces
    assert interface.url == agent_url(server) and interface.protocol_binding == "JSONRPC"
    assert interface.protocol_version == "1.0"
    assert card.description == "Answers questions about orders."
    assert [s.id for s in card.skills] == ["llm", "tool:lookup_order"]
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert card.security_schemes["tetherApiKey"].http_auth_security_scheme.scheme == "Bearer"
    # the stream: the task (submitted, or working if the worker was quicker), the
    # result, completed
    seen = states(events)
    assert seen[0] in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    assert seen[1:] == [S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED][-(len(seen) - 1):]
    assert events[-1].status_update.status.state == S.TASK_STATE_COMPLETED
    (artifact,) = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert artifact.name == "result" and artifact.parts[1].text == "A-1 is for Ada"
    task = Task.objects.get(pk=int(events[0].task.id))
    assert task.status == TaskStatus.SUCCEEDED and task.goal == "Who ordered A-1?"
    assert task.input == {"order_id": "A-1"}  # a whole number would come back whole too
    assert task.idempotency_key.startswith("a2a:")
    assert task.result == {"answer": "A-1 is for Ada"}
    # resent: the very task, already completed, no second run
    assert [e.task.id for e in again] == [str(task.pk)]
    assert states(again) == [S.TASK_STATE_COMPLETED]
    assert Task.objects.count() == 1 and len(openai_server.requests) == 2
    assert got.status.state == S.TASK_STATE_COMPLETED and got.artifacts[0].name == "result"
    assert [t.id for t in listed.tasks] == [str(task.pk)]


def test_a_question_is_input_required_and_the_next_message_answers_it(live, openai_server):  # noqa: F811
    server, key = live
    openai_server.push(
        reply(tool_calls=[("ask_user", {"question": "Which order do you mean?"})]),
        reply('{"answer": "A-2 is for Ada"}'),
    )

    async def run() -> tuple[list[StreamResponse], list[StreamResponse]]:
        client, http = await _client(agent_url(server), key)
        asked = await _stream(client, message(new_text_part("Who ordered my order?")))
        task_id = asked[0].task.id
        answered = await _stream(client, message(new_text_part("A-2"), task_id=task_id))
        await http.aclose()
        return asked, answered

    asked, answered = asyncio.run(run())
    assert states(asked)[-1] == S.TASK_STATE_INPUT_REQUIRED
    question = asked[-1].status_update.status.message
    assert question.role == Role.ROLE_AGENT
    assert question.parts[0].text == "Which order do you mean?"
    assert states(answered)[0] == S.TASK_STATE_WORKING
    assert states(answered)[-1] == S.TASK_STATE_COMPLETED
    task = Task.objects.get(pk=int(asked[0].task.id))
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"answer": "A-2 is for Ada"}
    (q,) = Question.objects.filter(task=task)
    assert q.answer == "A-2" and q.answered_by_id == task.requester_id
    # the model was shown the answer
    assert "A-2" in str(openai_server.requests[-1].body["messages"])


def test_a_subscriber_to_a_waiting_task_follows_it_to_the_end(live, openai_server):  # noqa: F811
    server, key = live
    openai_server.push(
        reply(tool_calls=[("ask_user", {"question": "Which colour?"})]),
        reply('{"answer": "blue it is"}'),
    )

    async def run() -> tuple[list[StreamResponse], list[StreamResponse]]:
        client, http = await _client(agent_url(server), key)
        asked = await _stream(client, message(new_text_part("Paint the shed")))
        task_id = asked[0].task.id
        started = asyncio.Event()
        followed = asyncio.ensure_future(_subscribe(client, task_id, started))
        # the subscriber has the task (INPUT_REQUIRED) before anyone answers
        await asyncio.wait_for(started.wait(), timeout=30)
        answering, http2 = await _client(agent_url(server), key)
        await _stream(answering, message(new_text_part("blue"), task_id=task_id))
        await http2.aclose()
        events = await asyncio.wait_for(followed, timeout=60)
        await http.aclose()
        return asked, events

    asked, followed = asyncio.run(run())
    assert states(followed)[0] == S.TASK_STATE_INPUT_REQUIRED
    assert states(followed)[-1] == S.TASK_STATE_COMPLETED
    assert S.TASK_STATE_WORKING in states(followed)
    (artifact,) = [e.artifact_update.artifact for e in followed if e.HasField("artifact_update")]
    assert artifact.parts[1].text == "blue it is"


def test_cancel_a_waiting_task(live, openai_server):  # noqa: F811
    server, key = live
    openai_server.push(reply(tool_calls=[("ask_user", {"question": "Which one?"})]))

    async def run() -> tuple[Any, ...]:
        client, http = await _client(agent_url(server), key)
        asked = await _stream(client, message(new_text_part("Refund my order")))
        task_id = asked[0].task.id
        canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        await http.aclose()
        return asked, canceled

    asked, canceled = asyncio.run(run())
    assert states(asked)[-1] == S.TASK_STATE_INPUT_REQUIRED
    assert canceled.status.state == S.TASK_STATE_CANCELED
    assert Task.objects.get(pk=int(canceled.id)).status == TaskStatus.CANCELED


def test_other_tenants_tasks_wrong_keys_unpublished_agents_and_scopes(live, world, openai_server):  # noqa: F811
    server, key = live
    other = TenantFactory(name="t-other")
    openai_agent(other, openai_server, published=True)
    other_key = api_key_create(user=make_user(other, TetherRole.REQUESTER))
    openai_agent(world.tenant, openai_server, name="hidden")  # not published
    scoped = make_user(world.tenant, TetherRole.REQUESTER, username="scoped")
    RequesterScope.objects.create(tenant=world.tenant, user=scoped, agents=["support"])
    scoped_key = api_key_create(user=scoped)
    openai_server.push(reply('{"answer": "done"}'))

    async def run() -> None:
        client, http = await _client(agent_url(server), key)
        done = await _stream(client, message(new_text_part("Say done")))
        mine = done[0].task.id
        await http.aclose()
        # another tenant's key, on its own agent: t-main's task is not found
        theirs, http = await _client(agent_url(server, "t-other"), other_key)
        with pytest.raises(TaskNotFoundError):
            await theirs.get_task(GetTaskRequest(id=mine))
        with pytest.raises(TaskNotFoundError):
            await theirs.cancel_task(CancelTaskRequest(id=mine))
        assert list((await theirs.list_tasks(ListTasksRequest())).tasks) == []
        await http.aclose()
        # ... and on t-main's agent: no such agent for it
        intruder, http = await _client(agent_url(server), other_key)
        with pytest.raises(A2AClientError, match="HTTP Error 404"):
            await intruder.get_task(GetTaskRequest(id=mine))
        await http.aclose()
        # a wrong key is refused, as is none
        for bad in ("tth_not-a-key", None):
            wrong, http = await _client(agent_url(server), bad)
            with pytest.raises(A2AClientError, match="HTTP Error 401"):
                await wrong.get_task(GetTaskRequest(id=mine))
            await http.aclose()
        # a key whose scope leaves the agent out does not see it
        outside, http = await _client(agent_url(server), scoped_key)
        with pytest.raises(A2AClientError, match="HTTP Error 404"):
            await _stream(outside, message(new_text_part("Say done")))
        await http.aclose()
        # an unpublished agent has no card, as an unknown one has none
        async with httpx.AsyncClient() as anonymous:
            for agent in ("hidden", "nobody"):
                with pytest.raises(AgentCardResolutionError) as refused:
                    await A2ACardResolver(anonymous, agent_url(server, agent=agent)) \
                        .get_agent_card()
                assert refused.value.status_code == 404

    asyncio.run(run())
    assert Task.objects.filter(tenant=world.tenant).count() == 1
    assert not Task.objects.filter(tenant=other).exists()
