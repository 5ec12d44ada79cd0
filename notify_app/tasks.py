"""Celery entry points of notify_app: ids in, call a service, nothing else."""
from __future__ import annotations

from celery import shared_task

from .services.delivery import delivery_attempt


@shared_task(name="notify_app.tasks.deliver", ignore_result=True)
def deliver(delivery_id: int) -> str:
    return delivery_attempt(int(delivery_id))


def deliver_later(delivery_id: int, delay_s: float) -> bool:
    """`dispatch`'s sender in the Celery mode (registered by `hooks.register`)."""
    deliver.apply_async((delivery_id,), countdown=max(0.0, delay_s))
    return True
