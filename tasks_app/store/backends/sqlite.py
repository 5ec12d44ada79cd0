"""SQLite, the embedded mode's database: the ORM's way (`base`), and what
SQLite lacks: advisory locks (its IMMEDIATE transactions already serialize
writers, and one process uses the file: no other sweeper to keep out)."""
from __future__ import annotations

from .base import AdmissionReads, Backend


class SqliteAdmissionReads(AdmissionReads):
    def lock(self) -> None:
        """Nothing to take: an IMMEDIATE transaction already serializes admitters."""


class SqliteBackend(Backend):
    admission = SqliteAdmissionReads()
    one_process = True
