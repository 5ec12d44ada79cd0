"""A slice's budget counts the CPU its phases use, not their wall time: in a
driver with hundreds of slices, a phase's wall time is mostly the others' turns."""
from __future__ import annotations

import time

import pytest

from foundations.ioloop import run_io
from tasks_app.runner.hops import CallerHop, ThreadHop

# A phase runs the way the runner's do, in a database thread that checks its
# connection first: the database must be reachable, though nothing is written.
pytestmark = pytest.mark.django_db(transaction=True)


def _waits() -> str:
    time.sleep(0.3)  # a phase that waits (a lock, a slow round trip) uses no CPU
    return "waited"


def _works() -> str:
    started = time.thread_time()
    while time.thread_time() - started < 0.05:
        pass
    return "worked"


def test_a_thread_hop_counts_its_phases_cpu_not_their_wall_time():
    hop = ThreadHop()

    async def phases() -> list[str]:
        return [await hop(_waits), await hop(_works)]

    assert run_io(phases()) == ["waited", "worked"]
    assert 0.05 <= hop.worked_s < 0.25  # the 0.3 s of waiting is not in it


def test_a_caller_hop_counts_its_phases_cpu_not_their_wall_time():
    hop = CallerHop()

    async def phases() -> list[str]:
        return [await hop(_waits), await hop(_works)]

    assert hop.drive(phases()) == ["waited", "worked"]
    assert 0.05 <= hop.worked_s < 0.25
