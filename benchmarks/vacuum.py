"""Every measured run starts from a vacuumed database.

A run leaves thousands of dead row versions behind (each step updates its task
and step rows). Where autovacuum is off or late, the next run reads through
them: on a machine with autovacuum off, the runner's PostgreSQL CPU per step
rose from 1.3 to 7.4 ms over a day of bench runs, and each run measured the
history of the runs before it, not the code. `VACUUM (ANALYZE)` of the whole
database takes about 3 s once it is clean.
"""
from __future__ import annotations

from django.db import connection


def vacuum() -> None:
    with connection.cursor() as cur:  # autocommit: VACUUM cannot run in a transaction
        cur.execute("VACUUM (ANALYZE)")

