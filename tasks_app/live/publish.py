"""Publishing a committed event to its task's and its tenant's groups.

Called only from `services.events.event_append`'s on-commit hook. A failure to
publish never fails the step: subscribers catch up from the database by
asking for events after the last id they saw.
"""
from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from ..models import Event
from ..selectors import event_dict

log = logging.getLogger(__name__)


def task_group(task_id: int) -> str:
    return f"task.{task_id}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def publish_event(event: Event) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "tether.event", "event": event_dict(event), "task_id": event.task_id}
    try:
        _send(layer, task_group(event.task_id), message)
        _send(layer, tenant_group(event.tenant_id), message)
    except Exception:  # noqa: BLE001 - live push is best effort; the log is the truth
        log.warning("could not publish event %s", event.pk, exc_info=True)


def _send(layer, group: str, message: dict) -> None:  # type: ignore[no-untyped-def]
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(layer.group_send)(group, message)
        return
    # Called on an event loop (should not happen: services are sync) - schedule it.
    asyncio.ensure_future(layer.group_send(group, message))
