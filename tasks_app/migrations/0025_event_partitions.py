"""The events table becomes a table partitioned by month on `created_at`
(PostgreSQL only; on SQLite nothing changes). Plain SQL, no extra library: see
tasks_app.store.partitions for the layout and docs/how-to/retention.md for how
months are created and dropped.

The conversion renames the table, creates the partitioned one under the old
name (same columns, checks and identity; primary key `(id, created_at)`), a
partition per month from the oldest event to two months ahead and the DEFAULT
partition, copies the rows, recreates the indexes and foreign keys under their
own names, carries the id sequence on where the old one stood, and drops the
old table. In one transaction: on a large table it holds the table for the
copy's length, so run it in a maintenance window. The reverse turns it back
into a plain table the same way.
"""
from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

from tasks_app.store.partitions import DEFAULT_PARTITION, EVENTS, MONTHS_AHEAD, month_create, month_of

OLD = f"{EVENTS}_rebuilt"


def _rebuild(schema_editor: Any, *, partitioned: bool) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [EVENTS])
        if cursor.fetchone()[0] == ("p" if partitioned else "r"):
            return
        # What to recreate on the new table: its indexes but the primary key,
        # its foreign keys (names and definitions as they are), its sequence's place.
        cursor.execute("SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x"
                       " JOIN pg_class i ON i.oid = x.indexrelid"
                       " WHERE x.indrelid = to_regclass(%s) AND NOT x.indisprimary", [EVENTS])
        indexes = cursor.fetchall()
        cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
                       " WHERE conrelid = to_regclass(%s) AND contype IN ('f', 'p')"
                       " ORDER BY contype DESC", [EVENTS])
        constraints = cursor.fetchall()  # the primary key first
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [EVENTS])
        sequence = cursor.fetchone()[0]
        cursor.execute(f"SELECT last_value, is_called FROM {sequence}")
        last_value, is_called = cursor.fetchone()

        # The old table keeps its rows; its names are freed for the new one.
        for name, _definition in indexes:
            cursor.execute(f"DROP INDEX {name}")
        for name, _definition in constraints:
            cursor.execute(f"ALTER TABLE {EVENTS} DROP CONSTRAINT {name}")
        cursor.execute(f"ALTER TABLE {EVENTS} RENAME TO {OLD}")
        cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {OLD}_id_seq")

        like = f"(LIKE {OLD} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)"
        pk_name = constraints[0][0]
        if partitioned:
            cursor.execute(f"CREATE TABLE {EVENTS} {like} PARTITION BY RANGE (created_at)")
            cursor.execute(f"ALTER TABLE {EVENTS} ADD CONSTRAINT {pk_name}"
                           " PRIMARY KEY (id, created_at)")
            cursor.execute(f"CREATE TABLE {DEFAULT_PARTITION} PARTITION OF {EVENTS} DEFAULT")
            cursor.execute(f"SELECT MIN(created_at) FROM {OLD}")
            oldest = cursor.fetchone()[0] or timezone.now()
            month, last = month_of(oldest), month_of(timezone.now(), later=MONTHS_AHEAD)
            while month.start <= last.start:
                month_create(cursor, month)
                month = month_of(month.start, later=1)
        else:
            cursor.execute(f"CREATE TABLE {EVENTS} {like}")
            cursor.execute(f"ALTER TABLE {EVENTS} ADD CONSTRAINT {pk_name} PRIMARY KEY (id)")
        cursor.execute(f"INSERT INTO {EVENTS} SELECT * FROM {OLD}")
        for _name, definition in indexes:
            # A partitioned table's index reads "ON ONLY <table>"; either way it
            # names the table by its name, which the new table now has.
            cursor.execute(definition.replace(" ON ONLY ", " ON "))
        for name, definition in constraints[1:]:
            cursor.execute(f"ALTER TABLE {EVENTS} ADD CONSTRAINT {name} {definition}")
        cursor.execute(f"SELECT MAX(id) FROM {EVENTS}")
        highest = cursor.fetchone()[0] or 0
        next_id = max(last_value + (1 if is_called else 0), highest + 1)
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, false)",
                       [EVENTS, next_id])
        cursor.execute(f"DROP TABLE {OLD}")
        cursor.execute(f"ANALYZE {EVENTS}")


def partition(apps: Any, schema_editor: Any) -> None:
    _rebuild(schema_editor, partitioned=True)


def unpartition(apps: Any, schema_editor: Any) -> None:
    _rebuild(schema_editor, partitioned=False)


class Migration(migrations.Migration):

    dependencies = [
        ("tasks_app", "0024_api_key_scopes"),
        # the notification's foreign key to the event goes first: a partitioned
        # table's unique key holds created_at, which that key cannot reference
        ("notify_app", "0005_event_without_constraint"),
    ]

    operations = [migrations.RunPython(partition, unpartition)]
