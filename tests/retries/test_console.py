"""The console: "Retry from step N" on a failed task, the links between a task
and its retry, and what a call waits for."""
from __future__ import annotations

import pytest
from django.test import Client

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tests.api.conftest import Tenancy
from tests.factories import submit
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)


def _login(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def failed(main: Tenancy) -> Task:
    add_tool(main.tenant, "echo", "echo")
    add_tool(main.tenant, "deny", "deny")
    add_agent(main.tenant, "shop", ["echo", "deny"])
    task = drive(submit(main.tenant, [{"tool": "echo", "args": {"n": 1}},
                                      {"tool": "deny", "args": {}}], agent="shop").pk)
    assert task.status == TaskStatus.FAILED
    return task


def test_an_operator_retries_from_the_failed_step_and_both_pages_link(main, failed):
    operator = _login(main.users["operator"])
    page = operator.get(f"/tasks/{failed.pk}/").content.decode()
    assert "Retry from step 2" in page
    assert "Retry from step" not in _login(main.users["requester"]).get(
        f"/tasks/{failed.pk}/").content.decode()

    response = operator.post(f"/tasks/{failed.pk}/retry/", {"from_step": 2, "comment": "again"})
    assert response.status_code == 302
    retry = Task.objects.get(retry_of=failed)
    assert response.url == f"/tasks/{retry.pk}/"
    new_page = operator.get(response.url).content.decode()
    assert f"Retry of <a href=\"/tasks/{failed.pk}/\">task #{failed.pk}</a> from step 2" in new_page
    assert "inherited" in new_page
    old_page = operator.get(f"/tasks/{failed.pk}/").content.decode()
    assert f"task #{retry.pk}</a>" in old_page
    assert Event.objects.get(task=failed, type="retried").actor == main.users["operator"].username


def test_a_bad_retry_form_is_refused_with_the_reason_and_changes_nothing(main, failed):
    operator = _login(main.users["operator"])
    for body, status in (({"from_step": 3}, 400), ({"from_step": "x"}, 400)):
        response = operator.post(f"/tasks/{failed.pk}/retry/", body)
        assert response.status_code == status
    requester = _login(main.users["requester"])
    assert requester.post(f"/tasks/{failed.pk}/retry/", {"from_step": 2}).status_code == 403
    assert not Task.objects.filter(retry_of=failed).exists()
