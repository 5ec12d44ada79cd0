"""Recovery without a scheduler: every worker process (and the embedded server)
runs the recovery sweep (`runner.recovery`) on its own timer, and a PostgreSQL
advisory lock lets at most one sweep run at a time across the deployment.

- `locked_sweep` runs under the deployment lock `SWEEP_LOCK_KEY`
  (`foundations.deployment_locks`: transaction-scoped, on a connection of its own,
  so it works behind PgBouncer and dies with a killed sweeper): a sweeper that
  finds the lock taken skips its turn (somebody is sweeping right now).
- Each sweep that runs is recorded in `SweepRun` (database clock), so an
  operator sees that recovery goes on and who ran it.
- `Sweeper` is the timer: a daemon thread calling `locked_sweep` every
  `TETHER_SWEEP_INTERVAL_S`, with a little jitter so the processes do not all
  knock at once. Celery starts one per pool process after the fork
  (`config.celery`); beat is optional, its entry calls `locked_sweep` too.

On SQLite (the embedded mode's single process: its backend's `one_process`)
there is no advisory lock and no second sweeper: the sweep simply runs.
"""
from __future__ import annotations

import logging
import os
import random
import threading

from django.conf import settings
from django.db import connections

from foundations.deployment_locks import deployment_lock

from ..models import SweepRun
from ..store.backends import backend
from .recovery import SweepReport, recovery_sweep

log = logging.getLogger(__name__)

SWEEP_LOCK_KEY = 0x7E7E_0002  # admission holds 0x7E7E_0001


def sweeper_owner() -> str:
    return f"{settings.TETHER_HOST_NAME}:{os.getpid()}:{threading.current_thread().name}"


def locked_sweep() -> SweepReport | None:
    """Run one recovery sweep unless another process is sweeping (then None)."""
    if backend().one_process:  # no other sweeper: nothing to lock out, nobody to tell
        return recovery_sweep()
    with deployment_lock(SWEEP_LOCK_KEY) as taken:
        if not taken:
            return None
        run = SweepRun.objects.create(owner=sweeper_owner()[:200],
                                      started_at=backend().wall_clock())
        report = recovery_sweep()
        SweepRun.objects.filter(pk=run.pk).update(
            finished_at=backend().wall_clock(), requeued=report.requeued, admitted=report.admitted,
            approvals_expired=report.approvals_expired, deadlines_failed=report.deadlines_failed)
        SweepRun.objects.filter(pk__lte=run.pk - SweepRun.KEEP).delete()
        return report


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
