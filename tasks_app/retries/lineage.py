"""Idempotency keys across a retry chain.

Every task of a retry chain carries `key_lineage`, the id of the chain's root
task. A tool call of a retried task normally gets the usual server-made key
(`keys.idempotency_key`: its own task, its own step), with one exception: when
the chain already made *the same call*, the call takes that call's key, so the
ledger answers it with the stored result (SUCCEEDED) or settles it
(IN_PROGRESS, UNCERTAIN) instead of running it a second time.

"The same call" is: same tool, same canonical arguments (`keys.call_fingerprint`)
and the same occurrence: the k-th call with that fingerprint in this task
takes the key of the k-th such call of an earlier task of the chain (the
root first, then the retries in order). Counting occurrences instead of step
numbers keeps a refund the model re-proposes one step later from running twice,
and still never merges two different actions:
- a different tool or different arguments is a different fingerprint;
- two identical calls in one task are different occurrences (k = 1, 2), so
  they get different keys; a key already used by this task is never taken again;
- another tenant's or another chain's calls are never looked at.

A key is not reused when its call is known not to have happened
(FAILED_FINAL: the tool refused, e.g. a permission error since fixed) or when
the task's compensation undid it: the call then runs under a fresh key.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Q

from tools_app.models import LedgerStatus, ToolExecution

from ..keys import call_fingerprint, compensation_key
from ..models import Step, StepKind, Task


def lineage_key(*, task_id: int, key_lineage: int | None, step_no: int, tool: str,
                args: dict[str, Any]) -> str | None:
    """The key of the same call made earlier in the chain, or None (use a fresh key)."""
    if key_lineage is None:
        return None
    fingerprint = call_fingerprint(tool, args)
    mine = list(Step.objects.filter(task_id=task_id, kind=StepKind.TOOL, tool=tool,
                                    step_no__lt=step_no)
                .exclude(idempotency_key="").values_list("args", "idempotency_key"))
    used = {key for _, key in mine}
    occurrence = sum(1 for a, _ in mine if call_fingerprint(tool, a or {}) == fingerprint)
    earlier = (Task.objects.filter(Q(pk=key_lineage) | Q(key_lineage=key_lineage))
               .exclude(pk=task_id).order_by("pk").values_list("pk", flat=True))
    rows = (Step.objects.filter(task_id__in=list(earlier), kind=StepKind.TOOL, tool=tool)
            .exclude(idempotency_key="").order_by("task_id", "step_no")
            .values_list("task_id", "args", "idempotency_key"))
    seen: dict[int, int] = {}
    candidates: list[str] = []
    for other, args_, key in rows:
        if call_fingerprint(tool, args_ or {}) != fingerprint:
            continue
        n = seen.get(other, 0)
        seen[other] = n + 1
        if n == occurrence and key not in used and key not in candidates:
            candidates.append(key)
    if not candidates:
        return None
    statuses = dict(ToolExecution.objects.filter(idempotency_key__in=candidates)
                    .values_list("idempotency_key", "status"))
    undone = set(ToolExecution.objects.filter(
        idempotency_key__in=[compensation_key(k) for k in candidates],
        status=LedgerStatus.SUCCEEDED).values_list("idempotency_key", flat=True))
    for key in candidates:
        status = statuses.get(key)
        if status is None or status == LedgerStatus.FAILED_FINAL:
            continue  # never called, or known not to have happened
        if compensation_key(key) in undone:
            continue  # its effect was undone: doing it again is a new action
        return key
    return None
