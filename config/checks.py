"""System checks of the `TETHER_*` settings against the rest of the configuration.

Each setting's own type and limits are checked as the settings load
(`config.tether_settings`); these are the combinations that load but cannot
work. `TasksAppConfig.ready` registers them, so `manage.py check`, `migrate`
and `runserver` report them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


def check_tether_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    if settings.TETHER_RUNNER == "celery" and not settings.CELERY_BROKER_URL:
        messages.append(checks.Error(
            "TETHER_RUNNER is 'celery' but CELERY_BROKER_URL is not set: tasks would be "
            "published to Celery's default broker (AMQP on localhost), where no worker of "
            "this deployment listens.",
            hint="Set CELERY_BROKER_URL, or unset TETHER_RUNNER for the embedded runner.",
            id="tether.E002"))
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    threads = settings.TETHER["DRIVER_DB_THREADS"]
    if isinstance(pool, dict) and threads >= pool["max_size"]:
        messages.append(checks.Warning(
            f"TETHER_DRIVER_DB_THREADS ({threads}) is not below DB_POOL_MAX_SIZE "
            f"({pool['max_size']}): the driver's database threads can hold every connection "
            "of a worker process, and its sweeps, compensations and python tools then wait "
            "for one.",
            hint="Lower TETHER_DRIVER_DB_THREADS or raise DB_POOL_MAX_SIZE.",
            id="tether.W001"))
    return messages
