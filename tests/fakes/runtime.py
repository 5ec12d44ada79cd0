"""Helpers for the runtime tests: test tools and agents registered the normal way,
steps run in threads (each with its own database connection), and reads of
the event log with the invariants every run must keep."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from accounts_app.models import Tenant
from tasks_app.machine import TRANSITIONS
from tasks_app.models import AgentProfile, Event, Task
from tasks_app.runner.step import StepResult, advance_one_step
from tasks_app.services.replay import task_replay_check
from tests.fakes import python_tools
from tests.fakes.http_tool_server import FakeToolServer
from tests.helpers import wait_for
from tools_app.executor.threads import tool_threads
from tools_app.models import Tool

__all__ = [
    "InThread", "add_agent", "add_tool", "advance", "assert_log_consistent", "events_of",
    "fake_http", "quiet_tools", "transition_events",
]

FAKES = "tests.fakes.python_tools."


def add_tool(tenant: Tenant, name: str, target: str = "", **fields: Any) -> Tool:
    """Register a tool; a bare `target` names a function of `tests.fakes.python_tools`."""
    if target and "." not in target:
        target = FAKES + target
    defaults: dict[str, Any] = {"kind": "python", "target": target,
                                "args_schema": {"type": "object"},
                                "side_effect": "read", "timeout_s": 5.0, "max_retries": 2, **fields}
    tool, _ = Tool.objects.update_or_create(tenant=tenant, name=name, defaults=defaults)
    return tool


def add_agent(tenant: Tenant, name: str, tools: list[str], **fields: Any) -> AgentProfile:
    agent, _ = AgentProfile.objects.update_or_create(
        tenant=tenant, name=name, defaults={"tools": tools, "on_exhaustion": "fail", **fields})
    return agent


def advance(task_id: int, owner: str = "test-executor") -> StepResult:
    return advance_one_step(task_id=task_id, owner=owner)


class InThread:
    """Run `fn` in a thread of its own (its own DB connection, closed at the end)."""

    def __init__(self, fn: Callable[[], Any], name: str = "test-executor") -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            connection.close()

    def join(self, timeout: float = 30.0) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"{self._thread.name} did not finish within {timeout}s")
        if self.error is not None:
            raise self.error
        return self.result


def events_of(task_id: int, *types: str) -> list[Event]:
    qs = Event.objects.filter(task_id=task_id).order_by("id")
    return list(qs.filter(type__in=types) if types else qs)


def transition_events(task_id: int) -> list[Event]:
    return list(Event.objects.filter(task_id=task_id, type__in=list(TRANSITIONS)).order_by("id"))


def assert_log_consistent(task_id: int) -> None:
    """One transition event per version, 1..N without gaps or duplicates, and the
    replayed state equals the stored one."""
    task = Task.objects.get(pk=task_id)
    versions = [e.task_version for e in transition_events(task_id)]
    assert versions == list(range(1, task.version + 1)), versions
    assert task_replay_check(task_id) == []


def _tool_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.is_alive() and t.name.startswith("tether-tool")]


@pytest.fixture
def quiet_tools() -> Iterator[None]:
    """Release every blocked test tool after the test and wait for the executor's
    tool threads to end, so nothing spills into the next test."""
    python_tools.reset()
    yield
    python_tools.reset()
    tool_threads.shutdown()  # idle pooled threads end now, busy ones when their call returns
    wait_for(lambda: not _tool_threads_alive(), timeout=20, message="tool threads to finish")


@pytest.fixture
def fake_http() -> Iterator[FakeToolServer]:
    server = FakeToolServer()
    yield server
    server.close()
