"""The events table, partitioned by month on PostgreSQL.

`tasks_app_event` grows with every step and is never updated, so on PostgreSQL
it is a declarative RANGE-partitioned table on `created_at` (migration
`tasks_app.0025_event_partitions`), with one partition per calendar month (UTC)
named `tasks_app_event_pYYYY_MM` and a DEFAULT partition that takes any row no
month holds (a clock far off, a month not created in time, a restored event of
a month already dropped). Its primary key in the database is `(id, created_at)`:
a partitioned table's unique keys must hold the partition key; ids stay unique
because they all come from the one identity sequence, and Django keeps `id` as
the model's primary key. On SQLite nothing of this exists and every function
here does nothing.

- `event_months_ensure` creates the current month's partition and the next
  `MONTHS_AHEAD` (the recovery sweep calls it every turn, `registrations`): a
  month's rows never fall into the DEFAULT partition while workers sweep. A
  month whose rows did reach the DEFAULT partition gets them moved into its own
  partition as it is created.
- `event_month_drop` detaches and drops one month's partition unless a check
  the caller passes finds a row that must stay (retention_app decides what is
  droppable: months past the operator's maximum retention whose tasks are all
  archived).

DDL on the table runs one at a time (a transaction-scoped advisory lock, so two
hosts' sweepers cannot race on the same month), and under a short `lock_timeout`:
creating or detaching a partition locks the parent table for an instant, and a
sweep that cannot have the lock at once gives up until its next turn rather
than make the runner's event writes queue behind it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from ..models import Event
from .backends import backend
from .sql import table

log = logging.getLogger(__name__)

EVENTS = table(Event)
DEFAULT_PARTITION = f"{EVENTS}_default"
MONTHS_AHEAD = 2
DDL_LOCK_KEY = 0x7E7E_0004  # the deployment locks' series (foundations.deployment_locks)
# Short enough that the runner's writes never wait long behind a partition's
# creation or drop; below deadlock_timeout (1 s), so it is the sweep that gives up.
DDL_LOCK_TIMEOUT = "500ms"


@dataclass(frozen=True)
class EventMonth:
    name: str
    start: datetime  # first instant of the month, UTC
    end: datetime  # first instant of the next month


def month_of(moment: datetime, *, later: int = 0) -> EventMonth:
    """The month holding `moment` (UTC), or the one `later` months after it."""
    utc = moment.astimezone(UTC)
    index = utc.year * 12 + utc.month - 1 + later
    start = datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)
    after = index + 1
    return EventMonth(name=f"{EVENTS}_p{start:%Y_%m}", start=start,
                      end=datetime(after // 12, after % 12 + 1, 1, tzinfo=UTC))


def events_partitioned() -> bool:
    if not backend().partitions_events:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)",
                       [EVENTS])
        row = cursor.fetchone()
    return bool(row and row[0])


def event_partitions() -> set[str]:
    """The names of the events table's partitions, the DEFAULT one with them."""
    if not backend().partitions_events:
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                       " WHERE i.inhparent = to_regclass(%s)", [EVENTS])
        return {name for (name,) in cursor.fetchall()}


def event_months() -> list[EventMonth]:
    """The month partitions that exist, oldest first (not the DEFAULT one)."""
    months = []
    for name in event_partitions() - {DEFAULT_PARTITION}:
        try:
            start = datetime.strptime(name.removeprefix(f"{EVENTS}_p"), "%Y_%m")
        except ValueError:
            continue  # not one of ours: an operator's own partition is left alone
        months.append(month_of(start.replace(tzinfo=UTC)))
    return sorted(months, key=lambda month: month.start)


def event_months_ensure(*, now: datetime | None = None, ahead: int = MONTHS_AHEAD) -> list[str]:
    """Create the partitions of the current month and the `ahead` next ones that
    are missing; the names created. Idempotent, safe to run on several hosts."""
    if not events_partitioned():
        return []
    now = now or timezone.now()
    existing = {month.name for month in event_months()}
    created = []
    for later in range(ahead + 1):
        month = month_of(now, later=later)
        if month.name in existing:
            continue
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                _ddl_turn(cursor)
                if _exists(cursor, month.name):
                    continue  # another host made it meanwhile
                month_create(cursor, month)
        except DatabaseError:
            log.warning("could not create %s now; the next sweep tries again", month.name,
                        exc_info=True)
            continue
        created.append(month.name)
    return created


def month_create(cursor: CursorWrapper, month: EventMonth) -> None:
    """Create `month`'s partition (in the caller's transaction). Rows of that
    month already in the DEFAULT partition are moved into it first: PostgreSQL
    refuses a partition whose range the DEFAULT partition holds rows of."""
    start, end = month.start.isoformat(), month.end.isoformat()  # our own values: no injection
    bounds = f"FROM ('{start}') TO ('{end}')"
    in_month = f"created_at >= '{start}' AND created_at < '{end}'"
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {DEFAULT_PARTITION} WHERE {in_month})")
    strays = cursor.fetchone()[0]
    if not strays:
        cursor.execute(f"CREATE TABLE {month.name} PARTITION OF {EVENTS} FOR VALUES {bounds}")
        return
    cursor.execute(f"CREATE TABLE {month.name} (LIKE {EVENTS} INCLUDING DEFAULTS"
                   " INCLUDING CONSTRAINTS)")
    cursor.execute(f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE {in_month}"
                   f" RETURNING *) INSERT INTO {month.name} SELECT * FROM moved")
    cursor.execute(f"ALTER TABLE {EVENTS} ATTACH PARTITION {month.name} FOR VALUES {bounds}")


def event_month_drop(month: EventMonth, *,
                     keeps: Callable[[CursorWrapper, str], bool]) -> bool:
    """Detach and drop `month`'s partition unless `keeps(cursor, partition)` says
    a row of it must stay; whether it was dropped. The partition is locked
    against writes (reads go on) before `keeps` looks, so no row it did not see
    can be in what is dropped; a row written to that month afterwards (a
    restore) lands in the DEFAULT partition."""
    if not events_partitioned():
        return False
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _ddl_turn(cursor)
            if not _exists(cursor, month.name):
                return False
            cursor.execute(f"LOCK TABLE {month.name} IN SHARE MODE")
            if keeps(cursor, month.name):
                return False
            # Run now the foreign-key checks this transaction deferred (when
            # called inside a caller's transaction): PostgreSQL will not drop a
            # table with checks still pending on it. Every deferrable key in
            # the schema is initially deferred (Django's), so back to that after.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {EVENTS} DETACH PARTITION {month.name}")
            cursor.execute(f"DROP TABLE {month.name}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    except DatabaseError:
        log.warning("could not drop %s now; the next pass tries again", month.name,
                    exc_info=True)
        return False
    return True


def _ddl_turn(cursor: CursorWrapper) -> None:
    """One DDL on the events table at a time, none waiting long for its locks."""
    cursor.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [DDL_LOCK_KEY])


def _exists(cursor: CursorWrapper, name: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    return bool(cursor.fetchone()[0])
