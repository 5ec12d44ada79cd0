"""The A2A server in this process (the SDK's client over httpx's ASGI
transport, the manual runner driven here): the state mapping of waits for a
person, and the messages and callers it refuses without writing anything."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import AgentCardResolutionError
from a2a.helpers.proto_helpers import new_data_part, new_text_part, new_url_part
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, InvalidRequestError, TaskNotFoundError

from a2a_app.app import application
from a2a_app.states import STATE_OF
from accounts_app.models import Role as TetherRole
from accounts_app.services.accounts import api_key_create
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tests.factories import submit
from tests.fakes.runtime import add_tool
from tests.helpers import drive
from workflows_app.services.workflows import workflow_create

pytestmark = pytest.mark.django_db(transaction=True)

URL = "http://tether.test/a2a/t-main/support"
REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 500,
                                           "reason": "damaged"}, "reason": "damaged"}


HOW_TO = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "a2a.md"


def test_every_task_status_has_an_a2a_state_and_the_how_to_shows_the_same_table() -> None:
    assert set(STATE_OF) == set(TaskStatus)
    rows = re.findall(r"^\| `(\w+)` \| `TASK_STATE_(\w+)` \|", HOW_TO.read_text(), re.M)
    assert dict(rows) == {status.value: TaskState.Name(state).removeprefix("TASK_STATE_")
                          for status, state in STATE_OF.items()}


def _call(key: str, call: Any, url: str = URL) -> Any:
    async def run() -> Any:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, timeout=30,
                                     headers={"Authorization": f"Bearer {key}"}) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            return await call(client)

    return asyncio.run(run())


def _send(*parts: Any) -> Any:
    request = SendMessageRequest(
        message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts)),
        configuration=SendMessageConfiguration(return_immediately=True))

    async def call(client: Any) -> Any:
        return [event async for event in client.send_message(request)]

    return call


@pytest.fixture
def published(world):  # type: ignore[no-untyped-def]
    AgentProfile.objects.filter(tenant=world.tenant, name="support").update(published=True)
    return world


def test_waits_for_a_person_map_to_input_and_auth_required(published) -> None:
    requester = published.users[TetherRole.REQUESTER]
    key = api_key_create(user=requester)
    asking = drive(submit(published.tenant, [{"ask": "Which order?"}, {"final": {"ok": 1}}],
                          requester=requester).pk)
    approving = drive(submit(published.tenant, [REFUND, {"final": {"ok": 1}}],
                             requester=requester).pk)
    assert (asking.status, approving.status) == (TaskStatus.WAITING_FOR_INPUT,
                                                 TaskStatus.WAITING_FOR_APPROVAL)

    async def read(client: Any) -> Any:
        waiting_on_reviewers = ListTasksRequest(status=TaskState.TASK_STATE_AUTH_REQUIRED)
        return (await client.get_task(GetTaskRequest(id=str(asking.pk))),
                await client.get_task(GetTaskRequest(id=str(approving.pk))),
                await client.list_tasks(waiting_on_reviewers))

    question, approval, listed = _call(key, read)
    assert question.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert question.status.message.parts[0].text == "Which order?"
    assert question.history[0].parts[0].text == "test goal"
    assert approval.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert approval.status.message.parts[0].text == \
        "waiting for a reviewer to approve a call of issue_refund"
    assert [t.id for t in listed.tasks] == [str(approving.pk)]


@pytest.mark.parametrize(("parts", "refusal"), [
    ([new_url_part("https://example.com/a.pdf")], "text and data parts only"),
    ([new_data_part({"order_id": "A-1"})], "needs a text part"),
    ([new_text_part("Refund A-1"), new_data_part(["A-1"])], "must be a JSON object"),
    # the support agent is scripted: nothing over A2A can give it a script
    ([new_text_part("Refund A-1")], "a scripted agent needs a script"),
])
def test_a_message_tether_cannot_take_is_invalid_params_and_writes_nothing(
        published, parts: list[Any], refusal: str) -> None:
    key = api_key_create(user=published.users[TetherRole.REQUESTER])
    with pytest.raises(InvalidParamsError) as refused:
        _call(key, _send(*parts))
    assert refusal in f"{refused.value.message} {refused.value.data}"
    assert not Task.objects.exists()


def test_a_role_that_may_not_submit_is_refused_and_unknown_ids_are_not_found(published) -> None:
    key = api_key_create(user=published.users[TetherRole.REVIEWER])
    with pytest.raises(InvalidRequestError, match="the reviewer role may not do task.submit"):
        _call(key, _send(new_text_part("Refund A-1")))
    for task_id in ("12345", "not-a-number"):
        with pytest.raises(TaskNotFoundError):
            _call(key, lambda client, task_id=task_id: client.get_task(GetTaskRequest(id=task_id)))
    assert not Task.objects.exists()


WORKFLOW_URL = "http://tether.test/a2a/t-main/workflows/greet"
GREET = {"inputs": {"type": "object", "properties": {"who": {"type": "string"}},
                    "required": ["who"]},
         "nodes": [{"id": "say", "tool": "echo", "args": {"who": "${inputs.who}"}}],
         "output": {"greeted": "${nodes.say.echo.who}"}}


def test_a_published_workflow_shows_its_inputs_and_a_message_runs_it(published) -> None:
    add_tool(published.tenant, "echo", "echo")
    workflow_create(tenant_id=published.tenant.pk, name="greet", definition=GREET,
                    description="Greets someone.", published=True, actor=SYSTEM)
    workflow_create(tenant_id=published.tenant.pk, name="secret", definition=GREET, actor=SYSTEM)
    key = api_key_create(user=published.users[TetherRole.REQUESTER])

    async def read_card() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application)) as http:
            return await A2ACardResolver(http, WORKFLOW_URL).get_agent_card()

    card = asyncio.run(read_card())
    (sent,) = _call(key, _send(new_data_part({"who": "ada"})), WORKFLOW_URL)
    assert card.name == "greet" and [s.id for s in card.skills] == ["greet"]
    (extension,) = card.capabilities.extensions
    assert extension.params["inputs"]["required"] == ["who"]
    assert card.supported_interfaces[0].url == WORKFLOW_URL
    run = drive(int(sent.task.id))
    assert run.status == TaskStatus.SUCCEEDED and run.result == {"greeted": "ada"}
    assert run.workflow_run.workflow.name == "greet"
    got = _call(key, lambda client: client.get_task(GetTaskRequest(id=sent.task.id)),
                WORKFLOW_URL)
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    # the run is the workflow's, not an agent's
    with pytest.raises(TaskNotFoundError):
        _call(key, lambda client: client.get_task(GetTaskRequest(id=sent.task.id)))
    # an input its schema refuses: the schema's words, nothing written
    with pytest.raises(InvalidParamsError, match="inputs"):
        _call(key, _send(new_data_part({"who": 7})), WORKFLOW_URL)
    assert Task.objects.count() == 1
    # an unpublished workflow has no card
    with pytest.raises(AgentCardResolutionError):
        _call(key, _send(new_data_part({"who": "ada"})), WORKFLOW_URL.replace("greet", "secret"))


def test_the_body_limit_stands_in_front_of_a2a(published, settings) -> None:
    """`config.asgi` routes /a2a/ behind the same request-body limit as Django."""
    from config.asgi import application as server

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    key = api_key_create(user=published.users[TetherRole.REQUESTER])
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "big", "role": "ROLE_USER", "parts": [{"text": "x" * 4096}]}}}

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server)) as http:
            return await http.post(URL, json=body, headers={
                "Authorization": f"Bearer {key}", "A2A-Version": "1.0"})

    assert asyncio.run(post()).status_code == 413
    assert not Task.objects.exists()


def test_a_key_scoped_to_another_agent_does_not_find_this_one(published) -> None:
    from accounts_app.models import ApiKey
    from approvals_app.policy import agents_in_scope

    requester = published.users[TetherRole.REQUESTER]
    scoped_raw, plain_raw = api_key_create(user=requester), api_key_create(user=requester)
    ApiKey.objects.filter(prefix=scoped_raw[:12]).update(agents=["triage"])
    scoped = ApiKey.objects.get(prefix=scoped_raw[:12])
    assert agents_in_scope(tenant_id=published.tenant.pk, requester_id=requester.pk,
                           api_key_id=scoped.pk) == frozenset({"triage"})

    async def rpc(raw: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport) as http:
            return await http.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                              "params": {"id": "1"}},
                                   headers={"Authorization": f"Bearer {raw}"})

    refused = asyncio.run(rpc(scoped_raw))
    assert refused.status_code == 404 and "no agent 'support' here" in refused.text
    assert asyncio.run(rpc(plain_raw)).status_code != 404  # the same user's unscoped key
