"""A live Tether for the client's tests: daphne on pytest-django's test
database, running tasks itself (the embedded runner on its own event loop), as
`scripts/start` serves; the client reaches it over real HTTP. Tests using it
need `django_db(transaction=True)`, so the server sees what they write."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tests.console.server import DaphneServer, daphne_servers
from tests.factories import make_user
from tests.fakes.runtime import fake_http  # noqa: F401 - a fixture
from tests.processes import database_url


@dataclass
class LiveTether:
    """The server and one API key per role of the test's main tenant (`world`)."""

    server: DaphneServer
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def live_tether(world: Any, transactional_db: None, settings: Any, tmp_path: Path
                ) -> Iterator[LiveTether]:
    from django.db import connection

    base = {"DATABASE_URL": database_url(connection.settings_dict), "DB_CONN_MAX_AGE": "0",
            "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL}
    keys = {role: api_key_create(user=user) for role, user in world.users.items()}
    with daphne_servers(tmp_path, base) as start:
        yield LiveTether(server=start(TETHER_RUNNER="embedded"), keys=keys)


@pytest.fixture
def other_tenant_key(transactional_db: None) -> str:
    from tests.factories import TenantFactory

    return api_key_create(user=make_user(TenantFactory(name="t-other"), Role.ADMIN))


# Scripts of the scripted `support` agent (tests.factories.world).
LOOKUP = [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
          {"final": {"answer": "A-1 was delivered"}}]
REFUND = [{"tool": "lookup_order", "args": {"order_id": "A-2"}},
          {"tool": "issue_refund", "args": {"order_id": "A-2", "amount_cents": 500,
                                            "reason": "damaged"}},
          {"final": {"refunded_cents": 500}}]
# Its one model reply is a call: the next model call finds the script ended, a fatal error.
FAILS = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}]
