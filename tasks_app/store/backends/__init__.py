"""The store's two backends, one interface (`base.Backend`): `backend()` is the
one for the current connection.

Every statement that PostgreSQL and SQLite write differently lives here and
nowhere else: `base` is the ORM's way (plain SQL both run where the ORM is
too slow), which SQLite runs (`sqlite`: no advisory locks, one process);
`postgres` overrides the hot paths with one prepared statement each (a
commit's data-modifying CTEs, the lease, admission's reads). The rows written
are the same either way (tests/tasks_app/test_commit_shapes.py compares them);
the event hooks run, in the commit's transaction, on both.
"""
from __future__ import annotations

from django.db import connection

from .base import (
    ADMISSION_PAGE,
    BREAKER_ADMISSION_COLUMNS,
    AdmissionReads,
    Backend,
    Candidate,
)
from .postgres import PostgresBackend
from .sqlite import SqliteBackend

__all__ = ["ADMISSION_PAGE", "BREAKER_ADMISSION_COLUMNS", "ORM", "AdmissionReads", "Backend",
           "Candidate", "backend"]

_POSTGRES = PostgresBackend()
_SQLITE = SqliteBackend()
ORM = Backend()  # the ORM's way alone, on any database (tests compare it with the others)


def backend() -> Backend:
    """The backend of the current connection's database."""
    return _POSTGRES if connection.vendor == "postgresql" else _SQLITE
