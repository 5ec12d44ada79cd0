"""notify_app's registrations with the task runtime (`tasks_app.store.hooks`),
made once from `NotifyConfig.ready`."""
from __future__ import annotations

from tasks_app.store.hooks import on_event_appended, on_sweep
from tasks_app.vault.stores import SealedColumn, register_sealed

from .events import NOTIFIED_TASK_EVENTS, on_task_event
from .models import WebhookSubscription
from .services.sweep import notify_sweep


def register() -> None:
    on_event_appended(NOTIFIED_TASK_EVENTS, on_task_event)
    on_sweep(notify_sweep)
    # webhook signing secrets are sealed with the tenant-secret keys: rotated with them
    register_sealed(SealedColumn(WebhookSubscription, "secret_sealed",
                                 lambda row: f"{row.tenant.name}/webhook {row.pk}"))
