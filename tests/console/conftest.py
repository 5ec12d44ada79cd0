"""Fixtures for the console tests.

Browser tests (marked `browser`) run headless Debian Chromium through
Playwright against a real daphne process (`server.DaphneServer`) serving the
test database; they need `django_db(transaction=True)` so that process sees
what the test writes. Screenshots go to `test-artifacts/console/`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.remote import PlaywrightThread, Remote
from tests.console.server import ROOT, DaphneServer
from tests.processes import database_url, free_port

ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Users are made per test; the production hasher's million rounds are not the point here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def console_server(django_db_setup: None, django_db_blocker: Any) -> Iterator[DaphneServer]:
    """Daphne on the test database; stopped before pytest-django drops that database."""
    from django.conf import settings
    from django.db import connection

    with django_db_blocker.unblock():
        db_url = database_url(connection.settings_dict)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": db_url,
            "DB_CONN_MAX_AGE": "0",
            "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL,
            "TETHER_RUNNER": "manual",
            "CELERY_BROKER_URL": "",
            "SECRET_KEY": settings.SECRET_KEY,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DEBUG": "false",
        }
    )
    log = ARTIFACTS / "daphne.log"
    log.write_text("")
    server = DaphneServer(port=free_port(), env=env, log_path=log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium, driven from its own thread (see `remote`)."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed (apt-get install chromium)")
    thread = PlaywrightThread()
    playwright = thread.call(lambda: sync_playwright().start())
    b = thread.call(
        lambda: playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    )
    try:
        yield Remote(b, thread)
    finally:
        thread.call(b.close)
        thread.call(playwright.stop)
        thread.shutdown()


class ConsolePage:
    """A signed-in browser page plus what went wrong in it (JS errors, CSP reports)."""

    def __init__(self, page: Any, server: DaphneServer) -> None:
        self.page = page
        self.server = server
        self.js_errors: list[str] = []
        self.console_errors: list[str] = []
        page.on("pageerror", lambda exc: self.js_errors.append(str(exc)))
        page.on(
            "console",
            lambda msg: self.console_errors.append(msg.text) if msg.type == "error" else None,
        )

    def goto(self, path: str) -> Any:
        return self.page.goto(self.server.url + path)

    def csp_violations(self) -> list[str]:
        return [m for m in self.console_errors if "Content Security Policy" in m]

    def shot(self, name: str, *, phone: bool = True) -> list[Path]:
        """Full-page screenshots at 1280 px and at phone width."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        # The sticky bar belongs at the top of the picture.
        self.page.evaluate("window.scrollTo(0, 0)")
        paths = [ARTIFACTS / f"{name}-1280.png"]
        self.page.screenshot(path=str(paths[0]), full_page=True, animations="disabled")
        if phone:
            self.page.set_viewport_size(PHONE)
            self.page.evaluate("window.scrollTo(0, 0)")
            paths.append(ARTIFACTS / f"{name}-phone.png")
            self.page.screenshot(path=str(paths[1]), full_page=True, animations="disabled")
            self.page.set_viewport_size(DESKTOP)
        return paths


@pytest.fixture
def page_as(browser: Any, console_server: DaphneServer) -> Iterator[Callable[..., ConsolePage]]:
    """`page_as(user)`: a fresh browser context signed in as `user` (a real
    session row, the cookie handed to the browser)."""
    from django.conf import settings
    from django.test import Client

    contexts: list[Any] = []
    pages: list[ConsolePage] = []

    def make(user: Any) -> ConsolePage:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        context = browser.new_context(viewport=DESKTOP, base_url=console_server.url)
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": console_server.url}]
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        cp = ConsolePage(context.new_page(), console_server)
        pages.append(cp)
        return cp

    yield make
    for context in contexts:
        context.close()
    for cp in pages:
        assert not cp.js_errors, f"JavaScript errors in the page: {cp.js_errors}"
        assert not cp.csp_violations(), f"Content-Security-Policy violations: {cp.csp_violations()}"


def step_once(task_id: int) -> None:
    """Advance a task by exactly one durable step (admitting it first if queued)."""
    from tasks_app.machine import TaskStatus
    from tasks_app.models import Task
    from tasks_app.runner.loop import new_owner
    from tasks_app.runner.step import advance_one_step
    from tasks_app.services.admission import admit_created_tasks
    from tasks_app.store.leases import lease_release, lease_take

    task = Task.objects.get(pk=task_id)
    if task.status == TaskStatus.CREATED:
        assert task_id in admit_created_tasks(), "the task was not admitted"
        return
    owner = new_owner()
    assert lease_take(task_id=task_id, owner=owner), "could not take the task's lease"
    try:
        advance_one_step(task_id=task_id, owner=owner)
    finally:
        lease_release(task_id=task_id, owner=owner)


def event_ids(task_id: int) -> list[int]:
    from tasks_app.models import Event

    return list(Event.objects.filter(task_id=task_id).order_by("id").values_list("id", flat=True))
