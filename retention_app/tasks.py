"""Celery entry points of retention_app: ids in, call a service, nothing else."""
from __future__ import annotations

from celery import shared_task

from .services.export import export_run


@shared_task(name="retention_app.tasks.run_export", ignore_result=True)
def run_export(export_id: int) -> str:
    return export_run(int(export_id))
