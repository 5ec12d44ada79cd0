"""Bounded database connections under load, and a 503 (never a 500) when the
database cannot serve.

A real ASGI server (daphne) on the test database with a small pool
(`DB_POOL_MAX_SIZE`): 16 concurrent API clients submit 200 tasks. Every answer
is a 201 or a 503 with `Retry-After` in the JSON error shape; the server's
connections to PostgreSQL (counted in `pg_stat_activity` by the
`application_name` its DATABASE_URL sets) never exceed the pool's size; every
201 is one task, and a 503 left nothing behind. With its database down, the
same server answers the API with a JSON 503 and the console with a plain 503
page.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings as django_settings
from django.test import Client

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.models import Task
from tests.console.server import DaphneServer, daphne_servers
from tests.processes import database_url, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POOL_MAX = 4
CLIENTS = 16
TASKS = 200


class ConnectionSampler:
    """Counts the connections of one application name, as often as it can, on
    a connection of its own, until stopped; keeps the largest count seen."""

    def __init__(self, application_name: str) -> None:
        self.application_name = application_name
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres",
                             autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (self.application_name,),
                ).fetchone()
                self.peak = max(self.peak, row[0] if row else 0)
                self.samples += 1
                self._stop.wait(0.005)


@pytest.fixture
def server_on(tmp_path: Path) -> Iterator[Callable[..., DaphneServer]]:
    """`server_on(db_url, **env)`: daphne serving `db_url` with the given settings."""
    base = {"CHANNEL_LAYER_URL": django_settings.CHANNEL_LAYER_URL,
            "SECRET_KEY": django_settings.SECRET_KEY, "DEBUG": "false"}
    with daphne_servers(tmp_path, base) as start:
        yield lambda db_url, **extra: start(DATABASE_URL=db_url, **extra)


def test_a_burst_of_clients_stays_within_the_pool(world: Any, server_on: Any) -> None:
    from django.db import connection

    app_name = f"tether-pool-{uuid.uuid4().hex[:8]}"
    server = server_on(
        database_url(connection.settings_dict) + f"?application_name={app_name}",
        DB_POOL_MAX_SIZE=str(POOL_MAX), DB_POOL_MIN_SIZE="1", DB_POOL_TIMEOUT_S="0.25",
    )
    token = api_key_create(user=world.users[Role.REQUESTER])

    def submit(i: int) -> tuple[str, httpx.Response]:
        key = f"burst-{i}"
        with httpx.Client(base_url=server.url, timeout=60) as http:
            return key, http.post(
                "/api/v1/tasks",
                json={"goal": f"burst {i}", "agent": "support", "script": [{"final": {"i": i}}]},
                headers={"Authorization": f"Token {token}", "Idempotency-Key": key},
            )

    with ConnectionSampler(app_name) as sampler, ThreadPoolExecutor(CLIENTS) as clients:
        answers = list(clients.map(submit, range(TASKS)))

    statuses = sorted({r.status_code for _, r in answers})
    assert set(statuses) <= {201, 503}, statuses
    busy = [(key, r) for key, r in answers if r.status_code == 503]
    for _, r in busy:
        assert int(r.headers["Retry-After"]) > 0
        assert r.json()["error"]["code"] == "database_unavailable"
    created = {key: r.json()["id"] for key, r in answers if r.status_code == 201}
    assert created, "the pool served nobody"
    print(f"{len(created)} created, {len(busy)} told to retry, peak {sampler.peak} "
          f"connections over {sampler.samples} samples")

    assert 1 <= sampler.peak <= POOL_MAX
    rows = dict(Task.objects.values_list("idempotency_key", "id"))
    assert rows == created  # each 201 is one task; a 503 wrote nothing


def test_with_its_database_down_the_server_answers_503(world: Any, server_on: Any) -> None:
    from django.db import connection

    closed = free_port()
    down = database_url({**connection.settings_dict, "PORT": str(closed)})
    server = server_on(down, DB_POOL_MAX_SIZE="2", DB_POOL_TIMEOUT_S="0.5")
    session = Client()
    session.force_login(world.users[Role.OPERATOR])
    cookie = session.cookies[django_settings.SESSION_COOKIE_NAME].value
    token = api_key_create(user=world.users[Role.REQUESTER])

    with httpx.Client(base_url=server.url, timeout=30) as http:
        api = http.get("/api/v1/tasks", headers={"Authorization": f"Token {token}"})
    with httpx.Client(base_url=server.url, timeout=30,
                      cookies={django_settings.SESSION_COOKIE_NAME: cookie}) as browser:
        page = browser.get("/tasks/")

    assert api.status_code == 503, api.text
    assert api.headers["Content-Type"].startswith("application/json")
    assert api.json()["error"]["code"] == "database_unavailable"
    assert int(api.headers["Retry-After"]) > 0
    assert page.status_code == 503, page.text
    assert page.headers["Content-Type"].startswith("text/html")
    assert int(page.headers["Retry-After"]) > 0
    assert "Traceback" not in page.text and "Traceback" not in api.text
