"""Archived months leave as a whole: on PostgreSQL, where the events table is
partitioned by month (tasks_app.store.partitions), the archive sweep drops a
month's partition instead of deleting its events row by row.

The rule: a month partition is dropped when it lies entirely before the
operator's maximum retention (`TETHER_RETENTION_MAX_DAYS` before now: no
tenant may keep anything longer) and every row it holds belongs to a task
already archived and not restored (or it holds no row at all). One row of a
task still online (running for months, finished too recently, restored) keeps
the whole month; the next pass looks again. The DEFAULT partition is never
dropped.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.backends.utils import CursorWrapper

from tasks_app.store.partitions import event_month_drop, event_months

from ..models import ArchivedTask


def archived_months_drop(*, now: datetime) -> list[str]:
    """Drop every droppable month partition; their names."""
    cutoff = now - timedelta(days=int(settings.TETHER["RETENTION_MAX_DAYS"]))
    return [month.name for month in event_months()
            if month.end <= cutoff and event_month_drop(month, keeps=_holds_unarchived_rows)]


def _holds_unarchived_rows(cursor: CursorWrapper, partition: str) -> bool:
    archived = ArchivedTask._meta.db_table
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {partition} e WHERE NOT EXISTS ("
        f"SELECT 1 FROM {archived} a WHERE a.task_id = e.task_id AND a.restored_at IS NULL))")
    return bool(cursor.fetchone()[0])
