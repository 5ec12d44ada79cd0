"""Handing a delivery to whoever sends it: a Celery worker in production, the
embedded runner's loop in the embedded mode, nobody in `manual` (tests drain
`MANUAL_DELIVERIES` themselves).

Called after commit only (a worker must never read a delivery whose row is not
visible yet). A failed enqueue is logged, not raised: the delivery is durable
and the sweep (`services.sweep`) dispatches what is due and unclaimed. Retries
due later than `COUNTDOWN_MAX_S` are left to the sweep too, rather than held as
broker ETA messages for hours (Redis redelivers those after its visibility timeout).

Who sends sits above this module (the Celery task in `notify_app.tasks`, the
embedded runner), so it is not imported: each mode's sender is registered by
`NotifyConfig.ready` (`hooks.register`), and `settings.TETHER_RUNNER` picks one.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

COUNTDOWN_MAX_S = 60.0
MANUAL_DELIVERIES: list[tuple[int, float]] = []
_manual_lock = threading.Lock()

# (delivery id, delay in seconds) -> False when nobody here can take it (the
# sweep sends it later); may raise (a broker that is down).
Sender = Callable[[int, float], bool]
_senders: dict[str, Sender] = {}


def register_sender(mode: str, sender: Sender) -> None:
    """Send `mode`'s deliveries with `sender`; a mode nobody registered (`manual`)
    queues them in this process for the tests to drain."""
    _senders[mode] = sender


def schedule_delivery(delivery_id: int, *, delay_s: float = 0.0) -> bool:
    if delay_s > COUNTDOWN_MAX_S:
        return True  # the sweep sends it when due
    sender = _senders.get(settings.TETHER_RUNNER)
    if sender is not None:
        try:
            return sender(delivery_id, delay_s)
        except Exception:  # any broker failure: the delivery is committed, the sweep sends it
            log.warning("could not enqueue delivery %s; the sweep will", delivery_id,
                        exc_info=True)
            return False
    with _manual_lock:
        MANUAL_DELIVERIES.append((delivery_id, delay_s))
    return True


def schedule_on_commit(delivery_ids: Iterable[int]) -> None:
    ids = list(delivery_ids)
    if ids:
        transaction.on_commit(lambda: [schedule_delivery(i) for i in ids])
