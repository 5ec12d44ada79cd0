"""A wave: several tool calls of one task in flight at once, within one slice.

A task whose snapshot says `parallel_calls` (a workflow run: its orchestrator
decides every call that is ready, and those never depend on each other) runs
the calls of one reply together instead of one step after another:

1. each decision is recorded as usual, one step each (its key, its ledger
   claim, the policy and budget checks), until the reply's calls are all
   recorded or one needs a person (approval: it is left queued, and decided
   alone once the wave is over, since asking stops the task);
2. the calls are awaited together on the I/O loop;
3. their outcomes commit one at a time, as each call ends, each from the
   task as the previous commit left it (`Wave.commit`): a commit is
   version-checked as always, so a cancel meanwhile still fences every late
   result.

A slice that ends with calls of a wave unsettled (a retry's backoff, a crash)
leaves their steps open; the decision maker then names them
(`gateway.OpenSteps`) and the next slice resumes them together
(`resume_wave`) before anything new is decided.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from ..actors import Actor
from ..gateway import Decision
from ..models import Step, StepStatus, Task
from ..snapshot import TaskSnapshot
from .deciding import record_reply
from .executing import Admitted, execute
from .hops import Hop
from .memo import SliceMemo
from .recording import Decided
from .results import CONTINUE, STOP, Next, Spent, StepResult

WAVE_MAX = 50  # calls recorded into one wave at most (the rest stay queued)
RESUMABLE = (StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.UNCERTAIN)


@dataclass
class Wave:
    """The commits of a wave's calls, taking turns."""

    memo: SliceMemo
    snap: TaskSnapshot | None  # as the last commit left the task; None: read it again
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def commit(self, hop: Hop, fn: Any, snap: TaskSnapshot, *args: Any, **kwargs: Any) -> Any:
        """Run the commit phase `fn(snap, ...)` with the task as it now stands."""
        async with self.lock:
            self.memo.snap = None  # set again by a commit that knows what it wrote
            result = await hop(_at_latest, fn, self.snap, snap.id, *args, **kwargs)
            self.snap = self.memo.snap
            return result


def _at_latest(fn: Any, latest: TaskSnapshot | None, task_id: int, *args: Any,
               **kwargs: Any) -> Any:
    snap = latest if latest is not None else TaskSnapshot.of(Task.objects.get(pk=task_id))
    return fn(snap, *args, **kwargs)


def parallel(snap: TaskSnapshot) -> bool:
    return bool(snap.agent.get("parallel_calls"))


async def run_wave(first: Decided, admitted: StepResult | Admitted | None, *, owner: str,
                   memo: SliceMemo, hop: Hop) -> StepResult:
    """Record the decisions queued behind `first` and run all their calls at once."""
    calls: list[tuple[Decided, StepResult | Admitted | None]] = [(first, admitted)]
    snap, holder = first.snap, first.step
    queued = list((holder.model_log or {}).get("queued") or [])
    specs = memo.specs or {}
    stopped: StepResult | None = None
    while queued and len(calls) < WAVE_MAX:
        decision = Decision.from_dict(queued[0])
        spec = specs.get(decision.tool)
        if decision.kind != "tool_call" or spec is None or spec.requires_approval:
            break  # decided alone, after the wave
        model_log = {"from_reply_of_step": holder.step_no, "queued": queued[1:]}
        recorded = await hop(record_reply, snap, decision, model_log, Spent(), specs, None,
                             owner=owner, memo=memo, free=True)
        if not isinstance(recorded.result, Decided):
            stopped = recorded.result  # refused or invalid, recorded: the wave goes without it
            break
        calls.append((recorded.result, recorded.admitted))
        snap, holder, queued = recorded.result.snap, recorded.result.step, queued[1:]
    wave = Wave(memo, snap if stopped is None else None)
    results = await _together(
        [execute(d.snap, d.step, owner=owner, actor=Actor.worker(owner), memo=memo, hop=hop,
                 admitted=adm, wave=wave) for d, adm in calls])
    return _settled(memo, wave, [d.step for d, _ in calls],
                    results + ([stopped] if stopped is not None else []))


async def resume_wave(snap: TaskSnapshot, steps: list[Step], *, owner: str, memo: SliceMemo,
                      hop: Hop) -> StepResult:
    """Resume a task's open calls together (each through the ledger, as a
    resumed step is); one still in its backoff brings the task back when due."""
    now = timezone.now()
    due = [s for s in steps if s.status in RESUMABLE
           and not (s.next_attempt_at and s.next_attempt_at > now)]
    later = [(s.next_attempt_at - now).total_seconds() for s in steps
             if s.status in RESUMABLE and s.next_attempt_at and s.next_attempt_at > now]
    if not due:
        return StepResult(Next.LATER, min(later) if later else 5.0, "open steps")
    wave = Wave(memo, snap)
    results = await _together(
        [execute(snap, s, owner=owner, actor=Actor.worker(owner), memo=memo, hop=hop, wave=wave)
         for s in due])
    if later:
        results.append(StepResult(Next.LATER, min(later), "backoff"))
    return _settled(memo, wave, due, results)


async def _together(calls: list[Any]) -> list[StepResult]:
    """Await every call; a bug in one does not abandon the others' commits."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    results: list[StepResult] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results


def _settled(memo: SliceMemo, wave: Wave, steps: list[Step],
             results: list[StepResult]) -> StepResult:
    """What the slice does after a wave: stop if any call stopped the task,
    come back at the earliest delay if any must wait, else go on. The memo
    keeps the task as the last commit left it only if every call went on."""
    if all(r.next is Next.CONTINUE for r in results) and wave.snap is not None:
        memo.snap, memo.current = wave.snap, max(steps, key=lambda s: s.step_no)
    else:
        memo.forget()
    if any(r.next is Next.STOP for r in results):
        return STOP
    delays = [r.delay_s for r in results if r.next is Next.LATER]
    if delays:
        return StepResult(Next.LATER, min(delays), "wave")
    return CONTINUE
