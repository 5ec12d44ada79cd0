"""What a slice already knows about its task, carried from one step to the next.

A slice advances one task under its lease, so most of what a step reads was
written by the step before it: the task row, the latest step, the agent's
tools, the human facts pinned in the context. The memo keeps them, and the
next step checks only the task's version and status (one indexed read of two
columns) before trusting them: any other writer (a cancel, an operator)
bumps the version, and the memo is then dropped and everything read again.
A step whose decision costs nothing skips even that read and lets its
version-checked commit find out. Correctness never rests on the memo: every
write is still version-checked.

The context's sources are carried too: the summary, the recent steps (each
committed step is appended, and a new summary version takes the steps it
covers out) and the pinned human facts (which change only while the task
waits, never within a slice).

What may lag by at most one slice (`SLICE_S`): a tool disabled or edited, a
model API key rotated (the secret is read once per slice), or a summary
rolled back, while the slice runs (the task's own status is never
taken from the memo). The approval rules and the requester's scope lag by a
second at most (`approvals_app.policy.PolicyReads`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accounts_app.vault.lookup import Resolved
from approvals_app.policy import PolicyReads
from tools_app.executor.types import ToolSpec

from ..context.builder import ContextSources
from ..gateway import is_instant
from ..models import Step, Task
from ..models.tasks import OPEN_STEP_STATUSES
from ..snapshot import TaskSnapshot
from ..store.backends import backend
from .shadow import RecordedCall

PROBE_SQL = f"SELECT version, status FROM {Task._meta.db_table} WHERE id = %s"


def probe(task_id: int) -> tuple[Any, ...] | None:
    """The task's (version, status): the runner's most frequent read, without
    the ORM (prepared on PostgreSQL)."""
    return backend().fetch_one(PROBE_SQL, [task_id])


@dataclass
class SliceMemo:
    leased: Task | None = None  # the row the lease statement returned, for the first step
    snap: TaskSnapshot | None = None  # the task as this slice last committed it
    current: Step | None = None  # its latest step, as committed
    specs: dict[str, ToolSpec] | None = None  # the agent's enabled tools
    keys: Resolved | None = None  # its model's API keys (a rotation applies from the next slice)
    human_facts: list[dict[str, Any]] | None = None  # answers, approvals: set while waiting
    sources: ContextSources | None = None  # what the last context was built from
    output_hashes: dict[int, str] = field(default_factory=dict)  # step_no -> hash, recent steps
    policy_reads: PolicyReads = field(default_factory=PolicyReads)  # rules, scope: for a second
    record: list[RecordedCall] | None = None  # an evaluation run's recorded ledger (`shadow`)

    def still_valid(self, task_id: int) -> bool:
        """Does the task still stand where this slice left it? (Else forget it all.)

        The probe guards what a step spends before its first write: a model
        call. When the next decision costs nothing (`decision_is_free`), the
        step goes without it: its decision's commit checks the version anyway,
        and no tool runs before that commit."""
        if self.snap is None:  # the last step did not leave a state to carry forward
            self.forget()
            return False
        if self.decision_is_free():
            return True
        row = probe(task_id)
        if row is not None and tuple(row) == (self.snap.version, self.snap.status):
            return True
        self.forget()
        return False

    def decision_is_free(self) -> bool:
        """The next step only decides (its last step is settled, not a call to
        resume or retry) and deciding calls no model: the scripted backend, or
        the next decision queued from a multi-call reply."""
        if self.snap is None or self.current is None or self.current.status in OPEN_STEP_STATUSES:
            return False
        if (self.current.model_log or {}).get("queued"):
            return True
        return is_instant((self.snap.agent.get("model") or {}).get("backend", "scripted"))

    def forget(self) -> None:
        self.snap, self.current, self.specs, self.human_facts = None, None, None, None
        self.keys = None
        self.sources, self.output_hashes = None, {}

    def remember(self, snap: TaskSnapshot, current: Step) -> None:
        self.snap, self.current = snap, current
        if self.sources is not None:
            self.sources = self.sources.with_step(current)
        if current.output_hash:
            self.output_hashes[current.step_no] = current.output_hash
        # keep only what a no-progress window can look at
        for step_no in [n for n in self.output_hashes if n < current.step_no - 64]:
            del self.output_hashes[step_no]
