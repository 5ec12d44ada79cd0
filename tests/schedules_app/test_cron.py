"""Due times: five-field cron read in the schedule's IANA zone, stored in UTC,
correct across DST changes (each matching wall-clock time fires once)."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schedules_app.cron import cron_problem, due_times_between, next_due_after, timezone_problem

NEW_YORK = "America/New_York"  # 2026: 8 March 02:00 -> 03:00, 1 November 02:00 -> 01:00


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def walk(cron: str, zone: str, start: datetime, count: int) -> list[datetime]:
    out, moment = [], start
    for _ in range(count):
        moment = next_due_after(cron, zone, moment)
        out.append(moment)
    return out


def test_a_daily_time_keeps_its_wall_clock_across_both_changes():
    # 09:00 New York: 14:00 UTC in winter, 13:00 UTC in summer, and back
    assert walk("0 9 * * *", NEW_YORK, utc(2026, 3, 7, 0), 3) == [
        utc(2026, 3, 7, 14), utc(2026, 3, 8, 13), utc(2026, 3, 9, 13)]
    assert walk("0 9 * * *", NEW_YORK, utc(2026, 10, 31, 0), 3) == [
        utc(2026, 10, 31, 13), utc(2026, 11, 1, 14), utc(2026, 11, 2, 14)]


def test_a_time_the_spring_change_skips_fires_once_after_the_gap():
    # 02:30 does not exist on 8 March: it fires at 03:30 EDT (07:30 UTC), once
    assert walk("30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), 3) == [
        utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)]


def test_a_time_the_autumn_change_repeats_fires_once():
    # 01:30 happens twice on 1 November (EDT, then EST): the daily run fires once
    assert walk("30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 3) == [
        utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30), utc(2026, 11, 3, 6, 30)]
    # hourly: 00:00 EDT, 01:00 EDT, then 02:00 EST; the repeated 01:00 is not run twice
    assert walk("0 * * * *", NEW_YORK, utc(2026, 11, 1, 3), 4) == [
        utc(2026, 11, 1, 4), utc(2026, 11, 1, 5), utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)]


def test_every_half_hour_through_the_spring_gap_only_moves_forward():
    times = walk("*/30 * * * *", NEW_YORK, utc(2026, 3, 8, 6), 4)
    assert times == [utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 30),
                     utc(2026, 3, 8, 8)]


def test_due_times_between_keeps_the_latest_when_too_many_passed():
    first = utc(2026, 1, 1, 0, 0)
    assert due_times_between("* * * * *", "UTC", first, utc(2026, 1, 1, 0, 2), limit=5) == [
        first, utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2)]
    assert due_times_between("* * * * *", "UTC", first, utc(2026, 1, 1, 5, 0, 30), limit=3) == [
        utc(2026, 1, 1, 4, 58), utc(2026, 1, 1, 4, 59), utc(2026, 1, 1, 5, 0)]
    # the latest ones across a DST change are the ones the forward walk gives
    forward = walk("*/30 * * * *", NEW_YORK, utc(2026, 3, 8, 4, 59), 6)
    assert due_times_between("*/30 * * * *", NEW_YORK, forward[0], forward[-1],
                             limit=3) == forward[-3:]


@pytest.mark.parametrize("cron", ["", "* * * *", "* * * * * *", "@daily", "61 * * * *",
                                  "0 0 30 2 *", "H * * * *", "every minute", "x" * 101])
def test_bad_cron_expressions_say_why(cron):
    assert cron_problem(cron)


@pytest.mark.parametrize("cron", ["* * * * *", "*/15 9-17 * * mon-fri", "0 0 1 1 *", "5 4 * * 0"])
def test_good_cron_expressions(cron):
    assert cron_problem(cron) is None


def test_time_zones_are_iana_names():
    assert timezone_problem("Europe/Paris") is None and timezone_problem("UTC") is None
    for bad in ("Mars/Olympus", "", "../etc/passwd", "europe/paris", None):
        assert timezone_problem(bad)
