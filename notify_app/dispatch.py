"""Handing a delivery to whoever sends it: a Celery worker in production, the
embedded runner's loop in the embedded mode, nobody in `manual` (tests drain
`MANUAL_DELIVERIES` themselves).

Called after commit only (a worker must never read a delivery whose row is not
visible yet). A failed enqueue is logged, not raised: the delivery is durable
and the sweep (`services.sweep`) dispatches what is due and unclaimed. Retries
due later than `COUNTDOWN_MAX_S` are left to the sweep too, rather than held as
broker ETA messages for hours (Redis redelivers those after its visibility timeout).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

COUNTDOWN_MAX_S = 60.0
MANUAL_DELIVERIES: list[tuple[int, float]] = []
_manual_lock = threading.Lock()


def schedule_delivery(delivery_id: int, *, delay_s: float = 0.0) -> bool:
    if delay_s > COUNTDOWN_MAX_S:
        return True  # the sweep sends it when due
    mode = settings.TETHER_RUNNER
    if mode == "celery":
        from .tasks import deliver

        try:
            deliver.apply_async((delivery_id,), countdown=max(0.0, delay_s))
        except Exception:  # any broker failure: the delivery is committed, the sweep sends it
            log.warning("could not enqueue delivery %s; the sweep will", delivery_id,
                        exc_info=True)
            return False
        return True
    if mode == "embedded":
        from tasks_app.runner.embedded import embedded_runner

        from .services.delivery import delivery_attempt

        return embedded_runner.submit_job(delivery_attempt, delivery_id, delay_s=delay_s)
    with _manual_lock:
        MANUAL_DELIVERIES.append((delivery_id, delay_s))
    return True


def schedule_on_commit(delivery_ids: Iterable[int]) -> None:
    ids = list(delivery_ids)
    if ids:
        transaction.on_commit(lambda: [schedule_delivery(i) for i in ids])
