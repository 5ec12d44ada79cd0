"""Recovery without a scheduler: every worker process (and the embedded server)
runs the recovery sweep (`runner.recovery`) on its own timer, and a PostgreSQL
advisory lock lets at most one sweep run at a time across the deployment.

- `locked_sweep` takes `pg_try_advisory_xact_lock(SWEEP_LOCK_KEY)` in a
  transaction of a connection of its own, held open while the sweep runs on
  the thread's usual connection: a sweeper that finds the lock taken skips its
  turn (somebody is sweeping right now). The lock ends with that transaction:
  when the sweep ends, or when the process dies and its connection with it, so
  a killed sweeper never blocks the others. Transaction-scoped, not
  session-scoped: behind a pooler in transaction mode (PgBouncer) a session
  lock stays with whichever server connection ran it, and the sweep stopped
  for good once one was stranded. On its own connection, so the sweep's own
  transactions (admission's lock among them) commit as they go.
- Each sweep that runs is recorded in `SweepRun` (database clock), so an
  operator sees that recovery goes on and who ran it.
- `Sweeper` is the timer: a daemon thread calling `locked_sweep` every
  `TETHER_SWEEP_INTERVAL_S`, with a little jitter so the processes do not all
  knock at once. Celery starts one per pool process after the fork
  (`config.celery`); beat is optional, its entry calls `locked_sweep` too.

On SQLite (the embedded mode's single process) there is no advisory lock and
no second sweeper: the sweep simply runs.
"""
from __future__ import annotations

import logging
import os
import random
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.db.models import DateTimeField, Func

from ..models import SweepRun
from .recovery import SweepReport, recovery_sweep

log = logging.getLogger(__name__)

SWEEP_LOCK_KEY = 0x7E7E_0002  # admission holds 0x7E7E_0001
# The lock's connections, as pg_stat_activity names them.
LOCK_CONNECTION_NAME = "tether-sweep-lock"


class _ClockTimestamp(Func):
    """The database's wall clock now (not the transaction's start)."""

    function = "clock_timestamp"
    template = "clock_timestamp()"
    output_field = DateTimeField()


def sweeper_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


def locked_sweep() -> SweepReport | None:
    """Run one recovery sweep unless another process is sweeping (then None)."""
    if connection.vendor != "postgresql":
        return recovery_sweep()
    with _sweep_lock() as taken:
        if not taken:
            return None
        run = SweepRun.objects.create(owner=sweeper_owner()[:200], started_at=_ClockTimestamp())
        report = recovery_sweep()
        SweepRun.objects.filter(pk=run.pk).update(
            finished_at=_ClockTimestamp(), requeued=report.requeued, admitted=report.admitted,
            approvals_expired=report.approvals_expired, deadlines_failed=report.deadlines_failed)
        SweepRun.objects.filter(pk__lte=run.pk - SweepRun.KEEP).delete()
        return report


@contextmanager
def _sweep_lock() -> Iterator[bool]:
    """Whether this thread holds the deployment's sweep lock for the block."""
    holder = _lock_connection()
    try:
        row = holder.execute("SELECT pg_try_advisory_xact_lock(%s)", [SWEEP_LOCK_KEY]).fetchone()
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
# What psycopg.connect needs of Django's parameters (not its cursor class or adapters).
_CONNINFO_KEYS = ("dbname", "user", "password", "host", "port", "sslmode", "sslrootcert",
                  "sslcert", "sslkey", "options", "application_name", "client_encoding")


def _lock_connection() -> psycopg.Connection[Any]:
    """This thread's connection for the lock, kept between sweeps (one more per
    sweeping thread: the worker's sweeper, beat)."""
    held: psycopg.Connection[Any] | None = getattr(_lock_connections, "conn", None)
    if held is None or held.closed:
        params = connection.get_connection_params()
        conninfo = {k: params[k] for k in _CONNINFO_KEYS if params.get(k) is not None}
        conninfo["application_name"] = LOCK_CONNECTION_NAME
        held = psycopg.connect(**conninfo, autocommit=False, connect_timeout=5,
                               prepare_threshold=None)
        _lock_connections.conn = held
    return held


def _drop_lock_connection() -> None:
    held = getattr(_lock_connections, "conn", None)
    _lock_connections.conn = None
    if held is not None:
        with suppress(psycopg.Error):
            held.close()


class Sweeper:
    """A daemon thread that calls `locked_sweep` every `interval_s` seconds."""

    def __init__(self, interval_s: float | None = None) -> None:
        self.interval_s = interval_s or settings.TETHER["SWEEP_INTERVAL_S"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tether-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        # The first pass waits a random part of the interval: workers started
        # together spread their knocks over it.
        delay = random.uniform(0, self.interval_s)  # noqa: S311 - jitter, not a secret
        while not self._stop.wait(delay):
            delay = self.interval_s * random.uniform(0.9, 1.1)  # noqa: S311
            # Nothing may end this thread: the database or the broker may be
            # restarting (even giving the connections back can fail then).
            try:
                locked_sweep()
            except Exception:  # noqa: BLE001 - try again next turn
                log.warning("recovery sweep failed; the next turn tries again", exc_info=True)
            try:
                connections.close_all()  # this thread's connections back to the pool
            except Exception:  # noqa: BLE001
                log.warning("could not close the sweeper's connections", exc_info=True)


_process_sweeper: Sweeper | None = None
_process_lock = threading.Lock()


def start_process_sweeper() -> Sweeper | None:
    """Start this process's sweeper once (None when turned off)."""
    global _process_sweeper
    if not settings.TETHER["WORKER_SWEEP"]:
        return None
    with _process_lock:
        if _process_sweeper is None:
            _process_sweeper = Sweeper().start()
        return _process_sweeper
