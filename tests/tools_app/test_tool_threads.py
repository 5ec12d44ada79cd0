"""Pooled tool threads keep their database connection between calls; Django's
health check (`SELECT 1` before a call's first query) is skipped for a
connection that served a call moments ago, and made after an idle while."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import structlog
from django.db import connection

from config.logs import log_scope
from tools_app.executor.threads import FRESH_S, ToolThreads


def _call() -> dict[str, Any]:
    """What a tool sees before its first query, then a query of its own."""
    seen = {"thread": threading.current_thread(), "connected": connection.connection is not None,
            "trusted": bool(getattr(connection, "health_check_done", False))}
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return seen


@pytest.mark.django_db(transaction=True)
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
    """A python tool's log lines carry the step's context (`config.logs`)."""
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
