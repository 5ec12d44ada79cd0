"""An export asked through the API runs as a Celery task on a real worker
process, which writes the file into the exports storage the web process then
streams back: progress reaches every task, the file matches its checksum."""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from retention_app.export_jobs import MANUAL_EXPORTS
from tests.api.conftest import client_for
from tests.factories import submit
from tests.helpers import drive, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_an_export_runs_on_a_worker_and_downloads(world, celery_workers, settings: Any,
                                                   tmp_path: Path):
    exports = tmp_path / "exports"
    settings.STORAGES = {**settings.STORAGES, "exports": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(exports)}}}
    tasks = {drive(submit(world.tenant, [{"final": {"n": n}}], subject="cust-7").pk).pk
             for n in range(3)}
    celery_workers.start(env={"TETHER_EXPORT_DIR": str(exports)})
    admin = client_for(world.users["admin"])

    asked = admin.post("/api/v1/exports", {"scope": "subject", "subject": "cust-7"},
                       format="json")
    assert asked.status_code == 202, asked.content
    url = f"/api/v1/exports/{asked.json()['id']}"

    def finished() -> dict[str, Any] | None:
        answer = admin.get(url).json()
        return answer if answer["status"] in ("done", "failed") else None

    status = wait_for(finished, timeout=60, message="the export to finish on the worker")

    assert status["status"] == "done", (status, celery_workers.logs())
    assert MANUAL_EXPORTS == []  # handed to the worker, not queued here
    assert status["tasks_done"] == status["tasks_total"] == 3 and status["progress"] == 1.0
    content = b"".join(admin.get(status["download"]).streaming_content)
    assert hashlib.sha256(content).hexdigest() == status["sha256"]
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        rows = [json.loads(line) for line in archive.read("tasks.jsonl").splitlines()]
    assert {row["task_id"] for row in rows} == tasks
