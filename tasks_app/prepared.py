"""The hottest statements, prepared on the server (PostgreSQL only).

Django binds parameters on the client and never prepares, so PostgreSQL
parses and plans every statement anew. The few statements sent for every
step or every task (the slice memo's probe, the lease, the runner's commits
in `store.commits`, admission's reads and starts) go through psycopg's own
cursor on Django's connection instead, prepared: from the second run on, only
their parameters travel and the plan is reused.

Django sets psycopg's `prepare_threshold` to None (no preparing at all, for
connection poolers); the settings give it back unless
`DB_PREPARED_STATEMENTS=false`, and then `prepare=True` below is honoured.
With the connection pool (`DB_POOL_MAX_SIZE`), a statement is prepared once
per pooled connection and stays prepared for every borrower after it: the
pool hands back the same psycopg connection, with its cache of prepared
statements, rather than a new one.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from django.db import connection

T = TypeVar("T")


def fetch_one_prepared(sql: str, params: Any) -> tuple[Any, ...] | None:
    """Run `sql` on Django's connection (its transaction, if one is open) and
    return the first row. Errors are Django's (an IntegrityError is still one),
    and the statement is logged where Django logs queries (DEBUG, tests)."""
    return _prepared(sql, params, lambda cur: cur.fetchone())


def fetch_all_prepared(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """As `fetch_one_prepared`, every row."""
    return _prepared(sql, params, lambda cur: cur.fetchall())


def _prepared(sql: str, params: Any, fetch: Callable[[psycopg.Cursor[Any]], T]) -> T:
    connection.ensure_connection()
    started = time.monotonic()
    # Django's connection makes client-side binding cursors: ask for psycopg's own.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cur:
        cur.execute(sql, params, prepare=True)
        rows = fetch(cur)
    if connection.queries_logged:
        connection.queries_log.append(
            {"sql": sql.strip(), "time": f"{time.monotonic() - started:.3f}"})
    return rows
