"""Payloads out of row, on the write side (`tasks_app.payloads` says what and why).

The tool ledger's result is written here too (`out_of_row` for a commit's
record, `ledger_result` for the executor's own statements): the ledger
(`tools_app.executor`) is in the store's layer and calls down into this module,
rather than the store registering a hook with it, because the rule, the blob
table and its uses are the store's, and a hook would be one more indirection
for the same import the executor already makes of the store's backends.

`out_of_row` takes a `Commit` and gives back the one to write, its large
values replaced by references, with the blobs they stand for; `write_blobs`
writes those (once per tenant and content) and the task's uses of them, in
the commit's transaction (`writes.write`): a reference is never written
without its blob, nor a blob for a commit that wrote nothing. A commit with
nothing large (every usual step) is left as it is and costs no statement.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..models import PayloadBlob, PayloadUse
from ..payloads import LEDGER_FIELDS, REF, STEP_FIELDS, TASK_FIELDS, Blob, blob_of, is_reference
from .shapes import Commit


def swapped(fields: dict[str, Any], names: tuple[str, ...],
            blobs: list[Blob]) -> dict[str, Any]:
    """`fields` with its large values in `names` replaced by references (the
    same dict when none is); the blobs appended to `blobs`."""
    out = fields
    for name in names:
        blob = blob_of(fields.get(name))
        if blob is not None:
            out = {**out, name: blob.ref}
            blobs.append(blob)
    return out


def out_of_row(c: Commit) -> tuple[Commit, list[Blob]]:
    blobs: list[Blob] = []
    set_ = swapped(c.set, TASK_FIELDS, blobs)
    new_step = c.new_step
    if new_step is not None:
        new_step = replace(new_step, fields=swapped(new_step.fields, STEP_FIELDS, blobs))
    move = c.move
    if move is not None:
        move = replace(move, fields=swapped(move.fields, STEP_FIELDS, blobs))
    record = c.record
    if record is not None:
        # The ledger's copy of the step's output is the same blob, and no use of
        # its own: the value is counted once toward the task's limit.
        of_ledger: list[Blob] = []
        record = replace(record, fields=swapped(record.fields, LEDGER_FIELDS, of_ledger))
        blobs += [b for b in of_ledger if b.sha256 not in {s.sha256 for s in blobs}]
    if not blobs:
        return c, blobs
    return replace(c, set=set_, new_step=new_step, move=move, record=record), blobs


def ledger_result(*, tenant_id: int, task_id: int, result: Any) -> Any:
    """The tool ledger's `result` as its row stores it, when written outside a
    commit (`tools_app.executor.ledger`: a record whose claim the commit did
    not carry, a status query's or a reviewer's settlement): a large one as a
    reference, its blob and the task's use written now, in the caller's
    transaction, which must write the row too (or roll them back with it)."""
    blobs: list[Blob] = []
    stored = swapped({"result": result}, LEDGER_FIELDS, blobs)["result"]
    if blobs:
        write_blobs(tenant_id=tenant_id, task_id=task_id, blobs=blobs)
    return stored


def write_blobs(*, tenant_id: int, task_id: int, blobs: list[Blob]) -> None:
    """Each blob once per tenant (kept when it is there already), and a use of
    it by the task per reference. Inside the caller's transaction."""
    PayloadBlob.objects.bulk_create(
        [PayloadBlob(tenant_id=tenant_id, sha256=b.sha256, size=b.size, data=b.data)
         for b in blobs], ignore_conflicts=True)
    ids = dict(PayloadBlob.objects.filter(tenant_id=tenant_id,
                                          sha256__in={b.sha256 for b in blobs})
               .values_list("sha256", "id"))
    PayloadUse.objects.bulk_create([PayloadUse(task_id=task_id, blob_id=ids[b.sha256],
                                               size=b.size) for b in blobs])


def copy_uses(*, task_id: int, rows: list[Any]) -> None:
    """The uses of the references `rows` (steps a retry copies) hold, for the new task."""
    shas = {getattr(row, name)[REF] for row in rows for name in STEP_FIELDS
            if is_reference(getattr(row, name, None))}
    if not shas:
        return
    tenant_of = PayloadBlob.objects.filter(sha256__in=shas, uses__task_id=rows[0].task_id)
    PayloadUse.objects.bulk_create([PayloadUse(task_id=task_id, blob_id=blob_id, size=size)
                                    for blob_id, size in tenant_of.values_list("id", "size")
                                    .distinct()])
