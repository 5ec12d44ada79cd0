"""Pooled tool threads reuse database connections between calls. Without the
connection pool (`DB_POOL_MAX_SIZE=0`) a thread keeps its own, and Django's
health check (`SELECT 1` before a call's first query) is skipped for a
connection that served a call moments ago, and made after an idle while. With
the pool (the default on PostgreSQL) a thread gives its connection back
between calls, so an idle thread holds none, and the next call borrows a
pooled one: no call opens a connection of its own."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import structlog
from django.conf import settings
from django.db import connection

from foundations.logs import log_scope
from tools_app.executor.threads import FRESH_S, ToolThreads


def _call() -> dict[str, Any]:
    """What a tool sees before its first query, then a query of its own."""
    seen = {"thread": threading.current_thread(), "connected": connection.connection is not None,
            "trusted": bool(getattr(connection, "health_check_done", False))}
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return seen


# Read from the settings: asking the connection for its pool before the test
# database exists would build a pool on the wrong database.
POOLED = bool(settings.DATABASES["default"].get("OPTIONS", {}).get("pool"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(POOLED, reason="without the connection pool only (DB_POOL_MAX_SIZE=0)")
def test_a_connection_used_moments_ago_is_not_tested_again_and_an_idle_one_is():
    pool = ToolThreads()
    try:
        calls = []
        for _ in range(2):
            finished, value, error = pool.run(_call, timeout_s=10)
            assert finished and error is None
            calls.append(value)
        first, second = calls
        assert second["thread"] is first["thread"]  # the same pooled thread
        assert not first["connected"]  # its first call opened the connection
        assert second["connected"] and second["trusted"]

        second["thread"].last_job_at -= FRESH_S + 1  # as if idle since
        finished, third, error = pool.run(_call, timeout_s=10)
        assert finished and error is None and third["thread"] is first["thread"]
        assert third["connected"] and not third["trusted"]  # tested before its first query
    finally:
        pool.shutdown()


def test_a_tool_runs_in_its_callers_context_and_its_thread_keeps_none_of_it():
    """A python tool's log lines carry the step's context (`foundations.logs`)."""
    def tool() -> dict[str, Any]:
        return structlog.contextvars.get_contextvars()

    pool = ToolThreads()
    try:
        with log_scope(task_id=7, step_no=3):
            finished, seen, error = pool.run(tool, timeout_s=5)
        assert (finished, error) == (True, None)
        assert seen == {"task_id": 7, "step_no": 3}
        assert pool.run(tool, timeout_s=5)[1] == {}  # the same pooled thread, next call
    finally:
        pool.shutdown()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not POOLED, reason="with the connection pool only")
def test_with_the_pool_an_idle_thread_holds_no_connection_and_calls_open_none():
    db_pool = connection.pool
    threads = ToolThreads()
    try:
        finished, first, error = threads.run(_call, timeout_s=10)
        assert finished and error is None
        opened = db_pool.get_stats()["connections_num"]
        for _ in range(3):
            finished, later, error = threads.run(_call, timeout_s=10)
            assert finished and error is None and later["thread"] is first["thread"]
            assert not later["connected"]  # given back to the pool after the last call
        assert db_pool.get_stats()["connections_num"] == opened  # none opened since
    finally:
        threads.shutdown()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not POOLED, reason="with the connection pool only")
def test_with_the_pool_each_thread_gives_its_connection_back_as_its_call_returns():
    """Many tool threads share the pool's few connections with the runner: one
    that kept its connection while idle left other threads waiting for the
    pool's timeout."""
    db_pool = connection.pool
    with connection.cursor() as cur:  # the test's own connection, taken before counting
        cur.execute("SELECT 1")
    stats = db_pool.get_stats()
    in_use = stats["pool_size"] - stats["pool_available"]
    threads = ToolThreads()
    together = threading.Barrier(4)

    def query_together() -> dict[str, Any]:
        seen = _call()
        together.wait(10)  # four calls at once: four threads, four connections
        return seen

    try:
        calls: list[Any] = []
        runners = [threading.Thread(target=lambda: calls.append(
            threads.run(query_together, timeout_s=10))) for _ in range(4)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join(20)
        assert [(finished, error) for finished, _v, error in calls] == [(True, None)] * 4
        assert len({value["thread"] for _f, value, _e in calls}) == 4
        stats = db_pool.get_stats()
        assert stats["pool_size"] - stats["pool_available"] == in_use  # all four given back
    finally:
        threads.shutdown()
