"""The suite's two tiers: `system` and the fast tier (everything else).

A `system` test starts real processes: Celery workers, daphne, `scripts/start`,
headless Chromium, the MCP test server, a `manage.py` or `mkdocs` run, a
private PostgreSQL or Redis. The fast tier runs in the test's own process (its
fake servers are threads): `scripts/test --fast` runs it alone
(`-m "not system"`).

`tests/conftest.py` marks a test `system` when it lies under `tests/system/`,
carries the `worker` or `browser` marker, or uses one of `SYSTEM_FIXTURES`
(directly or through another fixture); a test that starts a process some other
way says `@pytest.mark.system` itself. Nobody has to remember: a fast-tier test
that starts a process anyway (a subprocess, a fork, an exec) is stopped there
and fails, by the audit hook below.
"""
from __future__ import annotations

import platform
import sys
from typing import Any

import pytest

SYSTEM_DIRS = ("system/",)
SYSTEM_MARKERS = ("worker", "browser")
# The fixtures that start processes (tests/processes.py, tests/console/conftest.py,
# tests/fakes/mcp_process.py, tests/live/server.py); a fixture built on one of them is
# caught through it.
SYSTEM_FIXTURES = frozenset({
    "celery_workers", "embedded_server", "console_server", "browser", "mcp_process",
    "pgbouncer", "asgi_server",
})
# Audit events (https://docs.python.org/3/library/audit_events.html) that start a process.
SPAWN_EVENTS = frozenset({
    "subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.system",
    "os.exec", "os.spawn", "pty.spawn",
})


def belongs_to_system(item: pytest.Item, relative_path: str) -> bool:
    """Whether ITEM (at RELATIVE_PATH under tests/) is a system test."""
    return (
        relative_path.startswith(SYSTEM_DIRS)
        or any(item.get_closest_marker(name) for name in ("system", *SYSTEM_MARKERS))
        or not SYSTEM_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
    )


class ProcessInFastTier(RuntimeError):
    pass


class FastTierGuard:
    """While a fast-tier test runs (its fixtures' setup and teardown included),
    starting a process raises `ProcessInFastTier`; what was started is also
    remembered, so the test fails even when the code under test swallowed the
    error."""

    def __init__(self) -> None:
        self.running: str | None = None  # the node id of the fast-tier test running now
        self.started: list[str] = []
        # The OpenAI client reads the processor, which runs `uname -p` once per
        # process: read (and cache) it before any test is guarded.
        platform.processor()
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.running is None or event not in SPAWN_EVENTS:
            return
        what = f"{event} {args[1] if event == 'subprocess.Popen' else args[:2]!r}"
        self.started.append(what)
        raise ProcessInFastTier(
            f"{self.running} is in the fast tier and started a process ({what}): "
            "mark it `system` (see tests/tiers.py)")

    def enter(self, item: pytest.Item) -> None:
        self.running = None if item.get_closest_marker("system") else item.nodeid
        self.started = []

    def leave(self) -> None:
        started, self.running, self.started = self.started, None, []
        if started:
            pytest.fail(
                "a fast-tier test started processes: " + "; ".join(started)
                + ". Mark it `system` (see tests/tiers.py).", pytrace=False)


GUARD = FastTierGuard()  # one audit hook per process (hooks cannot be removed)
