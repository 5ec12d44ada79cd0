"""notify_app's registrations with the task runtime (`tasks_app.store.hooks`)
and with its own lower layers (`dispatch`: who sends a delivery), made once
from `NotifyConfig.ready`."""
from __future__ import annotations

from accounts_app.vault.stores import SealedColumn, register_sealed
from tasks_app.runner.embedded import embedded_runner
from tasks_app.store.hooks import on_event_appended, on_sweep

from .dispatch import register_sender
from .events import DECISION_EVENTS, NOTIFIED_TASK_EVENTS
from .models import WebhookSubscription
from .services.delivery import delivery_attempt
from .services.outbox import on_task_event
from .services.slack import on_approval_decided
from .services.sweep import notify_sweep
from .tasks import deliver_later


def register() -> None:
    on_event_appended(NOTIFIED_TASK_EVENTS, on_task_event)
    on_sweep(notify_sweep)
    # an approval's Slack message shows its decision, wherever it was taken
    on_event_appended(DECISION_EVENTS, on_approval_decided)
    register_sender("celery", deliver_later)
    register_sender("embedded", lambda delivery_id, delay_s: embedded_runner.submit_job(
        delivery_attempt, delivery_id, delay_s=delay_s))
    # webhook signing secrets are sealed with the tenant-secret keys: rotated with them
    register_sealed(SealedColumn(WebhookSubscription, "secret_sealed",
                                 lambda row: f"{row.tenant.name}/webhook {row.pk}"))
