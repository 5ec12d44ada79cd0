"""Deployment-wide locks: at most one holder across every process and host.

A PostgreSQL advisory lock, transaction-scoped, in a transaction of a
connection of its own held open for the block, while the work inside runs on
the thread's usual connection and commits as it goes. The lock ends with that
transaction: when the block ends, or when the process dies and its connection
with it, so a killed holder never blocks the others. Transaction-scoped, not
session-scoped: behind a pooler in transaction mode (PgBouncer) a session lock
stays with whichever server connection ran it (the recovery sweep stopped for
good once one was stranded). Keys: admission 0x7E7E_0001 (its own, inside its
transactions), the recovery sweep 0x7E7E_0002, the archive sweep 0x7E7E_0003.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from django.db import connection

# The locks' connections, as pg_stat_activity names them.
LOCK_CONNECTION_NAME = "tether-sweep-lock"


@contextmanager
def deployment_lock(key: int) -> Iterator[bool]:
    """Whether this thread holds the deployment-wide lock `key` for the block
    (on SQLite, the embedded mode's single process: always)."""
    if connection.vendor != "postgresql":
        yield True
        return
    holder = _lock_connection()
    try:
        row = holder.execute("SELECT pg_try_advisory_xact_lock(%s)", [key]).fetchone()
    except psycopg.Error:
        _drop_lock_connection()
        raise
    try:
        yield bool(row and row[0])
    finally:
        try:
            holder.rollback()  # ends the transaction, and the lock with it
        except psycopg.Error:
            _drop_lock_connection()  # a broken connection took the lock with it


_lock_connections = threading.local()
_every: set[psycopg.Connection[Any]] = set()  # every thread's, for close_lock_connections
_registry_lock = threading.Lock()
# What psycopg.connect needs of Django's parameters (not its cursor class or adapters).
_CONNINFO_KEYS = ("dbname", "user", "password", "host", "port", "sslmode", "sslrootcert",
                  "sslcert", "sslkey", "options", "application_name", "client_encoding")


def _lock_connection() -> psycopg.Connection[Any]:
    """This thread's connection for the locks, kept between uses (one more per
    thread that takes them: a worker's sweeper, beat, the archive sweep)."""
    held: psycopg.Connection[Any] | None = getattr(_lock_connections, "conn", None)
    if held is None or held.closed:
        params = connection.get_connection_params()
        conninfo = {k: params[k] for k in _CONNINFO_KEYS if params.get(k) is not None}
        conninfo["application_name"] = LOCK_CONNECTION_NAME
        held = psycopg.connect(**conninfo, autocommit=False, connect_timeout=5,
                               prepare_threshold=None)
        _lock_connections.conn = held
        with _registry_lock:
            _every.add(held)
    return held


def close_lock_connections() -> None:
    """Close every thread's lock connection (a test session's end: the test
    database cannot be dropped while one is open)."""
    with _registry_lock:
        open_now = list(_every)
        _every.clear()
    for conn in open_now:
        with suppress(psycopg.Error):
            conn.close()


def _drop_lock_connection() -> None:
    held = getattr(_lock_connections, "conn", None)
    _lock_connections.conn = None
    if held is not None:
        with _registry_lock:
            _every.discard(held)
        with suppress(psycopg.Error):
            held.close()
