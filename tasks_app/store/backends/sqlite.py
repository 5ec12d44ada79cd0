"""SQLite, the embedded mode's database: the ORM's way (`base`) and what
SQLite lacks, advisory locks: its IMMEDIATE transactions already serialize
writers (admission's lock is none), and one process uses the file (no other
sweeper to keep out: `one_process`)."""
from __future__ import annotations

from .base import Backend


class SqliteBackend(Backend):
    one_process = True
