"""Test configuration: real PostgreSQL and Redis, always.

The environment is defaulted in `tests/settings.py`. A missing
service fails the run (never a skip); only RabbitMQ, which one broker test
uses, is skipped when down, unless `TETHER_REQUIRE_SERVICES=1` (CI). Each test
drives the runner itself (`TETHER_RUNNER=manual`) unless it starts a real
Celery worker (the `celery_workers` fixture, from `tests/processes.py`).

With `TETHER_TEST_DB=sqlite` the database is a SQLite file instead (PostgreSQL
need not run): the runtime-core tests (`tests/core.py`, marked `core`) run
there too, and a test that needs PostgreSQL (`worker`, `postgres`,
`postgres_only(reason)`) is skipped with its reason.

Tests that start real processes are marked `system` here (tests/tiers.py); a
test of the fast tier (the rest) that starts one fails.
"""
from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest  # noqa: E402

from tests.core import CORE_TESTS  # noqa: E402
from tests.factories import *  # noqa: E402,F401,F403
from tests.fakes.mcp_process import mcp_process, mcp_server, mcp_sessions  # noqa: E402,F401
from tests.fakes.webhook_receiver import webhook_receiver  # noqa: E402,F401
from tests.helpers import *  # noqa: E402,F401,F403
from tests.processes import celery_workers, embedded_server, pgbouncer  # noqa: E402,F401
from tests.tiers import GUARD, belongs_to_system

REQUIRED = {"PostgreSQL": ("127.0.0.1", 5432), "Redis": ("127.0.0.1", 6379)}

# What cannot run on SQLite, and why (a test says so with one of these markers).
SQLITE_SKIPS = {
    "worker": "real Celery worker processes share the test database",
    "postgres": "row locks and concurrent writers",
}
TESTS = Path(__file__).resolve().parent


def _on_sqlite() -> bool:
    from django.conf import settings

    return bool(settings.IS_SQLITE)


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = []
    for name, (host, port) in REQUIRED.items():
        if name == "PostgreSQL" and _on_sqlite():
            continue
        try:
            socket.create_connection((host, port), timeout=2).close()
        except OSError:
            missing.append(f"{name} at {host}:{port}")
    if missing:
        pytest.exit(f"required services are down: {', '.join(missing)}", returncode=3)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_sqlite = _on_sqlite()
    for item in items:
        relative = item.path.resolve().relative_to(TESTS).as_posix()
        if relative.startswith(CORE_TESTS):
            item.add_marker(pytest.mark.core)
        if belongs_to_system(item, relative):
            item.add_marker(pytest.mark.system)
        if not on_sqlite:
            continue
        for name, reason in SQLITE_SKIPS.items():
            if item.get_closest_marker(name):
                item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))
        only = item.get_closest_marker("postgres_only")
        if only:
            if not only.args:
                raise pytest.UsageError(f"{item.nodeid}: postgres_only needs a reason")
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {only.args[0]}"))


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    GUARD.enter(item)


@pytest.hookimpl(wrapper=True)  # around the teardown of the test's fixtures
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        GUARD.leave()


@pytest.fixture(autouse=True)
def _clear_manual_queue():
    from tasks_app.services.dispatch import MANUAL_COMPENSATIONS, MANUAL_QUEUE

    MANUAL_QUEUE.clear()
    MANUAL_COMPENSATIONS.clear()
    yield
    MANUAL_QUEUE.clear()
    MANUAL_COMPENSATIONS.clear()


@pytest.fixture(autouse=True)
def _breakers_read_afresh():
    """A breaker this process read as healthy is trusted for a while
    (`tools_app.breakers.store`): each test starts reading them afresh."""
    from tools_app.breakers import forget_healthy

    forget_healthy()
    yield


@pytest.fixture(autouse=True)
def _no_log_context():
    """Tests that call a step directly (outside the loop's per-step scope) leave its
    log context bound in the test's thread: each test starts without any."""
    import structlog

    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


@pytest.fixture(scope="session", autouse=True)
def _end_tool_threads(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """Pooled tool threads keep a database connection; end them before the test
    database is dropped."""
    yield
    from foundations.deployment_locks import close_lock_connections
    from tasks_app.runner.hops import db_threads_shutdown
    from tools_app.executor.threads import tool_threads

    tool_threads.shutdown()
    db_threads_shutdown()  # the runner's database threads keep theirs too
    close_lock_connections()  # and the sweeps' lock connections
