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

The statements are written with psycopg's placeholders (`%s`, `%(name)s`)
and sent with PostgreSQL's own (`$1`, ...), converted once per statement
(`native`): psycopg converts a query at every execution, and keeps the
conversion only for queries of at most 50 parameters, which the runner's
commits exceed; the conversion was a thirtieth of a busy worker's CPU.
"""
from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")


def fetch_one_prepared(sql: str, params: Any) -> tuple[Any, ...] | None:
    """Run `sql` on Django's connection (its transaction, if one is open) and
    return the first row. Errors are Django's (an IntegrityError is still one),
    and the statement is logged where Django logs queries (DEBUG, tests)."""
    return _prepared(sql, params, lambda cur: cur.fetchone())


def fetch_all_prepared(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """As `fetch_one_prepared`, every row."""
    return _prepared(sql, params, lambda cur: cur.fetchall())


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")


@functools.lru_cache(maxsize=512)
def native(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """`sql` with PostgreSQL's placeholders instead of psycopg's (`%%` is a
    `%`), and the names of its parameters in their order (None: positional
    `%s`). A name used twice is one parameter, as psycopg has it."""
    names: dict[str, int] = {}
    positional = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal positional
        if match.group(0) == "%%":
            return "%"
        if match.group(1) is None:
            positional += 1
            return f"${positional}"
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    text = _PLACEHOLDER.sub(replace, sql)
    if names and positional:
        raise ValueError("a statement takes named or positional parameters, not both")
    return text, tuple(names) if names else None


def _values(names: tuple[str, ...] | None, params: Any) -> Sequence[Any]:
    if names is None:
        return list(params)
    if not isinstance(params, Mapping):
        raise TypeError("this statement takes its parameters by name")
    return [params[name] for name in names]


def _prepared(sql: str, params: Any, fetch: Callable[[psycopg.Cursor[Any]], T]) -> T:
    db = connections[DEFAULT_DB_ALIAS]  # looked up once: each use of the proxy looks it up
    db.ensure_connection()
    started = time.monotonic()
    text, names = native(sql)
    values = _values(names, params)
    # Django's connection makes client-side binding cursors: ask for psycopg's own.
    with db.wrap_database_errors, psycopg.RawCursor(db.connection) as cur:
        cur.execute(text, values, prepare=True)
        rows = fetch(cur)
    if db.queries_logged:
        db.queries_log.append({"sql": sql.strip(), "time": f"{time.monotonic() - started:.3f}"})
    return rows
