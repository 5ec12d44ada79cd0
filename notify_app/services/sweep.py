"""notify_app's part of the recovery sweep (registered with `tasks_app.store.hooks`):

- SLA warnings: a pending approval with an SLA whose `TETHER_APPROVAL_SLA_WARNING_AT`
  fraction (80 %) has passed, and that has not expired yet, gets one
  `approval_sla_warning`. Once per approval, ever: the `SlaWarning` row (unique
  per approval) and the notification commit together, and a concurrent sweep's
  duplicate insert is refused by the constraint.
- Spend warnings: a tenant whose model spend this UTC day or month passed 80 %
  of its quota's limit (`tasks_app.services.quotas`) gets one `spend_warning`
  per period; the quota's mark of the period and the notification commit
  together. The notification hangs on the tenant's latest task (the one whose
  calls spent the most recently, as near as the rollup tells).
- Stuck deliveries: PENDING deliveries due for a few seconds and claimed by
  nobody (a dispatch lost with the broker, a worker that died mid-send, a retry
  due later than the broker should hold it) are dispatched again.
- Retention: notifications older than `TETHER_WEBHOOK_RETENTION_DAYS` whose
  deliveries are all finished go, with their deliveries and attempts.

The sweep sends nothing itself: it only writes, dispatches and deletes.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from approvals_app.selectors import pending_approvals_with_sla
from tasks_app.selectors import latest_task_id
from tasks_app.services.quotas import spend_warnings_claim, tenants_with_spend_limits

from ..dispatch import schedule_delivery
from ..models import Delivery, DeliveryStatus, EventType, Notification, SlaWarning
from .outbox import notification_emit

DUE_GRACE_S = 5.0
BATCH = 500


def notify_sweep() -> dict[str, int]:
    return {"sla_warnings": sla_warnings_emit(), "spend_warnings": spend_warnings_emit(),
            "redispatched": stuck_deliveries_dispatch(),
            "forgotten": old_notifications_delete()}


def sla_warnings_emit(*, batch: int = BATCH) -> int:
    now = timezone.now()
    at = settings.TETHER_APPROVAL_SLA_WARNING_AT
    warned = SlaWarning.objects.values("approval_id")
    emitted = 0
    for approval in pending_approvals_with_sla(now=now).exclude(pk__in=warned)[:batch]:
        assert approval.expires_at is not None
        sla = approval.expires_at - approval.created_at
        if now < approval.created_at + sla * at:
            continue
        try:
            with transaction.atomic():
                SlaWarning.objects.create(approval_id=approval.pk)
                notification_emit(
                    tenant_id=approval.tenant_id, task_id=approval.task_id,
                    type=EventType.APPROVAL_SLA_WARNING,
                    context={"approval_id": approval.pk, "sla_elapsed": round(at, 3),
                             "expires_at": approval.expires_at.isoformat()})
        except IntegrityError:
            continue  # another sweep warned first
        emitted += 1
    return emitted


def spend_warnings_emit() -> int:
    emitted = 0
    for tenant_id in tenants_with_spend_limits():
        with transaction.atomic():
            for use in spend_warnings_claim(tenant_id):
                latest = latest_task_id(tenant_id)  # some task spent: there is one
                assert latest is not None
                notification_emit(
                    tenant_id=tenant_id, task_id=latest, type=EventType.SPEND_WARNING,
                    context={"period": use.period, "period_starts": use.starts.isoformat(),
                             "limit": f"{use.limit:.2f}", "spent": f"{use.spent:.2f}",
                             "fraction": round(use.fraction, 3)})
                emitted += 1
    return emitted


def stuck_deliveries_dispatch(*, batch: int = BATCH) -> int:
    now = timezone.now()
    due = list(
        Delivery.objects.filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now),
                                status=DeliveryStatus.PENDING,
                                next_attempt_at__lte=now - timedelta(seconds=DUE_GRACE_S))
        .order_by("next_attempt_at").values_list("id", flat=True)[:batch])
    for delivery_id in due:
        if not schedule_delivery(delivery_id):
            break  # the broker is down: the next sweep tries again
    return len(due)


def old_notifications_delete(*, batch: int = BATCH) -> int:
    cutoff = timezone.now() - timedelta(days=settings.TETHER_WEBHOOK_RETENTION_DAYS)
    old = list(Notification.objects.filter(created_at__lt=cutoff)
               .exclude(deliveries__status=DeliveryStatus.PENDING)
               .order_by("id").values_list("id", flat=True)[:batch])
    if old:
        Notification.objects.filter(pk__in=old).delete()
    return len(old)
