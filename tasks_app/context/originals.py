"""The originals a `read_source {ref}` decision reads back.

A model sees long results truncated, older steps folded into a summary, facts
pinned with their source events, and memory items by citation id. When that
is not enough it may read one original back by its reference:

- ``step:<n>``: the task's own step n, in full (arguments, result, error);
- ``event:<id>``: one of the task's own events (its type, payload, actor);
- ``summary:v<n>``: one of the task's summary versions, with its pinned facts;
- ``mem:<id>@<version>``: a memory item's version, read by the source other
  apps register (`register_source_reader`: memory_app's, which reads only the
  task's scopes: its tenant, its agent, its subject).

Only the task's own history and its scopes' memory: anything else, another
task's event or another subject's item as much as an id that does not exist,
gets the same typed error (`source_not_found`), so nothing about it leaks. An
original larger than `TETHER_READ_SOURCE_MAX_CHARS` is cut to that size (its
full size said). Each read is a step of the task: it counts against the
step budget, and what it returns is in the next model call's tokens.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from foundations.ids import parse_id

from ..models import ContextSummary, Event, Step
from ..payloads import resolve_steps
from ..snapshot import TaskSnapshot
from .refs import Cite, parse_cite

log = logging.getLogger(__name__)

MAX_REF_CHARS = 200
# A reader returns the original as plain data, or None when the task may not read it.
SourceReader = Callable[[TaskSnapshot, Cite], dict[str, Any] | None]

_readers: dict[str, SourceReader] = {}


def register_source_reader(kind: str, reader: SourceReader) -> None:
    _readers[kind] = reader  # ready() may run twice: the same kind, the same reader


def max_chars() -> int:
    return int(settings.TETHER.get("READ_SOURCE_MAX_CHARS", 8000))


@dataclass(frozen=True)
class Read:
    """What a read gives the model: `output` (the original) or `error` (typed)."""

    output: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def _error(kind: str, message: str) -> Read:
    return Read(error={"type": kind, "message": message})


def read_source(snap: TaskSnapshot, ref: Any) -> Read:
    """The original `ref` names, bounded, or a typed error; never raises on
    what the model wrote."""
    if not isinstance(ref, str) or not ref.strip() or len(ref) > MAX_REF_CHARS:
        return _error("invalid_ref", "ref must be an id from the context, such as step:3, "
                                     "event:12, summary:v2 or mem:7@1")
    ref = ref.strip()
    original = _original(snap, ref)
    if original is None:
        return _error("source_not_found",
                      f"{ref} is not in this task's history or its memory: read only ids "
                      "you were shown")
    return Read(output={"ref": ref, "original": bounded(original, max_chars())})


def _original(snap: TaskSnapshot, ref: str) -> dict[str, Any] | None:
    if ref.startswith("event:"):
        event_id = parse_id(ref[len("event:"):])
        return None if event_id is None else _event(snap, event_id)
    cite = parse_cite(ref)
    if cite.kind == "step" and cite.number is not None:
        return _step(snap, cite.number)
    if cite.kind == "summary" and cite.number is not None:
        return _summary(snap, cite.number)
    reader = _readers.get(cite.kind)
    if reader is None:
        return None
    try:
        return reader(snap, cite)
    except Exception:  # noqa: BLE001 - another app's reader failing is no original
        log.exception("reading %s for task %s failed", ref, snap.id)
        return None


def _step(snap: TaskSnapshot, step_no: int) -> dict[str, Any] | None:
    if step_no > snap.steps_count:
        return None
    row = (Step.objects.filter(task_id=snap.id, step_no=step_no)
           .only("step_no", "kind", "status", "tool", "args", "output", "error", "decision")
           .first())
    if row is None:
        return None
    resolve_steps(snap.id, [row])
    decision = row.decision or {}
    original: dict[str, Any] = {"step_no": row.step_no, "kind": row.kind, "status": row.status}
    if row.tool:
        original.update(tool=row.tool, args=row.args)
    for said in ("reason", "question", "memory"):
        if decision.get(said):
            original[said] = decision[said]
    if row.output is not None:
        original["output"] = row.output
    if row.error is not None:
        original["error"] = row.error
    return original


def _event(snap: TaskSnapshot, event_id: int) -> dict[str, Any] | None:
    row = (Event.objects.filter(pk=event_id, task_id=snap.id)
           .values("id", "type", "payload", "actor", "created_at").first())
    if row is None:
        return None
    return {"event_id": row["id"], "type": row["type"], "payload": row["payload"],
            "actor": row["actor"], "at": row["created_at"].isoformat()}


def _summary(snap: TaskSnapshot, version: int) -> dict[str, Any] | None:
    row = (ContextSummary.objects.filter(task_id=snap.id, version=version)
           .values("version", "text", "covers_until_step", "pinned_facts").first())
    return dict(row) if row is not None else None


def bounded(value: dict[str, Any], limit: int) -> dict[str, Any]:
    """`value`, or a preview of its JSON cut to `limit` characters."""
    text = json.dumps(value, default=str)  # measured as the context measures a result
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit], "size": len(text),
            "note": f"cut to the first {limit} characters"}
