"""Where a marker string could still be after an erasure: a dump of the whole
test database, and every archive or export file (decompressed)."""
from __future__ import annotations

import gzip
import io
import os
import subprocess
import zipfile
from pathlib import Path

from django.db import connection


def database_dump() -> str:
    settings = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": settings.get("PASSWORD") or ""}
    return subprocess.run(
        ["pg_dump", "--data-only", "-h", settings.get("HOST") or "127.0.0.1",
         "-p", str(settings.get("PORT") or 5432), "-U", settings.get("USER") or "postgres",
         settings["NAME"]], env=env, check=True, capture_output=True, text=True).stdout


def files_text(root: Path) -> str:
    """Every file under `root`, as text: gzip and zip files decompressed, the rest raw."""
    parts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        content = path.read_bytes()
        if path.suffix == ".gz":
            content = gzip.decompress(content)
        elif path.suffix == ".zip":
            with zipfile.ZipFile(io.BytesIO(content)) as archive:
                content = b"".join(archive.read(name) for name in archive.namelist())
        parts.append(content.decode("utf-8", errors="replace"))
    return "\n".join(parts)
