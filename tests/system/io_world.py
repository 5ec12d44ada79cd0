"""The I/O world of the driver's system tests: a fake edge (model and HTTP
tool, `benchmarks.edge_server`) that answers any number of calls at once,
an agent of four writes on it, and what the tests ask of both. Its fixtures
are registered for tests/system by its conftest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.edge_server import EdgeServer
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tests.factories import ToolFactory, submit
from tests.fakes.fixtures import openai_agent

TOOL_CALLS = 4  # per task, then the final answer: 5 model calls
ONE_PROCESS = {"pool": "prefork", "concurrency": 1}
ROOMY = {"TETHER_MAX_RUNNING_TASKS": "1000", "TETHER_MAX_RUNNING_PER_TENANT": "1000"}


@pytest.fixture
def edge() -> Iterator[EdgeServer]:
    server = EdgeServer(model_latency_s=0.05, tool_latency_s=0.05, tool_calls=TOOL_CALLS).start()
    yield server
    server.close()


@pytest.fixture
def io_world(world, edge, settings):  # type: ignore[no-untyped-def]
    settings.TETHER = {**settings.TETHER, "MAX_RUNNING_TASKS": 1000,
                       "MAX_RUNNING_PER_TENANT": 1000}
    ToolFactory(tenant=world.tenant, name="edge_write", kind="http",
                url=edge.tool_url("edge_write"), target="",
                status_url=f"http://127.0.0.1:{edge.port}/status/{{key}}",
                args_schema={"type": "object"}, side_effect="write", timeout_s=20,
                max_retries=0)
    openai_agent(world.tenant, EdgeModel(edge), name="io", tools=["edge_write"],
                 max_concurrent_tasks=1000, model={"timeout_s": 60, "max_retries": 0})
    return world


class EdgeModel:
    """What `openai_agent` reads of a fake model server."""

    def __init__(self, edge: EdgeServer) -> None:
        self.base_url = edge.base_url


def submit_io(world: Any, n: int, agent: str = "io") -> list[int]:
    return [submit(world.tenant, None, agent=agent, goal=f"io {i}").pk for i in range(n)]


def all_ended(ids: list[int]) -> list[Task] | None:
    tasks = list(Task.objects.filter(pk__in=ids))
    return tasks if all(t.is_terminal for t in tasks) else None


def in_flight(edge: EdgeServer, kind: str, n: int) -> bool:
    LAST_SEEN.clear()
    LAST_SEEN.update({**edge.snapshot(), "effects": None, "tasks": dict(Counter(
        Task.objects.values_list("status", flat=True))), "leased": Task.objects.exclude(
        lease_owner="").count()})
    return edge.snapshot()[f"{kind}_in_flight"] >= n


# What `in_flight` saw last: the tests print it when their wait times out.
LAST_SEEN: dict[str, Any] = {}


def assert_done_once(tasks: list[Task], edge: EdgeServer) -> None:
    """Every task succeeded with its four tool steps, and the downstream saw one
    effect per key: no write was repeated."""
    effects = edge.snapshot()["effects"]
    for task in tasks:
        assert task.status == TaskStatus.SUCCEEDED, (task.pk, task.status, task.failure_detail)
        keys = list(Step.objects.filter(task=task, kind="tool").order_by("step_no")
                    .values_list("idempotency_key", flat=True))
        assert len(keys) == TOOL_CALLS and len(set(keys)) == TOOL_CALLS
        assert all(effects.get(k) == 1 for k in keys), [effects.get(k) for k in keys]
    assert sum(effects.values()) == len(tasks) * TOOL_CALLS
