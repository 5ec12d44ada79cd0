"""The bench's downstream store: the table its idempotent write tool writes.

Unmanaged and without migrations, so no product database ever gets it: the
bench creates it in its own database when it starts (`store_ensure`). The
explicit app label lets the tool import it in a worker, where this app is not
installed.
"""

from __future__ import annotations

from django.db import connection, models


class BenchRecord(models.Model):
    """One row per idempotency key, however often the call is replayed."""

    idempotency_key = models.CharField(max_length=64)  # unique: Meta
    task_id = models.BigIntegerField()
    n = models.PositiveIntegerField()
    value = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "benchmarks"
        db_table = "bench_record"
        managed = False
        constraints = [models.UniqueConstraint(fields=["idempotency_key"], name="bench_record_key")]

    def __str__(self) -> str:
        return f"bench record {self.n} of task {self.task_id}"


def store_ensure() -> None:
    """Create the bench's table in the database Django is connected to, if missing."""
    if BenchRecord._meta.db_table in connection.introspection.table_names():
        return
    with connection.schema_editor() as editor:
        editor.create_model(BenchRecord)
