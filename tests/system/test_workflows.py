"""Workflow runs with real processes: Celery workers on the test database, HTTP
tools on a fake downstream (tests/fakes/http_tool_server.py), runs submitted
and watched through the REST API as a client would.

- a five-node run with a branch and a map ends with the output its definition
  maps;
- a worker killed (SIGKILL to its process group) while a map of 50 items is
  in flight: another worker finishes the run, and the downstream applied each
  item exactly once (one effect per idempotency key, whatever was replayed);
- a run canceled mid-map: no item call starts after the cancel, and the
  result of the call in flight is discarded.

These hold whether the runner runs a run's independent nodes and map items
one at a time or several at once: they check outcomes and counts, never the
order between independent calls.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.services.accounts import api_key_create
from tasks_app.models import Event, Step, Task
from tests.fakes.downstream import Downstream
from tests.fakes.runtime import add_tool
from tests.helpers import wait_for
from tools_app.models import ToolExecution

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RUN_TIMEOUT_S = 120.0
RECOVERY_TIMEOUT_S = 150.0
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED"}


@pytest.fixture
def downstream():  # type: ignore[no-untyped-def]
    service = Downstream()
    yield service
    service.server.close()


def _client(world: Any, role: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users[role])}")
    return client


def _tools(world: Any, service: Downstream, *, write_timeout_s: float = 5.0,
           plain_write: bool = False) -> None:
    """`wf_write` honours keys (`idempotent_write`); with `plain_write` it is a
    plain `write` whose status query asks the downstream what happened."""
    common = {"kind": "http", "args_schema": {"type": "object"}}
    add_tool(world.tenant, "wf_lookup", url=service.url("/lookup"), side_effect="read",
             timeout_s=5.0, max_retries=3, **common)
    if plain_write:
        add_tool(world.tenant, "wf_write", url=service.url("/write"), side_effect="write",
                 status_url=service.url("/write-status/{key}"), timeout_s=write_timeout_s,
                 max_retries=0, **common)
    else:
        add_tool(world.tenant, "wf_write", url=service.url("/write"),
                 side_effect="idempotent_write", timeout_s=write_timeout_s, max_retries=3,
                 **common)


def _register(world: Any, name: str, definition: dict[str, Any]) -> None:
    response = _client(world, "admin").post("/api/v1/workflows",
                                            {"name": name, "definition": definition},
                                            format="json")
    assert response.status_code == 201, response.json()


def _submit(world: Any, name: str, input: dict[str, Any], key: str) -> int:
    response = _client(world, "requester").post(
        "/api/v1/tasks", {"workflow": name, "input": input}, format="json",
        HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def _ended(client: APIClient, task_id: int) -> dict[str, Any] | None:
    response = client.get(f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200, response.content[:2000]
    body: dict[str, Any] = response.json()
    return body if body["status"] in TERMINAL else None


def _wait_ended(world: Any, task_id: int, timeout: float, workers: Any) -> dict[str, Any]:
    client = _client(world, "operator")
    try:
        return wait_for(lambda: _ended(client, task_id), timeout=timeout, interval=0.2,
                        message=f"run {task_id} to end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{workers.logs()}") from exc


FIVE_NODES = {
    "inputs": {"type": "object", "required": ["order", "amount"],
               "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}}},
    "nodes": [
        {"id": "lookup", "tool": "wf_lookup",
         "args": {"order": "${inputs.order}", "amount": "${inputs.amount}"}},
        {"id": "big", "after": ["lookup"], "when": "nodes.lookup.amount > 100",
         "tool": "wf_lookup", "args": {"order": "${inputs.order}-big"}},
        {"id": "small", "after": ["lookup"], "when": "nodes.lookup.amount <= 100",
         "tool": "wf_lookup", "args": {"order": "${inputs.order}-small"}},
        {"id": "notify", "after": ["lookup"],
         "map": {"over": "nodes.lookup.contacts", "tool": "wf_write",
                 "args": {"item": "${item}", "index": "${index}",
                          "text": "order ${inputs.order}"}}},
        {"id": "summary", "after": ["big", "small", "notify"], "tool": "wf_lookup",
         "args": {"order": "${inputs.order}", "notes": "${nodes.notify.map(n, n.item)}"}},
    ],
    "output": {"order": "${nodes.lookup.order}",
               "branch": "${has(nodes.big) ? nodes.big.order : nodes.small.order}",
               "notified": "${nodes.notify.map(n, n.item)}",
               "summary": "${nodes.summary.notes}"},
}


def test_a_run_with_a_branch_and_a_map_completes_on_real_workers(
        world, downstream, celery_workers):
    _tools(world, downstream)
    _register(world, "five", FIVE_NODES)
    celery_workers.start()

    task_id = _submit(world, "five", {"order": "A-7", "amount": 500}, "five-1")
    detail = _wait_ended(world, task_id, RUN_TIMEOUT_S, celery_workers)

    assert detail["status"] == "SUCCEEDED", (detail["failure_detail"], celery_workers.logs())
    assert detail["result"] == {"order": "A-7", "branch": "A-7-big",
                                "notified": ["ada", "bob", "cy"],
                                "summary": ["ada", "bob", "cy"]}
    assert {n["id"]: n["status"] for n in detail["nodes"]} == {
        "lookup": "succeeded", "big": "succeeded", "small": "skipped",
        "notify": "succeeded", "summary": "succeeded"}
    # one write per contact, each under its own key, applied once
    assert sorted(b["item"] for b in downstream.effects.values()) == ["ada", "bob", "cy"]
    assert set(downstream.calls.values()) == {1}


FAN_OUT = {
    "inputs": {"type": "object", "required": ["items"],
               "properties": {"items": {"type": "array", "items": {"type": "string"}}}},
    "nodes": [{"id": "fan", "map": {"over": "inputs.items", "tool": "wf_write",
                                    "args": {"item": "${item}", "index": "${index}"}}}],
    "output": "${nodes.fan}",
}


def _map_steps(task_id: int) -> list[Step]:
    return [s for s in Step.objects.filter(task_id=task_id).order_by("step_no")
            if (s.decision or {}).get("workflow", {}).get("node") == "fan"]


def test_a_worker_killed_during_a_map_of_50_leaves_each_item_applied_once(
        world, celery_workers):
    service = Downstream(latency_s=0.3)
    try:
        _tools(world, service)
        _register(world, "fan", FAN_OUT)
        items = [f"item-{i:02d}" for i in range(50)]
        first = celery_workers.start()
        task_id = _submit(world, "fan", {"items": items}, "fan-1")

        wait_for(lambda: len(service.seen_keys()) >= 5, timeout=RUN_TIMEOUT_S, interval=0.02,
                 message="five item calls to reach the downstream")
        first.kill()
        assert not first.alive()
        seen_before_kill = service.seen_keys()
        assert len(seen_before_kill) < len(items), "the map ended before the kill"
        celery_workers.start(beat=True)
        detail = _wait_ended(world, task_id, RECOVERY_TIMEOUT_S, celery_workers)
    finally:
        service.server.close()

    assert detail["status"] == "SUCCEEDED", (detail["failure_detail"], celery_workers.logs())
    # 50 outputs, in item order
    assert [r["item"] for r in detail["result"]] == items
    assert [r["index"] for r in detail["result"]] == list(range(50))
    steps = _map_steps(task_id)
    assert sorted(s.decision["workflow"]["item"] for s in steps) == list(range(50))
    assert all(s.status == "SUCCEEDED" for s in steps)
    keys = {s.idempotency_key for s in steps}
    assert len(keys) == 50
    # the downstream saw each item's key, and each took effect exactly once
    assert set(service.calls) == keys
    assert len(service.effects) == 50
    assert sorted(b["item"] for b in service.effects.values()) == items
    # a key sent again is one the crash cut (in flight at the kill), sent at most twice
    replayed = {k for k, n in service.calls.items() if n > 1}
    assert replayed <= seen_before_kill, replayed - seen_before_kill
    assert replayed, "no call was in flight at the kill"
    assert max(service.calls.values()) <= 2, service.calls.most_common(3)


def test_a_plain_write_map_cut_by_a_kill_is_settled_by_status_queries_never_replayed(
        world, celery_workers):
    service = Downstream(latency_s=0.3)
    try:
        _tools(world, service, plain_write=True)
        # a call the kill cut before it was sent is "not performed" (the status
        # query finds nothing): the item is tried again, under a new key
        _register(world, "fan", {**FAN_OUT, "nodes": [{**FAN_OUT["nodes"][0], "retries": 1}]})
        items = [f"item-{i:02d}" for i in range(50)]
        first = celery_workers.start()
        task_id = _submit(world, "fan", {"items": items}, "fan-plain")

        wait_for(lambda: len(service.seen_keys()) >= 5, timeout=RUN_TIMEOUT_S, interval=0.02,
                 message="five item calls to reach the downstream")
        first.kill()
        assert len(service.seen_keys()) < len(items), "the map ended before the kill"
        celery_workers.start(beat=True)
        detail = _wait_ended(world, task_id, RECOVERY_TIMEOUT_S, celery_workers)
    finally:
        service.server.close()

    assert detail["status"] == "SUCCEEDED", (detail["failure_detail"], celery_workers.logs())
    assert [r["item"] for r in detail["result"]] == items
    steps = _map_steps(task_id)
    done = [s for s in steps if s.status == "SUCCEEDED"]
    assert sorted(s.decision["workflow"]["item"] for s in done) == list(range(50))
    # never sent twice: each key at most once, and each item took effect once
    assert set(service.calls.values()) == {1}, service.calls.most_common(3)
    assert set(service.calls) <= {s.idempotency_key for s in steps}
    assert {s.idempotency_key for s in done} <= set(service.calls)
    assert sorted(b["item"] for b in service.effects.values()) == items
    # the call the kill cut was settled by asking the downstream, not by sending it again
    asked = ToolExecution.objects.filter(idempotency_key__in=[s.idempotency_key for s in steps],
                                         status_answer__isnull=False)
    assert asked.exists(), "no call was in flight at the kill"


def test_a_run_canceled_mid_map_starts_no_call_after_and_discards_the_late_result(
        world, celery_workers):
    release = threading.Event()
    service = Downstream(hold=release)
    try:
        _tools(world, service, write_timeout_s=30.0)
        _register(world, "fan", FAN_OUT)
        items = [f"item-{i}" for i in range(10)]
        celery_workers.start()
        task_id = _submit(world, "fan", {"items": items}, "fan-cancel")
        wait_for(lambda: service.seen_keys(), timeout=RUN_TIMEOUT_S, interval=0.02,
                 message="an item call to reach the downstream")

        canceled = _client(world, "operator").post(f"/api/v1/tasks/{task_id}/cancel",
                                                   {"reason": "changed my mind"}, format="json")
        assert canceled.status_code == 200, canceled.json()
        assert canceled.json()["status"] == "CANCELED"
        steps_at_cancel = {s.step_no: s.idempotency_key for s in _map_steps(task_id)}
        in_flight = service.seen_keys()
        release.set()  # the calls in flight answer now, too late

        def discarded() -> list[Event]:
            return list(Event.objects.filter(task_id=task_id, type="result_discarded"))

        late = wait_for(discarded, timeout=RUN_TIMEOUT_S, interval=0.1,
                        message="a late result to be discarded")
        with suppress(AssertionError):  # each kept, or the check below says which were not
            wait_for(lambda: all(s.late_output for s in _map_steps(task_id)
                                 if s.idempotency_key in service.seen_keys()),
                     timeout=10, interval=0.1, message="every late result to be kept")
    finally:
        release.set()
        service.server.close()

    task = Task.objects.get(pk=task_id)
    assert task.status == "CANCELED"
    steps = _map_steps(task_id)
    # nothing was decided after the cancel: no new step, no call for a step it did not have
    assert {s.step_no: s.idempotency_key for s in steps} == steps_at_cancel
    assert in_flight and service.seen_keys() <= set(steps_at_cancel.values())
    assert {e.payload["step_no"] for e in late} <= set(steps_at_cancel)
    # never applied: every step of the map is DISCARDED, with no output
    for step in steps:
        assert step.status == "DISCARDED", (step.step_no, step.status)
        assert step.output is None
    detail = _client(world, "operator").get(f"/api/v1/tasks/{task_id}")
    assert detail.status_code == 200
    assert detail.json()["nodes"][0]["status"] == "canceled", detail.json()["nodes"]
    # No call starts once the cancel committed (a wave reads the task once
    # more right before its calls go out), and every late result is kept.
    assert service.seen_keys() - in_flight == set()
    assert all(s.late_output for s in steps if s.idempotency_key in in_flight)
