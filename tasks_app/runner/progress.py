"""No-progress detection: pure functions of a snapshot.

Two signals: the same tool with the same canonical arguments called
`no_progress_repeats` times in a row; and `no_progress_window` steps in a row
whose observation was already seen in the recent window (nothing new learned).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..snapshot import TaskSnapshot


@dataclass(frozen=True)
class Progress:
    last_call_hash: str
    repeat_count: int
    stale_steps: int


def after_call(snap: TaskSnapshot, *, call_hash: str, output_is_new: bool) -> Progress:
    repeat = snap.repeat_count + 1 if call_hash == snap.last_call_hash else 1
    stale = 0 if output_is_new else snap.stale_steps + 1
    return Progress(last_call_hash=call_hash, repeat_count=repeat, stale_steps=stale)


def repeats_too_often(snap: TaskSnapshot, call_hash: str) -> bool:
    """Would this call be one repeat too many?"""
    limit = int(snap.agent.get("no_progress_repeats") or 0)
    return bool(limit) and call_hash == snap.last_call_hash and snap.repeat_count >= limit


def stalled(snap: TaskSnapshot) -> bool:
    limit = int(snap.agent.get("no_progress_window") or 0)
    return bool(limit) and snap.stale_steps >= limit
