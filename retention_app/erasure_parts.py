"""What other apps erase and export of a subject, registered from their
AppConfig.ready (memory_app: the subject's items, versions and proposals), so
the erasure and the export reach them without importing them.

An erasure part is called inside the erasure's transaction and answers its
counts. An export part answers the querysets of what it holds of a subject
(or, with no subject, of the whole tenant): the same matcher its erasure part
deletes with, so an export holds exactly what an erasure would erase."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

from django.db.models import QuerySet

from foundations.actors import Actor

ErasurePart = Callable[[int, str, Actor], dict[str, int]]
_PARTS: dict[str, ErasurePart] = {}
# (tenant id, subject or None for the whole tenant) -> querysets, in pk order
ExportPart = Callable[[int, "str | None"], list[QuerySet]]
_EXPORT_PARTS: dict[str, ExportPart] = {}


def register_erasure_part(name: str, part: ErasurePart) -> None:
    _PARTS[name] = part


def erasure_parts() -> dict[str, ErasurePart]:
    return dict(_PARTS)


def register_export_part(name: str, part: ExportPart) -> None:
    _EXPORT_PARTS[name] = part


def export_parts() -> dict[str, ExportPart]:
    return dict(_EXPORT_PARTS)


def subject_reference(subject: str) -> str:
    """How an audit entry names an erased subject: a digest, never the subject
    itself (the entry must say an erasure happened without keeping what was erased)."""
    return "subject:sha256:" + hashlib.sha256(subject.encode("utf-8")).hexdigest()[:16]
