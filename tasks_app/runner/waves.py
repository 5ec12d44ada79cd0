"""A wave: several tool calls of one task in flight at once, within one slice.

A workflow run (its snapshot says `parallel_calls`: its orchestrator decides
every call that is ready, and those never depend on each other) and an
agent's task whose model asked for several calls in one reply
(`reply_calls`) run the calls of one reply together instead of one step
after another:

1. each decision is recorded as usual, one step each (its key, its ledger
   claim, the policy and budget checks), until the reply's calls are all
   recorded or one is not a tool call (it is decided once the wave is over).
   A call that needs a person: a workflow's is left queued, and decided alone
   once the wave is over (asking stops the task); an agent's gets its own
   card and the others run meanwhile (`recording.Deferred`);
2. the calls are awaited together on the I/O loop (an agent's reply: at most
   `PARALLEL_TOOL_CALLS` at once, the others starting as those end);
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

from django.conf import settings
from django.utils import timezone

from foundations.actors import Actor

from ..gateway import Decision
from ..machine import TaskStatus
from ..models import Step, StepStatus, Task
from ..snapshot import TaskSnapshot
from .deciding import record_reply
from .executing import Admitted, Answered, execute
from .hops import Hop
from .memo import SliceMemo, probe
from .recording import Decided, Deferred
from .reply_calls import agent_runs_together
from .results import CONTINUE, STOP, Next, Spent, StepResult

WAVE_MAX = 50  # calls recorded into one wave at most (the rest stay queued)
# (a reply's calls run `PARALLEL_TOOL_CALLS` at once: `_together`)
RESUMABLE = (StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.UNCERTAIN)


@dataclass
class Wave:
    """The commits of a wave's calls, taking turns."""

    memo: SliceMemo
    snap: TaskSnapshot | None  # as the last commit left the task; None: read it again
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _running: bool | None = None  # still RUNNING when the calls went out (`may_send`)

    async def may_send(self, hop: Hop, task_id: int) -> bool:
        """May the wave's calls go out? The task is read once, right before the
        first call: a cancel that committed while the wave was being recorded
        sends none of them (each is given back to the ledger, uncalled). One
        that commits later is fenced when each outcome commits, as always."""
        if self._running is None:
            row = await hop(probe, task_id)
            self._running = row is not None and row[1] == TaskStatus.RUNNING
        return self._running

    def read_again(self) -> None:
        """The next call to go out reads the task first (it waited for room)."""
        self._running = None

    async def commit(self, hop: Hop, fn: Any, snap: TaskSnapshot, *args: Any, **kwargs: Any) -> Any:
        """Run the commit phase `fn(snap, ...)` with the task as it now stands."""
        async with self.lock:
            self.memo.snap = None  # set again by a commit that knows what it wrote
            used = self.snap or snap
            result = await hop(_at_latest, fn, self.snap, used, *args, **kwargs)
            self.snap = self.memo.snap
            return result


def _at_latest(fn: Any, latest: TaskSnapshot | None, known: TaskSnapshot, *args: Any,
               **kwargs: Any) -> Any:
    """`fn` with the task as it stands, read again when the last commit did not
    say (a retry's transition, a discard). A task that stopped meanwhile (a
    cancel) keeps the snapshot the wave knew: its version check fails, so the
    outcome is discarded and kept for audit, as a late result of any step."""
    if latest is None:
        fresh = TaskSnapshot.of(Task.objects.get(pk=known.id))
        latest = fresh if fresh.status == TaskStatus.RUNNING else known
    return fn(latest, *args, **kwargs)


def parallel(snap: TaskSnapshot) -> bool:
    return bool(snap.agent.get("parallel_calls")) or agent_runs_together(snap)


async def run_wave(first: Decided, admitted: StepResult | Admitted | Answered | None, *, owner: str,
                   memo: SliceMemo, hop: Hop) -> StepResult:
    """Record the decisions queued behind `first` and run all their calls at once."""
    calls: list[tuple[Decided, StepResult | Admitted | Answered | None]] = [(first, admitted)]
    snap, holder = first.snap, first.step
    queued = list((holder.model_log or {}).get("queued") or [])
    specs = memo.specs or {}
    stopped: StepResult | None = None
    while queued and len(calls) < WAVE_MAX:
        decision = Decision.from_dict(queued[0])
        spec = specs.get(decision.tool)
        if decision.kind != "tool_call" or spec is None or (
                spec.requires_approval and not agent_runs_together(snap)):
            break  # decided alone, after the wave
        model_log = {"from_reply_of_step": holder.step_no, "queued": queued[1:]}
        recorded = await hop(record_reply, snap, decision, model_log, Spent(), specs, None,
                             owner=owner, memo=memo, free=True)
        if isinstance(recorded.result, Deferred):  # its card is open; the others go on
            snap, holder, queued = recorded.result.snap, recorded.result.step, queued[1:]
            continue
        if not isinstance(recorded.result, Decided):
            stopped = recorded.result  # refused or invalid, recorded: the wave goes without it
            break
        calls.append((recorded.result, recorded.admitted))
        snap, holder, queued = recorded.result.snap, recorded.result.step, queued[1:]
    wave = Wave(memo, snap if stopped is None else None)
    results = await _together(
        [execute(d.snap, d.step, owner=owner, actor=Actor.worker(owner), memo=memo, hop=hop,
                 admitted=adm, wave=wave) for d, adm in calls], wave, snap)
    # the reply's last step recorded (a call, or a card) is the task's current one
    return _settled(memo, wave, holder, results + ([stopped] if stopped is not None else []))


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
         for s in due], wave, snap)
    if later:
        results.append(StepResult(Next.LATER, min(later), "backoff"))
    last = max(due, key=lambda s: s.step_no)
    if last.step_no != snap.steps_count:  # a reply's later steps (settled): read them again
        wave.snap = None
    return _settled(memo, wave, last, results)


async def _together(calls: list[Any], wave: Wave, snap: TaskSnapshot) -> list[StepResult]:
    """Await every call; a bug in one does not abandon the others' commits. An
    agent's reply runs at most `PARALLEL_TOOL_CALLS` at once, in the reply's
    order (a workflow's wave is bounded by `WAVE_MAX`); a call that waited for
    room reads the task again before it goes out, so none starts after a cancel."""
    room = asyncio.Semaphore(int(settings.TETHER["PARALLEL_TOOL_CALLS"])
                             if agent_runs_together(snap) else WAVE_MAX)

    async def bounded(call: Any) -> StepResult:
        waited = room.locked()
        async with room:
            if waited:
                wave.read_again()
            return await call  # type: ignore[no-any-return]

    outcomes = await asyncio.gather(*(bounded(c) for c in calls), return_exceptions=True)
    results: list[StepResult] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results


def _settled(memo: SliceMemo, wave: Wave, current: Step,
             results: list[StepResult]) -> StepResult:
    """What the slice does after a wave: stop if any call stopped the task,
    come back at the earliest delay if any must wait, else go on. The memo
    keeps the task as the last commit left it only if every call went on."""
    if all(r.next is Next.CONTINUE for r in results) and wave.snap is not None:
        memo.snap, memo.current = wave.snap, current
    else:
        memo.forget()
    if any(r.next is Next.STOP for r in results):
        return STOP
    delays = [r.delay_s for r in results if r.next is Next.LATER]
    if delays:
        return StepResult(Next.LATER, min(delays), "wave")
    return CONTINUE
