"""How the database pool tests a connection before lending it.

psycopg's pool tests an idle connection before it lends it (Django's
`CONN_HEALTH_CHECKS` with the pool); when the test fails, the borrower sleeps
(1, 2, 4 ... s) and takes the next idle connection. A database restart breaks
every idle connection at once, so a borrower met one broken connection after
another, sleeping longer each time: after a PostgreSQL restart the runner did
nothing for about 8 s (the chaos benchmark). So the first broken connection
has the pool test all its idle ones at once (`ConnectionPool.check`, which
replaces the broken ones), and the borrower's one short sleep ends on a
working connection.

Django builds the pool itself, with psycopg's check, and takes no other:
`install` (on `connection_created`, sent as the pool lends a connection)
puts `check_lent` in its place. psycopg_pool keeps the check in `_check`
(psycopg-pool is pinned; `tests/config/test_db_pool.py` fails if that moves).
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import connections
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)


def check_lent(conn: Any) -> None:
    """The pool's check: raises when `conn` is broken, after testing the idle ones."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        _check_idle_connections()
        raise


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created` receiver: the pool that lent `connection` checks with `check_lent`."""
    pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
    if pool is not None and getattr(pool, "_check", None) is ConnectionPool.check_connection:
        pool._check = check_lent


def _check_idle_connections() -> None:
    for alias in connections:
        pool = getattr(connections[alias], "pool", None)
        if pool is None:
            continue
        try:
            pool.check()
        except Exception:  # noqa: BLE001 - the borrower's own error is the one to raise
            log.warning("testing the idle connections of %s failed", pool.name, exc_info=True)
