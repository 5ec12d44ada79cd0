"""What other apps erase of a subject, registered from their AppConfig.ready
(memory_app: the subject's items, versions and proposals), so the erasure
reaches them without importing them. A part is called inside the erasure's
transaction and answers its counts."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

from tasks_app.actors import Actor

ErasurePart = Callable[[int, str, Actor], dict[str, int]]
_PARTS: dict[str, ErasurePart] = {}


def register_erasure_part(name: str, part: ErasurePart) -> None:
    _PARTS[name] = part


def erasure_parts() -> dict[str, ErasurePart]:
    return dict(_PARTS)


def subject_reference(subject: str) -> str:
    """How an audit entry names an erased subject: a digest, never the subject
    itself (the entry must say an erasure happened without keeping what was erased)."""
    return "subject:sha256:" + hashlib.sha256(subject.encode("utf-8")).hexdigest()[:16]
