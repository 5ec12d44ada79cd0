"""Sections other apps add to the inbox, registered from their `AppConfig.ready`
(approvals import none of them): `register_inbox_section`.

A section lists what waits for a reviewer without holding a task (memory_app's
proposed writes): `rows(tenant_id, limit)` its oldest open entries,
`count(tenant_id)` how many are open; `template` renders one entry (as `row`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InboxSection:
    key: str
    title: str
    template: str
    empty: str
    rows: Callable[[int, int], list[Any]]
    count: Callable[[int], int]


SECTIONS: dict[str, InboxSection] = {}


def register_inbox_section(section: InboxSection) -> None:
    SECTIONS[section.key] = section
