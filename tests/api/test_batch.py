"""`POST /api/v1/tasks/batch`: up to 1,000 tasks, each with its own key and the
checks of a single submission, all or none; one answer listing each task's id
or its field errors."""
from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import Event, Task

from .conftest import Tenancy

pytestmark = pytest.mark.django_db

REQ = Role.REQUESTER
SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


def _task(key: str, **over: Any) -> dict[str, Any]:
    return {"agent": "support", "goal": f"goal of {key}", "input": {"k": key}, "script": SCRIPT,
            "idempotency_key": key, **over}


def test_a_batch_creates_every_task_with_its_event_and_a_resend_returns_the_same(
        main: Tenancy) -> None:
    tasks = [_task(f"k-{i}") for i in range(5)]
    response = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": tasks}, format="json")

    assert response.status_code == 201, response.content
    entries = response.json()["tasks"]
    assert [(e["index"], e["created"]) for e in entries] == [(i, True) for i in range(5)]
    stored = {t.pk: t for t in Task.objects.filter(pk__in=[e["task_id"] for e in entries])}
    for entry, sent in zip(entries, tasks, strict=True):
        task = stored[entry["task_id"]]
        assert (task.tenant_id, task.goal, task.input, task.idempotency_key, task.requester_id) == (
            main.tenant.pk, sent["goal"], sent["input"], sent["idempotency_key"],
            main.requester.pk)
        assert task.agent_snapshot["name"] == "support" and task.agent_version
    assert Event.objects.filter(task_id__in=stored, type="task_created").count() == 5

    again = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": tasks}, format="json")
    assert again.status_code == 200
    assert again.json()["tasks"] == [{**e, "created": False} for e in entries]
    assert Task.objects.filter(tenant=main.tenant).count() == 5


def test_a_batch_task_is_the_task_a_single_submission_with_its_key_makes(main: Tenancy) -> None:
    """One rule for both: a key used by a single submission, sent in a batch with
    the same body, is that task; with another body it is refused."""
    body = _task("shared")
    key = body.pop("idempotency_key")
    single = main.client(REQ).post("/api/v1/tasks", body, format="json",
                                   HTTP_IDEMPOTENCY_KEY=key)
    assert single.status_code == 201

    same = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": [_task("shared")]},
                                 format="json")
    assert same.status_code == 200
    assert same.json()["tasks"] == [{"index": 0, "task_id": single.json()["id"],
                                     "created": False}]

    changed = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": [
        _task("fresh"), _task("shared", goal="another goal")]}, format="json")
    assert changed.status_code == 400
    [refused] = changed.json()["error"]["details"]["tasks"]
    assert refused["index"] == 1 and "idempotency_key" in refused["errors"]
    assert not Task.objects.filter(idempotency_key="fresh").exists()  # all or none


def test_a_batch_with_refused_tasks_writes_nothing_and_names_each_refusal(
        main: Tenancy) -> None:
    tasks = [
        _task("ok-1"),
        _task("no-agent", agent="nobody"),
        _task("no-goal", goal=""),
        _task("no-script", script=None),
        _task("ok-1"),  # the same key twice in one batch
        _task("flow", workflow="some-flow", agent=None),
    ]
    tasks[5].pop("agent")
    response = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": tasks}, format="json")

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    # the serializer's checks first (shape, goal, workflow): each task's by its index
    assert {e["index"]: sorted(e["errors"]) for e in error["details"]["tasks"]} == {
        2: ["goal"], 5: ["workflow"]}
    assert not Task.objects.filter(tenant=main.tenant).exists()

    del tasks[5], tasks[2]
    response = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": tasks}, format="json")
    assert response.status_code == 400, response.content
    # then the service's: the agent, the script, the keys
    assert {e["index"]: e["errors"] for e in response.json()["error"]["details"]["tasks"]} == {
        1: {"agent": ["no agent named 'nobody'"]},
        2: {"script": ["a scripted agent needs a script: a list of decisions"]},
        3: {"idempotency_key": ["the same key as task 0 of this batch"]}}
    assert not Task.objects.filter(tenant=main.tenant).exists()


def test_a_batch_takes_1_to_1000_tasks_each_with_a_key(main: Tenancy) -> None:
    client = main.client(REQ)
    too_many = [_task(f"k-{i}") for i in range(1001)]
    for body in ({"tasks": []}, {"tasks": too_many}, {"tasks": "many"}, {}):
        response = client.post("/api/v1/tasks/batch", body, format="json")
        assert response.status_code == 400, response.content
        assert "tasks" in response.json()["error"]["details"]
    keyless = _task("k")
    del keyless["idempotency_key"]
    response = client.post("/api/v1/tasks/batch", {"tasks": [keyless, _task("bad key")]},
                           format="json")
    assert response.status_code == 400
    assert [(e["index"], list(e["errors"])) for e in
            response.json()["error"]["details"]["tasks"]] == [
        (0, ["idempotency_key"]), (1, ["idempotency_key"])]

    response = client.post("/api/v1/tasks/batch",
                           {"tasks": [_task(f"k-{i}") for i in range(1000)]}, format="json")
    assert response.status_code == 201
    assert len(response.json()["tasks"]) == 1000
    assert Task.objects.filter(tenant=main.tenant).count() == 1000


def test_batch_keys_are_per_tenant(main: Tenancy, other: Tenancy) -> None:
    ours = main.client(REQ).post("/api/v1/tasks/batch", {"tasks": [_task("k")]}, format="json")
    theirs = other.client(REQ).post("/api/v1/tasks/batch", {"tasks": [_task("k")]},
                                    format="json")
    assert (ours.status_code, theirs.status_code) == (201, 201)
    assert ours.json()["tasks"][0]["task_id"] != theirs.json()["tasks"][0]["task_id"]
    assert Task.objects.get(pk=theirs.json()["tasks"][0]["task_id"]).tenant_id == other.tenant.pk
