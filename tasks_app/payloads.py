"""Payloads stored out of row, and the one way to read them back.

A value (a tool output, a model log, a decision, a result, a task input)
whose JSON is larger than `PAYLOAD_INLINE_MAX_BYTES` is stored once per tenant
and content in `PayloadBlob` (the store writes it in the commit's transaction:
`store.blobs`); its row holds a reference instead:

    {"$blob": "<sha256>", "size": <bytes>, "preview": "<the first 500 characters>"}

The tool ledger's copy of a tool output (`ToolExecution.result`) is stored
the same way, as a reference to the step's blob (`LEDGER_FIELDS`).

`resolve` (`resolve_ledger` for ledger rows) is the one function that puts the
values back, for every reader (the API, the console, the context builder, the
runner, the ledger's replay of a settled call, an evaluation's record): a
caller never sees a reference unless it reads the column raw. It reads a
blob only through a `PayloadUse` of the task asking (a ledger row: in the
row's tenant), so one tenant's task can never read another tenant's blob, nor
a task a blob it does not reference. A value that merely
looks like a reference (a dict with a "$blob" key) is stored out of row too,
whatever its size, so nothing written inline is ever taken for one.
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import QuerySet, Sum

from .keys import canonical_json, sha256_hex
from .models import PayloadBlob, PayloadUse, Task

REF = "$blob"
PREVIEW_CHARS = 500
# The step columns that may hold a reference, and the task's.
# (A decision and its arguments stay in the row: the runner reads them raw, and
# they are bounded by the model's reply, whose log is here.)
STEP_FIELDS = ("output", "model_log")
TASK_FIELDS = ("input", "result")
# The tool ledger's (`tools_app.models.ToolExecution`): its stored result, the
# same value as its step's output, so the same blob.
LEDGER_FIELDS = ("result",)


@dataclass(frozen=True)
class Blob:
    sha256: str
    size: int
    data: bytes  # compressed JSON
    ref: dict[str, Any]  # what the row holds instead


def inline_max() -> int:
    return int(settings.TETHER.get("PAYLOAD_INLINE_MAX_BYTES", 64 * 1024))


def task_max() -> int:
    return int(settings.TETHER.get("TASK_PAYLOAD_MAX_BYTES", 16 * 1024 * 1024))


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and REF in value


def size_of(value: Any) -> int:
    """Bytes of the value's JSON (as its column stores it)."""
    return len(json.dumps(value, default=str).encode())


def stays_inline(value: Any) -> bool:
    """`value` is stored in its row, not as a blob."""
    if value is None or isinstance(value, bool | int | float):
        return True
    return size_of(value) <= inline_max() and not is_reference(value)


def blob_of(value: Any) -> Blob | None:
    """The blob `value` is stored as, or None: it stays in its row."""
    if stays_inline(value):
        return None
    size = size_of(value)
    text = canonical_json(value)
    sha = sha256_hex(text)
    return Blob(sha256=sha, size=size, data=zlib.compress(text.encode()),
                ref={REF: sha, "size": size, "preview": text[:PREVIEW_CHARS]})


def refusal(task_id: int | None, value: Any) -> dict[str, Any] | None:
    """The business error when storing `value` would take the task past
    `TASK_PAYLOAD_MAX_BYTES` (None: it fits). A value kept inline always fits:
    no query for it."""
    size = size_of(value) if value is not None else 0
    if size <= inline_max():
        return None
    used = 0 if task_id is None else (
        PayloadUse.objects.filter(task_id=task_id).aggregate(n=Sum("size"))["n"] or 0)
    if used + size <= task_max():
        return None
    return {"type": "payload_too_large",
            "message": f"this payload ({size} bytes) would take the task's stored payloads past "
                       f"their limit of {task_max()} bytes ({used} used)",
            "size": size, "used": used, "limit": task_max()}


def resolve(task_id: int, rows: Iterable[Any], fields: Iterable[str]) -> None:
    """Put back, in place, the values `rows` (a task's steps, or the task, as
    instances or as `values()` dicts) hold as references in `fields`: one
    query for them all, none when no row holds one. The one way any reader
    gets a payload stored out of row."""
    _put_back(list(rows), tuple(fields), PayloadBlob.objects.filter(uses__task_id=task_id))


def resolve_ledger(rows: Iterable[Any]) -> None:
    """`resolve` for tool ledger rows (instances, or `values()` dicts with
    `tenant_id`). A ledger row's blob is read within the row's tenant, not
    through a use of the row's task: a retry that takes a key its chain used
    (`tasks_app.retries.lineage`) records into the earlier task's row, and the
    use is the retry's, whose step holds the same value."""
    rows = list(rows)
    for tenant_id in {_column(row, "tenant_id") for row in rows}:
        _put_back([row for row in rows if _column(row, "tenant_id") == tenant_id], LEDGER_FIELDS,
                  PayloadBlob.objects.filter(tenant_id=tenant_id))


def _put_back(rows: list[Any], fields: tuple[str, ...], readable: QuerySet[PayloadBlob]) -> None:
    """The values of the references `rows` hold in `fields`, read from the
    `readable` blobs (a query not run when no row holds a reference), set in
    place; a reference to a blob not readable stays."""
    wanted = {_column(row, name)[REF] for row in rows for name in fields
              if is_reference(_column(row, name))}
    if not wanted:
        return
    values = {sha: json.loads(zlib.decompress(bytes(data)))
              for sha, data in readable.filter(sha256__in=wanted)
              .values_list("sha256", "data").distinct()}
    for row in rows:
        for name in fields:
            value = _column(row, name)
            if is_reference(value) and value[REF] in values:
                if isinstance(row, dict):
                    row[name] = values[value[REF]]
                else:
                    setattr(row, name, values[value[REF]])


def _column(row: Any, name: str) -> Any:
    """A row's column as loaded: a model instance's (its __dict__: a column its
    query deferred is not loaded for this), or a `values()` dict's."""
    return row.get(name) if isinstance(row, dict) else vars(row).get(name)


def resolve_steps(task_id: int, steps: Iterable[Any]) -> None:
    resolve(task_id, steps, STEP_FIELDS)


def resolve_task(task: Any) -> None:
    resolve(task.pk, [task], TASK_FIELDS)


def tasks_delete(tasks: QuerySet[Task]) -> tuple[int, dict[str, int]]:
    """Delete `tasks` (with what cascades from them) and the blobs no task uses
    any more after them, as `QuerySet.delete` answers (the blobs counted as
    `tasks_app.PayloadBlob`). Inside the caller's transaction: the archive's
    deletions, a subject's or a tenant's erasure."""
    blob_ids = list(PayloadUse.objects.filter(task__in=tasks)
                    .values_list("blob_id", flat=True).distinct())
    deleted, by_model = tasks.delete()
    dropped, _ = PayloadBlob.objects.filter(pk__in=blob_ids, uses__isnull=True).delete()
    return deleted + dropped, {**by_model, PayloadBlob._meta.label: dropped}
