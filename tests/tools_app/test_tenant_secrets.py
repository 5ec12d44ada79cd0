"""HTTP tools with tenant secrets, against a real HTTP listener on 127.0.0.1.

A tool's secret headers are rendered at call time with its own tenant's
secrets; a secret it cannot resolve stops the call before anything is sent;
whatever the downstream echoes back is redacted before it is stored or logged.
"""
from __future__ import annotations

import json
import logging

import pytest

from accounts_app.services.secrets import secret_create, secret_rotate
from accounts_app.vault.values import MASK
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tests.factories import TenantFactory, submit
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive
from tools_app.models import ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

VALUE = "pay-s3cret-0123456789"
ROTATED = "pay-s3cret-rotated-9876"
HEADERS = {"Authorization": "Bearer {secret:payments}", "X-Account": "acct-{secret:account}"}


def _tool(tenant, fake: FakeToolServer, secret_headers: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # Written as a row (not through the services) so that a reference the
    # services would refuse can be tried at call time too.
    add_tool(tenant, "charge", kind="http", url=fake.url("/charge"), side_effect="read",
             secret_headers=secret_headers, max_retries=0)
    add_agent(tenant, "payer", ["charge"])


def _run(tenant, calls: int = 1) -> Task:  # type: ignore[no-untyped-def]
    script = [{"tool": "charge", "args": {"n": i}} for i in range(calls)] + [{"final": {"ok": 1}}]
    return drive(submit(tenant, script, agent="payer").pk)


def _stored(task_id: int) -> str:
    """Everything the task left in the database, as text."""
    rows = [Task.objects.filter(pk=task_id).values().get(),
            *Step.objects.filter(task_id=task_id).values(),
            *Event.objects.filter(task_id=task_id).values(),
            *ToolExecution.objects.filter(task_id=task_id).values()]
    return json.dumps(rows, default=str)


def test_a_call_sends_the_tenants_secrets_and_after_rotation_the_new_value(world, fake_http):
    secret_create(tenant_id=world.tenant.pk, name="payments", value=VALUE, actor=SYSTEM)
    secret_create(tenant_id=world.tenant.pk, name="account", value="A-77", actor=SYSTEM)
    fake_http.on("POST", "/charge", Reply(200, {"charged": True}))
    _tool(world.tenant, fake_http, HEADERS)

    first = _run(world.tenant)
    secret_rotate(tenant_id=world.tenant.pk, name="payments", value=ROTATED, actor=SYSTEM)
    second = _run(world.tenant)

    assert first.status == second.status == TaskStatus.SUCCEEDED
    before, after = fake_http.requests_to("POST", "/charge")
    assert (before.headers["authorization"], before.headers["x-account"]) == (
        f"Bearer {VALUE}", "acct-A-77")
    assert after.headers["authorization"] == f"Bearer {ROTATED}"
    for task in (first, second):
        assert VALUE not in _stored(task.pk) and ROTATED not in _stored(task.pk)


def test_another_tenants_secret_is_never_sent(world, fake_http):
    secret_create(tenant_id=world.tenant.pk, name="payments", value=VALUE, actor=SYSTEM)
    thief = TenantFactory(name="t-thief")
    fake_http.on("POST", "/charge", Reply(200, {"charged": True}))
    _tool(thief, fake_http, {"Authorization": "Bearer {secret:payments}"})

    task = _run(thief)

    assert fake_http.requests == []  # nothing left the server
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED
    assert step.error["type"] == "secret_unavailable"
    assert "'payments' does not exist in this tenant" in step.error["message"]
    assert task.status == TaskStatus.FAILED
    assert VALUE not in _stored(task.pk)


@pytest.mark.parametrize("template", ["SECRET_KEY", "TETHER_SECRET_PAYMENTS", "{secret:Bad}"])
def test_a_header_that_is_not_a_secret_template_sends_nothing(world, fake_http, template):
    fake_http.on("POST", "/charge", Reply(200, {"charged": True}))
    _tool(world.tenant, fake_http, {"X-Key": template})

    task = _run(world.tenant)

    assert fake_http.requests == []
    step = Step.objects.get(task=task, step_no=1)
    assert step.error["type"] == "secret_unavailable" and "X-Key" in step.error["message"]


def test_what_a_downstream_echoes_back_is_redacted(world, fake_http, caplog):
    caplog.set_level(logging.DEBUG)
    secret_create(tenant_id=world.tenant.pk, name="payments", value=VALUE, actor=SYSTEM)
    secret_create(tenant_id=world.tenant.pk, name="account", value="A-77", actor=SYSTEM)

    def echo_error(request: Recorded) -> Reply:
        return Reply(400, {"you_sent": request.headers})

    def echo_result(request: Recorded) -> Reply:
        return Reply(200, {"token": request.headers["authorization"],
                           request.headers["authorization"]: "as a key"})

    fake_http.on("POST", "/charge", echo_error, echo_result)
    _tool(world.tenant, fake_http, HEADERS)

    task = _run(world.tenant, calls=2)

    assert task.status == TaskStatus.SUCCEEDED
    assert len(fake_http.requests_to("POST", "/charge")) == 2  # the secret was sent ...
    failed, echoed = Step.objects.filter(task=task, step_no__in=[1, 2]).order_by("step_no")
    # ... and what came back has it masked, in the error body and in the result
    assert failed.error["body"]["you_sent"]["authorization"] == f"Bearer {MASK}"
    assert echoed.output == {"token": f"Bearer {MASK}", f"Bearer {MASK}": "as a key"}
    stored = _stored(task.pk)
    assert VALUE not in stored and "A-77" not in stored
    assert VALUE not in caplog.text


def test_the_status_query_sends_the_secret_and_its_echo_is_redacted(world, fake_http):
    secret_create(tenant_id=world.tenant.pk, name="payments", value=VALUE, actor=SYSTEM)
    fake_http.on("POST", "/charge", Reply(200, {}, hold=fake_http.hold()))  # times out
    fake_http.on("GET", "/status/*", lambda request: Reply(200, {
        "state": "succeeded", "result": {"seen": request.headers["authorization"]}}))
    add_tool(world.tenant, "charge", kind="http", url=fake_http.url("/charge"),
             side_effect="write", timeout_s=0.5, max_retries=0,
             status_url=fake_http.url("/status/{key}"),
             secret_headers={"Authorization": "Bearer {secret:payments}"})
    add_agent(world.tenant, "payer", ["charge"])

    task = _run(world.tenant)

    (query,) = fake_http.requests_to("GET", "/status/*")
    assert query.headers["authorization"] == f"Bearer {VALUE}"
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.SUCCEEDED and step.output == {"seen": f"Bearer {MASK}"}
    assert VALUE not in _stored(task.pk)
