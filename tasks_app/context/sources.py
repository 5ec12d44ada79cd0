"""What other apps add to a step's context, registered from their
`AppConfig.ready` (the runtime imports none of them): `register_context_source`.

A source is `source(snap, budget_chars) -> items`: called once each time a
step's context is built, it returns `ContextItem`s (role "memory": shown to the
model as data, fenced and labelled, never as instructions) that fit in
`budget_chars` (their text and data, `item_size`). It reads a bounded number
of rows. A source that raises is logged and adds nothing: the step goes on
without it.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable

from ..gateway.base import ContextItem
from ..snapshot import TaskSnapshot

log = logging.getLogger(__name__)

ContextSource = Callable[[TaskSnapshot, int], list[ContextItem]]

_sources: dict[str, ContextSource] = {}


def register_context_source(name: str, source: ContextSource) -> None:
    _sources[name] = source  # ready() may run twice: the same name, the same source


def item_size(item: ContextItem) -> int:
    """An item's share of the budget: its text and its data, as JSON."""
    return len(item.text) + (len(json.dumps(item.data, default=str)) if item.data else 0)


def extra_items(snap: TaskSnapshot, *, budget_chars: int) -> tuple[ContextItem, ...]:
    """The registered sources' items for this step, within `budget_chars` in all."""
    items: list[ContextItem] = []
    left = budget_chars
    for name, source in _sources.items():
        if left <= 0:
            break
        try:
            found = source(snap, left)
        except Exception:  # noqa: BLE001 - a source's failure must not stop the step
            log.exception("context source %s failed for task %s", name, snap.id)
            continue
        for item in found:
            size = item_size(item)
            if size > left:
                break
            items.append(item)
            left -= size
    return tuple(items)
