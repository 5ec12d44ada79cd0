"""Keyset pagination for the console's lists: newest first, by id.

A page is the `size` rows before (older than) or after (newer than) an id the
link carries, so any page costs one indexed range read, however many rows
the tenant has; nothing counts the whole list (an exact COUNT over 100,000
tasks costs more than the page itself).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from .ids import parse_id


@dataclass(frozen=True)
class KeysetPage:
    rows: list[Any]
    newer: int | None  # the `after` cursor of the newer page, None on the first page
    older: int | None  # the `before` cursor of the older page, None on the last page


def cursor(value: str | None) -> int | None:
    """A cursor from a query string: a positive id, else none (never an error)."""
    number = parse_id(value)
    return number if number else None


def keyset_page(qs: QuerySet[Any], *, before: int | None, after: int | None,
                size: int) -> KeysetPage:
    """`qs` (ordered newest first) from just before `before`, or just after `after`."""
    if after is not None and before is None:
        rows = list(qs.filter(pk__gt=after).order_by("pk")[: size + 1])
        more_newer = len(rows) > size
        rows = rows[:size][::-1]
        more_older = bool(rows) and qs.filter(pk__lt=rows[-1].pk).exists()
    else:
        page = qs.filter(pk__lt=before) if before is not None else qs
        rows = list(page.order_by("-pk")[: size + 1])
        more_older = len(rows) > size
        rows = rows[:size]
        more_newer = before is not None and bool(rows) and qs.filter(pk__gt=rows[0].pk).exists()
    return KeysetPage(
        rows=rows,
        newer=rows[0].pk if rows and more_newer else None,
        older=rows[-1].pk if rows and more_older else None,
    )
