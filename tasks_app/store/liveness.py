"""Which processes that run slices are alive, as PostgreSQL sees them.

A worker killed with kill -9 leaves its tasks' leases to expire
(`LEASE_TTL_S`), and recovery waited that long for each of them. Its database
sessions, though, end at once: the kernel closes its sockets. So a process
that runs slices (a Celery worker process: `runner.driver`) holds, on a
connection of its own for its whole life, a session-level advisory lock on a
random key, registered with its name (`RunnerProcess`; the name is the prefix
of every lease owner it creates). The recovery sweep expires at once the
leases of a registered process whose lock no session holds
(`expire_dead_processes_leases`), then forgets it.

- A database restart ends every session, the living processes' too: for
  `RESTART_GRACE_S` after the server started the sweep trusts no lock (the
  living re-take theirs at their next lease beat, every third of the TTL).
- A living process whose own connection broke (a network cut) is taken for
  dead until its next beat re-takes the lock: its tasks are taken over early,
  which the version check at commit and the ledger make harmless (they always
  have to: a lease can also expire under a stalled process).
- Owners not registered (the tests' and the manual runner's, the embedded
  server's on SQLite) are left to their leases' expiry, as before.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from ..machine import TaskStatus
from ..models import RunnerProcess, Task
from .sql import table

log = logging.getLogger(__name__)

RESTART_GRACE_S = 2.0  # plus a third of the lease TTL (the living's next beat)
KEY_BITS = 62  # positive, and its high half fits pg_locks' classid as given


def _col(name: str) -> str:
    return str(Task._meta.get_field(name).column)  # type: ignore[union-attr]


class Liveness:
    """This process's name and, once `hold` ran, its lock (a forked child gets its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._name = ""
        self._key = 0
        self._conn: psycopg.Connection[Any] | None = None
        self.registered = False  # has `hold` succeeded in this process

    def name(self) -> str:
        """This process's name: `host:pid:token`, new in every process."""
        with self._lock:
            self._here()
            return self._name

    def hold(self) -> None:
        """Take this process's lock and register it, or check that it is still
        held (after a database restart, take it again). PostgreSQL only."""
        if connection.vendor != "postgresql":
            return
        with self._lock:
            self._here()
            conn = self._conn
            if conn is not None and not conn.closed:
                try:
                    conn.execute("SELECT 1")
                    return
                except psycopg.Error:
                    conn.close()
            self._conn = None
            params = connections["default"].get_connection_params()
            conn = psycopg.connect(**{**params, "autocommit": True})
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", [self._key])
                conn.execute(
                    f"INSERT INTO {table(RunnerProcess)} (name, key, started_at) "
                    "VALUES (%s, %s, now()) ON CONFLICT (name) DO NOTHING",
                    [self._name, self._key])
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self.registered = True

    def close(self) -> None:
        """Let the lock go (the process is going away, or a test is done)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn, self.registered = None, False

    def _here(self) -> None:
        if self._pid != os.getpid():  # a new process (or a forked child): a new identity
            self._pid = os.getpid()
            self._name = f"{socket.gethostname()[:60]}:{self._pid}:{secrets.token_hex(4)}"
            self._key = secrets.randbits(KEY_BITS)
            self._conn = None  # the parent's connection is the parent's
            self.registered = False


liveness = Liveness()


DEAD_SQL = f"""
SELECT p.id, p.name FROM {table(RunnerProcess)} p
 WHERE pg_postmaster_start_time() < now() - make_interval(secs => %(grace)s)
   AND NOT EXISTS (
       SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND ((l.classid::bigint << 32) | l.objid::bigint) = p.key)
"""

EXPIRE_SQL = f"""
UPDATE {table(Task)} SET {_col("lease_expires_at")} = %(now)s
 WHERE {_col("status")} = %(running)s AND {_col("lease_expires_at")} > %(now)s
   AND starts_with({_col("lease_owner")}, %(prefix)s)
"""


def expire_dead_processes_leases() -> int:
    """Expire now the leases held by registered processes that are gone, and
    forget those processes; how many leases. PostgreSQL only (0 elsewhere)."""
    if connection.vendor != "postgresql":
        return 0
    grace = RESTART_GRACE_S + settings.TETHER["LEASE_TTL_S"] / 3
    with connection.cursor() as cursor:
        cursor.execute(DEAD_SQL, {"grace": grace})
        dead = cursor.fetchall()
        expired = 0
        now = timezone.now()
        for process_id, name in dead:
            cursor.execute(EXPIRE_SQL, {"now": now, "running": TaskStatus.RUNNING.value,
                                        "prefix": f"{name}:"})
            leases = cursor.rowcount
            RunnerProcess.objects.filter(pk=process_id).delete()
            log.warning("process %s is gone: %s of its leases expired now", name, leases)
            expired += leases
    return expired
