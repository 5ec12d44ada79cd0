"""HTTP tools against a local fake service (docs/how-to/tools.md, "HTTP tools")."""
from __future__ import annotations

import re
from email.utils import format_datetime

import pytest
from django.utils import timezone

from accounts_app.services.secrets import secret_create
from approvals_app.models import Reconciliation
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepStatus, Task
from tests.factories import submit
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.fakes.runtime import add_agent, add_tool, assert_log_consistent, events_of
from tests.helpers import drive
from tools_app.models import Tool, ToolExecution
from tools_app.outbound.retry_after import retry_after_s

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"ok": True}}
RESULT_SCHEMA = {"type": "object", "required": ["refund_id"],
                 "properties": {"refund_id": {"type": "string"}}}


def _http_tool(world, fake: FakeToolServer, *, side_effect: str = "idempotent_write",  # type: ignore[no-untyped-def]
               status_url: str = "", **fields):
    add_tool(world.tenant, "remote", kind="http", url=fake.url("/refunds"), side_effect=side_effect,
             status_url=status_url, result_schema=RESULT_SCHEMA, **fields)
    add_agent(world.tenant, "remote-agent", ["remote"])


def _run(world, args: dict | None = None) -> Task:  # type: ignore[no-untyped-def]
    task = submit(world.tenant, [{"tool": "remote", "args": args or {"order": "A-1", "cents": 500}},
                                 FINAL], agent="remote-agent")
    return drive(task.pk)


def test_a_call_sends_the_arguments_and_the_tether_headers(world, fake_http):
    secret_create(tenant_id=world.tenant.pk, name="remote-token", value="s3cret", actor=SYSTEM)
    fake_http.on("POST", "/refunds", Reply(201, {"refund_id": "rf_1"}))
    _http_tool(world, fake_http, secret_headers={"Authorization": "Bearer {secret:remote-token}"})
    task = _run(world)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.SUCCEEDED and step.output == {"refund_id": "rf_1"}
    (request,) = fake_http.requests_to("POST", "/refunds")
    assert request.body == {"order": "A-1", "cents": 500}
    assert request.headers["idempotency-key"] == step.idempotency_key
    assert request.headers["x-tether-task"] == str(task.pk)
    assert re.fullmatch(rf"00-{task.trace_id}-[0-9a-f]{{16}}-01", request.headers["traceparent"])
    assert request.headers["authorization"] == "Bearer s3cret"  # from the tenant's secret ...
    # ... never stored on the tool
    assert "s3cret" not in str(Tool.objects.filter(name="remote").values().get())
    assert_log_consistent(task.pk)


def test_a_result_failing_the_result_schema_is_a_business_error(world, fake_http):
    fake_http.on("POST", "/refunds", Reply(200, {"refund": 5}))
    _http_tool(world, fake_http)
    task = _run(world)
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "invalid_result"
    assert task.status == TaskStatus.SUCCEEDED  # the model got the error and went on


@pytest.mark.parametrize("reply", [Reply(200, body=b"<html>ok</html>"), Reply(204, body=b"")])
def test_a_2xx_without_json_is_a_business_error(world, fake_http, reply):
    fake_http.on("POST", "/refunds", reply)
    _http_tool(world, fake_http)
    task = _run(world)
    assert Step.objects.get(task=task, step_no=1).error["type"] == "invalid_result"


def test_an_oversized_answer_is_refused(world, fake_http, settings):
    settings.TETHER = {**settings.TETHER, "MAX_TOOL_RESULT_BYTES": 2048}
    fake_http.on("POST", "/refunds", Reply(200, {"refund_id": "x" * 10_000}))
    _http_tool(world, fake_http)
    task = _run(world)
    assert Step.objects.get(task=task, step_no=1).error["type"] == "result_too_large"
    assert task.status == TaskStatus.SUCCEEDED


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_client_errors_are_business_errors_back_to_the_model(world, fake_http, status):
    fake_http.on("POST", "/refunds", Reply(status, {"detail": "order A-1 is not refundable"}))
    _http_tool(world, fake_http, max_retries=3)
    task = _run(world)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED
    assert step.error == {"type": "http_error", "status": status,
                          "body": {"detail": "order A-1 is not refundable"}}
    assert len(fake_http.requests_to("POST", "/refunds")) == 1  # not retried
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_stop_the_task(world, fake_http, status):
    fake_http.on("POST", "/refunds", Reply(status, {"detail": "no"}))
    _http_tool(world, fake_http, max_retries=3)
    task = _run(world)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    assert Step.objects.get(task=task, step_no=1).error["status"] == status
    assert len(fake_http.requests_to("POST", "/refunds")) == 1


@pytest.mark.parametrize("first", [
    Reply(429, {"detail": "slow down"}, headers={"Retry-After": "1"}),
    Reply(503, {"detail": "maintenance"}),
    Reply(500, body=b"Internal Server Error"),
    Reply(408, {}),
])
def test_transient_errors_are_retried_with_the_same_key(world, fake_http, first):
    fake_http.on("POST", "/refunds", first, Reply(200, {"refund_id": "rf_2"}))
    _http_tool(world, fake_http, max_retries=2)
    task = _run(world)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.SUCCEEDED and step.attempt == 1
    calls = fake_http.requests_to("POST", "/refunds")
    assert len(calls) == 2
    assert {c.headers["idempotency-key"] for c in calls} == {step.idempotency_key}
    (retry,) = events_of(task.pk, "retryable_error")
    assert retry.payload["error"]["status"] == first.status
    if "Retry-After" in first.headers:
        assert retry.payload["delay_s"] >= 1.0  # the service's wish is honoured
    assert_log_consistent(task.pk)


