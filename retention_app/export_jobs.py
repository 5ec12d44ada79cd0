"""Handing an export job to whoever runs it: a Celery worker in production
(`retention_app.tasks.run_export`), the embedded runner's loop in the embedded
mode, nobody in `manual` (tests run `MANUAL_EXPORTS` themselves, as they drive
the runner).

Called after commit only (a worker must never read an export whose row is not
visible yet). A failed enqueue is logged, not raised: the export is queued in
the database, and the sweep (`services.export.exports_sweep`) hands it over
again. Who runs it sits above this module, so it is registered per mode by
`RetentionAppConfig.ready`, and `settings.TETHER_RUNNER` picks one.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

MANUAL_EXPORTS: list[int] = []
_manual_lock = threading.Lock()

# export id -> False when nobody here can take it (the sweep hands it over later)
Runner = Callable[[int], bool]
_runners: dict[str, Runner] = {}


def register_export_runner(mode: str, runner: Runner) -> None:
    _runners[mode] = runner


def schedule_export(export_id: int) -> None:
    """Hand the export to this mode's runner once the caller's transaction commits."""
    transaction.on_commit(lambda: hand_over(export_id))


def hand_over(export_id: int) -> bool:
    runner = _runners.get(settings.TETHER_RUNNER)
    if runner is None:
        with _manual_lock:
            MANUAL_EXPORTS.append(export_id)
        return True
    try:
        return runner(export_id)
    except Exception:  # any broker failure: the export is queued, the sweep hands it over
        log.warning("could not enqueue export %s; the sweep will", export_id, exc_info=True)
        return False
