"""Model API keys: a secret of the task's own tenant, or a variable the operator
granted; resolved at call time, never sent when they are not the tenant's, and
redacted from whatever the endpoint echoes back."""
from __future__ import annotations

import json
import logging

import pytest
from django.conf import settings as django_settings

from accounts_app.services.secrets import secret_create, secret_rotate
from accounts_app.vault.values import MASK
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.factories import TenantFactory, submit
from tests.fakes.fixtures import KEY, KEY_SECRET, openai_agent
from tests.fakes.openai_server import Received, Scripted, error, reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)


def _stored(task_id: int) -> str:
    rows = [Task.objects.filter(pk=task_id).values().get(),
            *Step.objects.filter(task_id=task_id).values(),
            *Event.objects.filter(task_id=task_id).values()]
    return json.dumps(rows, default=str)


def test_the_key_is_the_tenants_secret_and_a_rotation_takes_effect(world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(reply('{"n": 1}'), reply('{"n": 2}'))
    first = drive(submit(world.tenant, None, agent="llm", goal="one").pk)
    secret_rotate(tenant_id=world.tenant.pk, name=KEY_SECRET, value="sk-rotated", actor=SYSTEM)
    second = drive(submit(world.tenant, None, agent="llm", goal="two").pk)

    assert first.status == second.status == TaskStatus.SUCCEEDED
    before, after = openai_server.requests
    assert before.headers["authorization"] == f"Bearer {KEY}"
    assert after.headers["authorization"] == "Bearer sk-rotated"


@pytest.mark.parametrize(
    ("model", "named"),
    [
        # written around the services (an old profile, a snapshot): refused at call time too
        ({"api_key_secret": None, "api_key_env": "SECRET_KEY"}, "SECRET_KEY"),
        ({"api_key_secret": None, "api_key_env": "DATABASE_URL"}, "DATABASE_URL"),
        ({"api_key_secret": "stolen"}, "'stolen'"),
    ],
)
def test_a_key_that_is_not_the_tenants_is_never_sent(world, openai_server, settings, model,
                                                     named):
    settings.TETHER_ENV_GRANTS = ("SECRET_KEY", "DATABASE_URL")  # never granted, even listed
    owner = TenantFactory(name="t-owner")
    secret_create(tenant_id=owner.pk, name="stolen", value="sk-owner-only", actor=SYSTEM)
    openai_agent(world.tenant, openai_server, model=model)
    openai_server.push(reply("should not be asked"))

    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert openai_server.requests == []  # nothing left the server
    assert task.status == TaskStatus.FAILED and task.failure_reason == "model_unavailable"
    assert named in task.failure_detail["detail"]["message"]
    stored = _stored(task.pk)
    assert django_settings.SECRET_KEY not in stored and "sk-owner-only" not in stored


def test_a_granted_variable_is_sent(world, openai_server, settings, monkeypatch):
    monkeypatch.setenv("TETHER_TEST_GRANTED_KEY", "sk-from-the-environment")
    settings.TETHER_ENV_GRANTS = ("t-main:TETHER_TEST_GRANTED_KEY",)
    openai_agent(world.tenant, openai_server,
                 model={"api_key_secret": None, "api_key_env": "TETHER_TEST_GRANTED_KEY"})
    openai_server.push(reply('{"ok": true}'))

    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-from-the-environment"


def _echo_key(status: int):  # type: ignore[no-untyped-def]
    def respond(request: Received) -> Scripted:
        if status == 200:
            return reply(f'{{"leak": "{request.headers["authorization"]}"}}')
        return error(status, f"bad key: {request.headers['authorization']}")
    return respond


def test_a_key_echoed_in_an_error_is_redacted(world, openai_server, caplog):
    caplog.set_level(logging.DEBUG)
    openai_agent(world.tenant, openai_server)
    openai_server.responder = _echo_key(401)

    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert openai_server.requests  # the key was sent to the endpoint ...
    assert task.status == TaskStatus.FAILED and task.failure_reason == "model_unavailable"
    assert f"Bearer {MASK}" in task.failure_detail["detail"]["message"]  # ... and came back masked
    assert KEY not in _stored(task.pk)
    assert KEY not in caplog.text


def test_a_key_echoed_in_a_reply_is_redacted(world, openai_server, caplog):
    caplog.set_level(logging.DEBUG)
    openai_agent(world.tenant, openai_server)
    openai_server.responder = _echo_key(200)

    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"leak": f"Bearer {MASK}"}
    assert KEY not in _stored(task.pk)
    assert KEY not in caplog.text
