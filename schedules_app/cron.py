"""Cron expressions and time zones: checking them, and the due times they give.

Parsing is croniter's (pinned in pyproject.toml): a maintained parser of the
standard five fields (minute, hour, day of month, month, day of week; names,
ranges, steps, and cron's "day of month OR day of week" rule). Only the five
fields are accepted here: no seconds field, no `@daily` macros, no hashed `H`.

A schedule's times are wall-clock times in its own IANA zone. croniter walks
the wall clock (naive datetimes, so DST never enters its arithmetic) and each
wall-clock time is placed in the zone here, then stored in UTC:

- a wall-clock time the spring change skips (02:30 when 02:00 jumps to 03:00)
  is read with the offset before the change, so it fires once, just after the
  gap (03:30 in that example, where 02:00 itself gives 03:00);
- a wall-clock time the autumn change repeats (01:30 twice) fires once, at its
  first occurrence: a daily job does not run twice that night, and an every-
  minute job pauses for the repeated hour.

So each matching wall-clock time fires at most once, and due times only move
forward.
"""
from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, croniter

MAX_CRON_CHARS = 100
FIELDS = 5
# Candidates looked at for one due time: more than one only in the autumn's repeated
# hour, whose wall-clock times (first occurrence) lie behind a time in its second one.
_MAX_CANDIDATES = 24 * 60 + 1


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def timezone_problem(name: object) -> str | None:
    """Why `name` is not an IANA time zone this system knows, or None."""
    if not isinstance(name, str) or name not in _zone_names():
        return "an IANA time zone name, e.g. Europe/Paris or UTC"
    return None


def cron_problem(expression: object) -> str | None:
    """Why `expression` is not a five-field cron expression that ever fires, or None."""
    if not isinstance(expression, str) or len(expression) > MAX_CRON_CHARS:
        return f"a cron expression of at most {MAX_CRON_CHARS} characters"
    if len(expression.split()) != FIELDS:
        return "five fields: minute hour day-of-month month day-of-week (e.g. '*/15 * * * *')"
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        return "no date matches it (e.g. 30 February)"
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        # croniter's errors are ValueErrors
        return f"not a valid cron expression: {exc}"
    return None


def _placed(wall: datetime, zone: ZoneInfo) -> datetime:
    """A wall-clock time in `zone`, in UTC (fold 0: the first occurrence of a repeated
    time, the offset before the change for a skipped one)."""
    return wall.replace(tzinfo=zone).astimezone(UTC)


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def next_due_after(expression: str, zone_name: str, after: datetime) -> datetime:
    """The first due time strictly after `after` (aware), in UTC."""
    zone = ZoneInfo(zone_name)
    walk = croniter(expression, _wall(after, zone))
    for _ in range(_MAX_CANDIDATES):
        due = _placed(walk.get_next(datetime), zone)
        if due > after:
            return due
    raise ValueError(f"{expression!r} gives no due time after {after.isoformat()}")


def due_times_between(expression: str, zone_name: str, first: datetime, until: datetime,
                      *, limit: int) -> list[datetime]:
    """The due times from `first` (itself a due time) to `until`, oldest first: all
    of them when there are at most `limit`, else the latest `limit`."""
    due: list[datetime] = []
    moment = first
    while moment <= until and len(due) <= limit:
        due.append(moment)
        moment = next_due_after(expression, zone_name, moment)
    if len(due) <= limit:
        return due
    return _latest_due_times(expression, zone_name, until, count=limit, not_before=first)


def _latest_due_times(expression: str, zone_name: str, until: datetime, *, count: int,
                      not_before: datetime) -> list[datetime]:
    """Walking back from `until`: the latest `count` due times, oldest first."""
    zone = ZoneInfo(zone_name)
    walk = croniter(expression, _wall(until, zone) + timedelta(seconds=1))
    found: list[datetime] = []
    for _ in range(count * 2 + _MAX_CANDIDATES):
        due = _placed(walk.get_prev(datetime), zone)
        if due < not_before:
            break
        if due <= until and due not in found and (not found or due < found[-1]):
            found.append(due)
            if len(found) == count:
                break
    return sorted(found)
