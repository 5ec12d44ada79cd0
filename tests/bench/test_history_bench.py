"""`manage.py bench --quick --only history` end to end against the test
database's server: two databases of its own (one preloaded), real Celery
workers on each in turn, the archive sweep on the preloaded one. Speed is never
asserted: only that every figure is there, that the work behind it happened,
and that the bench's databases are gone afterwards."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection

from benchmarks.config import database_url_of
from benchmarks.management.commands.bench import Command as Bench
from benchmarks.report import dig

FIGURES = [
    ("empty", "steps_per_s"), ("full", "steps_per_s"),
    ("empty", "p50_ms"), ("full", "p50_ms"), ("empty", "p99_ms"), ("full", "p99_ms"),
    ("steps_ratio",), ("p50_ratio",), ("p99_ratio",),
    ("archive", "events_per_s"), ("archive", "seconds"), ("preload", "generate_s"),
]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_quick_history_bench_reports_every_figure(tmp_path, capfd):
    out = tmp_path / "history.json"

    call_command(Bench(), "--quick", "--only", "history", "--json", str(out),
                 "--database-url", database_url_of(connection.settings_dict))

    doc = json.loads(out.read_text())
    missing = [".".join(path) for path in FIGURES if not isinstance(dig(doc, path), int | float)]
    assert missing == []
    preload = doc["preload"]
    assert preload["table_tasks"] >= 10_000 and preload["table_events"] >= 100_000
    assert preload["partitions"] >= 3  # the months the preload spans, and those ahead
    assert doc["succeeded"] == doc["submitted"] == 2 * 8  # one round on each, 8 tasks
    archive = doc["archive"]
    assert archive["tasks"] == archive["deleted"] == 200
    assert archive["events"] == 200 * 10 and archive["files"] == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)",
                       [list(doc["databases"].values())])
        assert cursor.fetchall() == []  # dropped
    assert "steps/s, full vs empty" in capfd.readouterr().out  # the table
