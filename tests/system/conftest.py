"""Fixtures of the system tests: the shared worlds (tests/system/io_world.py),
and `web`, daphne servers on the test database."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.server import DaphneServer, daphne_servers
from tests.processes import database_url
from tests.system.io_world import edge, io_world  # noqa: F401


@pytest.fixture
def web(tmp_path: Path, settings: Any) -> Iterator[Callable[..., DaphneServer]]:
    """`web(**env)` starts daphne on the test database and this process's channel
    layer (the manual runner unless `env` says otherwise); all stop at teardown."""
    from django.db import connection

    base = {"DATABASE_URL": database_url(connection.settings_dict),
            "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL}
    with daphne_servers(tmp_path, base) as start:
        yield start
