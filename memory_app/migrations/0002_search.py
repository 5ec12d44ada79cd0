"""Full-text search of items' text, in the database in use.

PostgreSQL: a generated tsvector column (`search`, English configuration),
GIN-indexed: written by the database with each row, never by the code.
SQLite: an FTS5 table over the items' text (external content), kept in step
by triggers on insert, update and delete.
"""
from django.db import migrations

TABLE = "memory_app_memoryitem"
FTS = f"{TABLE}_fts"

POSTGRES = [
    f"ALTER TABLE {TABLE} ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED",
    f"CREATE INDEX memory_search ON {TABLE} USING gin (search)",
]
POSTGRES_BACK = [
    "DROP INDEX IF EXISTS memory_search",
    f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS search",
]
SQLITE = [
    f"CREATE VIRTUAL TABLE {FTS} USING fts5(text, content='{TABLE}', content_rowid='id', "
    "tokenize='porter unicode61')",
    f"CREATE TRIGGER {FTS}_ai AFTER INSERT ON {TABLE} BEGIN "
    f"INSERT INTO {FTS}(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER {FTS}_ad AFTER DELETE ON {TABLE} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, text) VALUES ('delete', old.id, old.text); END",
    f"CREATE TRIGGER {FTS}_au AFTER UPDATE OF text ON {TABLE} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {FTS}(rowid, text) VALUES (new.id, new.text); END",
]
SQLITE_BACK = [
    f"DROP TRIGGER IF EXISTS {FTS}_au",
    f"DROP TRIGGER IF EXISTS {FTS}_ad",
    f"DROP TRIGGER IF EXISTS {FTS}_ai",
    f"DROP TABLE IF EXISTS {FTS}",
]


def _run(statements_of):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_of.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)
    return run


class Migration(migrations.Migration):

    dependencies = [("memory_app", "0001_initial")]

    operations = [
        migrations.RunPython(_run({"postgresql": POSTGRES, "sqlite": SQLITE}),
                             _run({"postgresql": POSTGRES_BACK, "sqlite": SQLITE_BACK})),
    ]
