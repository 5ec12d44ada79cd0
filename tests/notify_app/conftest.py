"""Fixtures for the notification tests: the API tests' tenants (a user and an API
client per role, tasks brought to each waiting state by the real runner), a
webhook receiver at the edge of the process, fast retries, and `drain`, which
sends what is due the way a worker would (the tests run `TETHER_RUNNER=manual`)."""
from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from accounts_app.models import Role
from notify_app.dispatch import MANUAL_DELIVERIES
from notify_app.models import Delivery, DeliveryStatus
from notify_app.services.delivery import delivery_attempt
from tasks_app.services.demo import demo_agent_ensure
from tests.api.conftest import (  # noqa: F401 - fixtures
    Tenancy,
    _fast_password_hashing,
    _fresh_throttle_cache,
    hanging_url,
    main,
    other,
)
from tests.factories import submit
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import drive, wait_for

ADM = Role.ADMIN
ALL_EVENTS = ["approval_requested", "question_asked", "reconciliation_opened", "task_escalated",
              "task_failed", "approval_sla_warning"]


@pytest.fixture(autouse=True)
def _fast_retries(settings: Any) -> None:
    settings.TETHER_WEBHOOK_BACKOFF_BASE_S = 0.05
    settings.TETHER_WEBHOOK_BACKOFF_MAX_S = 0.2
    settings.TETHER_WEBHOOK_TIMEOUT_S = 5.0
    MANUAL_DELIVERIES.clear()


def subscribe(tenancy: Tenancy, url: str, events: list[str] | None = None,
              **extra: Any) -> dict[str, Any]:
    response = tenancy.client(ADM).post(
        "/api/v1/webhooks", {"url": url, "events": events or ALL_EVENTS, **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def drain(timeout: float = 15.0) -> None:
    """Attempt every pending delivery until none is left pending (retries included)."""
    def settled() -> bool:
        pending = list(Delivery.objects.filter(status=DeliveryStatus.PENDING)
                       .filter(next_attempt_at__lte=timezone.now())
                       .values_list("id", flat=True))
        for delivery_id in pending:
            delivery_attempt(delivery_id)
        return not Delivery.objects.filter(status=DeliveryStatus.PENDING).exists()

    wait_for(settled, timeout=timeout, interval=0.02, message="every delivery to settle")


def failed_task(tenancy: Tenancy) -> Any:
    demo_agent_ensure(tenancy.tenant, name="failing", on_exhaustion="fail", max_steps=1)
    task = submit(tenancy.tenant, [{"invalid": "???"}, {"final": {"ok": True}}], agent="failing",
                  requester=tenancy.requester)
    return drive(task.pk)


__all__ = ["ADM", "ALL_EVENTS", "WebhookReceiver", "drain", "failed_task", "subscribe"]
