"""Fixtures for the schedules tests: the API tests' tenants and clients
(`tests/api/conftest.py`), and schedules made through the real service."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from schedules_app.models import Schedule
from schedules_app.services.schedules import schedule_create
from tests.api.conftest import (  # noqa: F401 - fixtures
    _fast_password_hashing,
    _fresh_throttle_cache,
    hanging_url,
    main,
    other,
)
from tests.factories import actor_of

FINAL = [{"final": {"ok": True}}]


def minute_now() -> datetime:
    """Now, on the minute: a due time of an every-minute schedule that has just come."""
    return timezone.now().replace(second=0, microsecond=0)


def make_schedule(tenant: Any, creator: Any, *, name: str = "nightly",
                  due_at: datetime | None = None, **fields: Any) -> Schedule:
    """An every-minute schedule of the `support` agent; `due_at` moves its next
    due time (into the past, for the sweep to find it due)."""
    fields = {"target": {"agent": "support"}, "script": FINAL, "cron": "* * * * *",
              "timezone": "UTC", **fields}
    schedule = schedule_create(tenant_id=tenant.pk, name=name, actor=actor_of(creator),
                               **fields)
    if due_at is not None:
        Schedule.objects.filter(pk=schedule.pk).update(next_due_at=due_at)
        schedule.refresh_from_db()
    return schedule


@pytest.fixture
def admin(world: Any) -> Any:
    return world.users["admin"]


def minutes(n: int) -> timedelta:
    return timedelta(minutes=n)