def test_retry_after_as_an_http_date():
    from httpx import Response

    later = timezone.now() + timezone.timedelta(seconds=30)
    delay = retry_after_s(Response(429, headers={"Retry-After": format_datetime(
        later, usegmt=True)}).headers)
    assert delay is not None and 25 <= delay <= 31
    assert retry_after_s(Response(429, headers={"Retry-After": "soon"}).headers) is None


def test_a_read_timing_out_is_retried(world, fake_http):
    fake_http.on("POST", "/refunds", Reply(200, {"refund_id": "late"}, hold=fake_http.hold()),
                 Reply(200, {"refund_id": "rf_3"}))
    _http_tool(world, fake_http, side_effect="read", timeout_s=0.5, max_retries=1)
    task = _run(world)
    assert task.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=task, step_no=1).output == {"refund_id": "rf_3"}
    assert len(fake_http.requests_to("POST", "/refunds")) == 2


def _status_from_posts(fake: FakeToolServer, state: str):  # type: ignore[no-untyped-def]
    def answer(request: Recorded) -> Reply:
        key = request.path.rsplit("/", 1)[-1]
        posted = [r for r in fake.requests_to("POST",
                                              "/refunds") if r.headers["idempotency-key"] == key]
        if state == "succeeded" and posted:
            return Reply(200, {"state": "succeeded", "result": {"refund_id": "rf_from_status"}})
        return Reply(200, {"state": state})
    return answer


def test_a_write_timing_out_is_settled_by_its_status_url(world, fake_http):
    fake_http.on("POST", "/refunds", Reply(200, {"refund_id": "never seen"}, hold=fake_http.hold()))
    fake_http.on("GET", "/status/*", _status_from_posts(fake_http, "succeeded"))
    _http_tool(world, fake_http, side_effect="write", timeout_s=0.5, max_retries=3,
               status_url=fake_http.url("/status/{key}"))
    task = _run(world)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.SUCCEEDED and step.output == {"refund_id": "rf_from_status"}
    assert len(fake_http.requests_to("POST", "/refunds")) == 1  # exactly one POST: no replay
    (query,) = fake_http.requests_to("GET", "/status/*")
    assert query.path == f"/status/{step.idempotency_key}"
    assert query.headers["idempotency-key"] == step.idempotency_key
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == "SUCCEEDED" and ledger.status_answer["state"] == "succeeded"
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("state", ["failed", "not_found"])
def test_a_status_url_saying_it_did_not_happen_settles_the_step_as_failed(world, fake_http, state):
    fake_http.on("POST", "/refunds", Reply(200, {}, hold=fake_http.hold()))
    fake_http.on("GET", "/status/*", Reply(200 if state == "failed" else 404, {"state": state}))
    _http_tool(world, fake_http, side_effect="write", timeout_s=0.5,
               status_url=fake_http.url("/status/{key}"))
    task = _run(world)
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "not_performed"
    assert task.status == TaskStatus.SUCCEEDED
    assert len(fake_http.requests_to("POST", "/refunds")) == 1


@pytest.mark.parametrize("status_reply", [
    Reply(200, {"state": "unknown"}),
    Reply(200, {"state": "maybe"}),
    Reply(500, body=b"oops"),
    None,  # no status URL at all
])
def test_a_write_whose_outcome_stays_unknown_opens_a_reconciliation(world, fake_http, status_reply):
    fake_http.on("POST", "/refunds", Reply(200, {}, hold=fake_http.hold()))
    if status_reply is not None:
        fake_http.on("GET", "/status/*", status_reply)
    _http_tool(world, fake_http, side_effect="write", timeout_s=0.5, max_retries=3,
               status_url=fake_http.url("/status/{key}") if status_reply else "")
    task = _run(world)

    assert task.status == TaskStatus.WAITING_FOR_RECONCILIATION
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.UNCERTAIN
    rec = Reconciliation.objects.get(task=task)
    assert rec.idempotency_key == step.idempotency_key and rec.status_answer["state"] == "unknown"
    assert len(fake_http.requests_to("POST", "/refunds")) == 1
    assert_log_consistent(task.pk)


def test_an_idempotent_write_timing_out_is_retried_with_its_key(world, fake_http):
    fake_http.on("POST", "/refunds", Reply(200, {}, hold=fake_http.hold()),
                 Reply(200, {"refund_id": "rf_4"}))
    _http_tool(world, fake_http, side_effect="idempotent_write", timeout_s=0.5, max_retries=2)
    task = _run(world)
    assert task.status == TaskStatus.SUCCEEDED
    keys = {r.headers["idempotency-key"] for r in fake_http.requests_to("POST", "/refunds")}
    assert keys == {Step.objects.get(task=task, step_no=1).idempotency_key}
