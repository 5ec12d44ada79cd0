"""Celery entry points of notify_app: ids in, call a service, nothing else."""
from __future__ import annotations

from celery import shared_task

from .services.delivery import delivery_attempt


@shared_task(name="notify_app.tasks.deliver", ignore_result=True)
def deliver(delivery_id: int) -> str:
    return delivery_attempt(int(delivery_id))
