from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retention_app.export_jobs import MANUAL_EXPORTS
from retention_app.services.export import export_run


@pytest.fixture
def export_dirs(settings: Any, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The archive and export storages in directories of the test's own."""
    archive, exports = tmp_path / "archive", tmp_path / "exports"
    settings.STORAGES = {**settings.STORAGES,
                         "archive": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                     "OPTIONS": {"location": str(archive)}},
                         "exports": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                     "OPTIONS": {"location": str(exports)}}}
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    MANUAL_EXPORTS.clear()
    yield archive, exports
    MANUAL_EXPORTS.clear()


@pytest.fixture
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    """The archive storage in a directory of the test's own."""
    settings.STORAGES = {**settings.STORAGES, "archive": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path)}}}
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return tmp_path


def run_queued_exports() -> list[str]:
    """What a worker does with the exports handed over (the `manual` runner's queue)."""
    outcomes = []
    while MANUAL_EXPORTS:
        outcomes.append(export_run(MANUAL_EXPORTS.pop(0)))
    return outcomes
