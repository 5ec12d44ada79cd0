"""OpenTelemetry traces in production mode: a task run by a real Celery worker
and decided on by a person through a real ASGI server (daphne), its spans
exported over OTLP/HTTP to a receiver at the edge of the process (the
`opentelemetry-proto` messages decoded), all under the task's trace id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval
from foundations.tracing import root_span_id
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import make_user
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - a fixture
from tests.fakes.http_tool_server import FakeToolServer, Reply
from tests.fakes.openai_server import reply
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.fakes.runtime import add_tool
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SERVER_KIND = 2  # SPAN_KIND_SERVER in the OTLP messages
CLIENT_KIND = 3


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def tool_service() -> Iterator[FakeToolServer]:
    server = FakeToolServer()
    try:
        yield server
    finally:
        server.close()



def _traced(receiver: OtlpReceiver) -> dict[str, str]:
    # Exported within a tenth of a second: the test polls the receiver.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "tether-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100"}


def _post(url: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as res:  # noqa: S310 - local server
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def _parent(span: ReceivedSpan, spans: list[ReceivedSpan]) -> ReceivedSpan:
    (parent,) = [s for s in spans if s.span_id == span.parent_span_id]
    return parent


def _complete_lines(path: Path) -> list[str]:
    text = path.read_text(errors="replace")
    return [line for line in text[:text.rfind("\n") + 1].splitlines() if line]


def test_a_tasks_spans_reach_an_otlp_receiver_under_its_trace_id(
        world, celery_workers, web, openai_server, receiver, tool_service):  # noqa: F811
    worker = celery_workers.start(env={**_traced(receiver), "LOG_FORMAT": "json"},
                                  log_level="info")
    server = web(**_traced(receiver), TETHER_RUNNER="celery",
                 CELERY_BROKER_URL=celery_workers.broker_url, CELERY_QUEUE=celery_workers.queue)

    tool_service.on("POST", "/refunds", Reply(201, {"refund_id": "rf_1"}))
    add_tool(world.tenant, "remote_refund", kind="http", url=tool_service.url("/refunds"),
             side_effect="idempotent_write", requires_approval=True, risk="high",
             result_schema={"type": "object"})
    openai_agent(world.tenant, openai_server, tools=["lookup_order", "remote_refund"])
    openai_server.push(
        reply(tool_calls=[("lookup_order", {"order_id": "A-1"})], usage=(100, 20)),
        reply(tool_calls=[("remote_refund", {"order": "A-1", "cents": 500})], usage=(120, 30)),
        reply('{"answer": "refunded"}', usage=(150, 10)),
    )
    # submitted through the web process: the request's span links to the task's trace
    requester = api_key_create(user=make_user(world.tenant, Role.REQUESTER, username="traced-req"))
    status, created = _post(f"{server.url}/api/v1/tasks", requester,
                            {"goal": "Refund order A-1", "agent": "llm", "input": {}})
    assert status == 201, created
    task = Task.objects.get(pk=created["id"])
    trace_id = task.trace_id

    # The task waits for a person, who approves through the web process.
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_APPROVAL,
             timeout=60, message="the task to wait for approval")
    approval = Approval.objects.get(task=task)
    token = api_key_create(user=make_user(world.tenant, Role.REVIEWER, username="traced-rev"))
    status, _ = _post(f"{server.url}/api/v1/approvals/{approval.pk}/approve", token,
                      {"comment": "fine"})
    assert status == 200
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.SUCCEEDED, timeout=60,
             message="the task to succeed")

    root_id = format(root_span_id(trace_id), "016x")

    def complete() -> list[ReceivedSpan] | None:
        # each process sends its spans on its own: wait for the last ones of each
        spans = receiver.spans_of(trace_id)
        names = {s.name for s in spans} | {"root" for s in spans if s.span_id == root_id}
        return spans if {"root", "step final", "human approval_granted"} <= names else None

    spans = wait_for(complete, timeout=30, message="the task's spans")
    # every span of the task is in its trace, under its root span
    root = next(s for s in spans if s.span_id == root_id)
    assert root.name == "invoke_agent llm" and root.parent_span_id == ""
    assert root.attributes["tether.task.status"] == "SUCCEEDED"
    assert root.attributes["tether.task.id"] == task.pk

    steps = sorted((s for s in spans if s.name.startswith("step ")),
                   key=lambda s: s.attributes["tether.step.no"])
    assert [(s.name, s.attributes["tether.step.no"]) for s in steps] == [
        ("step tool_call", 1), ("step tool_call", 2), ("step tool_call", 2), ("step final", 3)]
    assert {s.parent_span_id for s in steps} == {root_id}
    assert all(s.resource["service.name"] == "tether-test" for s in steps)
    assert {s.resource["tether.process.kind"] for s in steps} == {"worker"}

    # each model request: a `chat` client span with the GenAI attributes and the usage
    chats = sorted(_named(spans, "chat primary"), key=lambda s: s.start_ns)
    assert [(c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"],
             c.attributes["gen_ai.response.finish_reasons"]) for c in chats] == [
        (100, 20, ["tool_calls"]), (120, 30, ["tool_calls"]), (150, 10, ["stop"])]
    for chat in chats:
        assert chat.kind == CLIENT_KIND
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "primary"
        assert _parent(chat, spans).name.startswith("step ")
    # the model server got the chat span's own traceparent
    sent = [r.headers["traceparent"] for r in openai_server.requests]
    assert sent == [f"00-{trace_id}-{c.span_id}-01" for c in chats]

    # each tool call: an `execute_tool` span; the HTTP tool got its very span id
    (lookup,) = _named(spans, "execute_tool lookup_order")
    assert lookup.attributes["gen_ai.tool.name"] == "lookup_order"
    assert lookup.attributes["gen_ai.tool.call.id"] == "step_1"
    assert lookup.attributes["gen_ai.tool.type"] == "function"
    (remote,) = _named(spans, "execute_tool remote_refund")
    assert remote.attributes["gen_ai.tool.call.id"] == "step_2"
    assert remote.attributes["tether.tool.outcome"] == "ok"
    assert _parent(remote, spans) is not None
    (request,) = tool_service.requests_to("POST", "/refunds")
    version, sent_trace, parent_id, flags = request.headers["traceparent"].split("-")
    assert (sent_trace, parent_id) == (trace_id, remote.span_id)

    # a person's part: asked in the worker's step, answered in the web process
    asked = [s for s in steps if any(name == "approval_requested" for name, _ in s.events)]
    assert len(asked) == 1 and asked[0].attributes["tether.step.no"] == 2
    (granted,) = _named(spans, "human approval_granted")
    assert granted.parent_span_id == root_id
    assert granted.resource["tether.process.kind"] == "web"
    (event,) = granted.events
    assert event[0] == "approval_granted" and event[1]["tether.actor.role"] == "reviewer"
    # ... linked to the request that carried the decision (Django's instrumentation)
    ((request_trace, request_span),) = granted.links
    requests = wait_for(lambda: [s for s in receiver.spans_of(request_trace)
                                 if s.span_id == request_span], message="the request's span")
    assert requests[0].kind == SERVER_KIND and "approve" in requests[0].name

    root_context = (trace_id, root_id)
    (submission,) = [s for s in receiver.spans if root_context in s.links]
    assert submission.kind == SERVER_KIND and submission.name.startswith("POST")
    assert submission.resource["tether.process.kind"] == "web"

    # psycopg's instrumentation: the steps' SQL is in the task's trace
    assert any(s.attributes.get("db.system") == "postgresql" or
               s.attributes.get("db.system.name") == "postgresql" for s in spans)
    # Celery's: each step links to the message that carried its slice
    linked = {link for s in steps for link in s.links}

    def carried(trace: str, span_id: str) -> bool:  # a run span ends after its slice
        return any(x.span_id == span_id and x.name.startswith("run/")
                   for x in receiver.spans_of(trace))

    assert linked
    wait_for(lambda: all(carried(t, span_id) for t, span_id in linked),
             message="the Celery spans the steps link to")

    # The worker's JSON log lines carry the task's trace id and the step's span id.
    def step_lines() -> list[dict[str, Any]]:
        records = [json.loads(line) for line in _complete_lines(worker.log_path)
                   if line.startswith("{")]
        return [r for r in records if r.get("logger") == "tether.step"]

    lines = wait_for(lambda: len(step_lines()) >= 4 and step_lines(), message="four step lines")
    assert {r["trace_id"] for r in lines} == {trace_id}
    assert {r["span_id"] for r in lines} == {s.span_id for s in steps}


def test_a_question_and_its_answer_are_span_events_of_the_tasks_trace(
        world, celery_workers, web, receiver):
    celery_workers.start(env=_traced(receiver))
    server = web(**_traced(receiver), TETHER_RUNNER="celery",
                 CELERY_BROKER_URL=celery_workers.broker_url, CELERY_QUEUE=celery_workers.queue)
    token = api_key_create(user=make_user(world.tenant, Role.REQUESTER, username="asker"))
    status, created = _post(f"{server.url}/api/v1/tasks", token, {
        "goal": "Help", "agent": "support",
        "script": [{"ask": "Which order do you mean?"}, {"final": {"answer": "A-1"}}]})
    assert status == 201, created
    task_id, trace_id = created["id"], created["trace_id"]
    wait_for(lambda: Task.objects.get(pk=task_id).status == TaskStatus.WAITING_FOR_INPUT,
             timeout=60, message="the question")
    status, _ = _post(f"{server.url}/api/v1/tasks/{task_id}/input", token, {"answer": "A-1"})
    assert status == 200
    wait_for(lambda: Task.objects.get(pk=task_id).status == TaskStatus.SUCCEEDED, timeout=60,
             message="the task to succeed")

    def both() -> list[ReceivedSpan] | None:
        spans = receiver.spans_of(trace_id)
        names = {s.name for s in spans}
        return spans if {"step ask_user", "human question_answered", "step final"} <= names \
            else None

    spans = wait_for(both, timeout=30, message="the question's spans")
    (asked,) = _named(spans, "step ask_user")
    assert [name for name, _ in asked.events] == ["question_asked"]
    (answered,) = _named(spans, "human question_answered")
    assert [name for name, _ in answered.events] == ["question_answered"]
    assert answered.events[0][1]["tether.actor.role"] == "requester"
    # the person answered after the step that asked, and the next step followed
    (final,) = _named(spans, "step final")
    assert asked.start_ns <= answered.start_ns <= final.start_ns
