"""Python tools for the runtime tests, registered by dotted path like any tool.

They run in the executor's own tool thread, so a test coordinates with them
through `Gate`s: a tool marks that it entered, then blocks until the test
releases it (always with a deadline, so a failing test cannot hang the run).
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from tools_app.demo.tools import issue_refund
from tools_app.executor.errors import ToolBusinessError, ToolPermissionError, ToolTransientError
from tools_app.executor.types import ToolContext
from tools_app.models import DemoNotification

GATE_MAX_WAIT_S = 20.0
CALLS: Counter[str] = Counter()  # calls per idempotency key
_lock = threading.Lock()


class Gate:
    def __init__(self) -> None:
        self.entries = 0
        self.release = threading.Event()
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.entries += 1

    def wait(self) -> bool:
        return self.release.wait(GATE_MAX_WAIT_S)


GATES: dict[str, Gate] = {}


def gate(name: str) -> Gate:
    with _lock:
        return GATES.setdefault(name, Gate())


def reset() -> None:
    """Between tests: let every blocked tool go, forget gates and counts."""
    with _lock:
        for g in GATES.values():
            g.release.set()
        GATES.clear()
        CALLS.clear()


def _count(ctx: ToolContext) -> int:
    with _lock:
        CALLS[ctx.idempotency_key] += 1
        return CALLS[ctx.idempotency_key]


# --- tools ------------------------------------------------------------------------


def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A read: answers with its arguments."""
    _count(ctx)
    return {"echo": args}


def note(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A plain write that does not deduplicate: a replay would write a second row."""
    _count(ctx)
    row = DemoNotification.objects.create(idempotency_key=ctx.idempotency_key,
                                          customer=str(args.get("to", "x")),
                                          message=str(args.get("text", "")))
    return {"note_id": row.pk}


def note_status(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    rows = DemoNotification.objects.filter(idempotency_key=args["idempotency_key"])
    first = rows.order_by("id").first()
    if first is None:
        return {"state": "not_found"}
    return {"state": "succeeded", "result": {"note_id": first.pk}}


def blocking_note(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A slow plain write: blocks on its gate, then writes (a provider that takes its time)."""
    g = gate(args["gate"])
    g.enter()
    if not g.wait():
        raise ToolTransientError("the test never released the gate")
    return note(args, ctx)


def blocking_read(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A read that answers only when its gate is released (a slow provider)."""
    g = gate(args["gate"])
    g.enter()
    g.wait()
    return {"read": args.get("gate")}


def note_then_block(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Writes first, then blocks on its gate (the effect happened; the answer is late)."""
    result = note(args, ctx)
    g = gate(args["gate"])
    g.enter()
    g.wait()
    return result


def blocking_refund(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """The demo refund (idempotent per key), after blocking on its gate."""
    g = gate(args.pop("gate"))
    g.enter()
    if not g.wait():
        raise ToolTransientError("the test never released the gate")
    _count(ctx)
    return issue_refund(args, ctx)


def flaky_refund(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Refunds, then fails transiently on the first call for a key (the answer got lost)."""
    result = issue_refund(args, ctx)
    if _count(ctx) == 1:
        raise ToolTransientError("connection reset after the refund was written")
    return result


def always_transient(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    _count(ctx)
    raise ToolTransientError("503 from downstream", retry_after_s=0.0)


def deny(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    _count(ctx)
    raise ToolPermissionError("the service account may not do this", details={"scope": "refunds"})


def business_error(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    _count(ctx)
    # details that are not JSON: the executor must still store the error
    raise ToolBusinessError("no such customer", details={"code": "not_found", "when": object()})


def returns_object(args: dict[str, Any], ctx: ToolContext) -> Any:
    return object()


def returns_nan(args: dict[str, Any], ctx: ToolContext) -> Any:
    return {"value": float("nan")}


def returns_nul(args: dict[str, Any], ctx: ToolContext) -> Any:
    return {"text": "a\x00b"}


def returns_big(args: dict[str, Any], ctx: ToolContext) -> Any:
    return {"blob": "x" * int(args.get("size", 10_000))}


def crashes(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise RuntimeError("a bug in the tool")


def undo_note(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """The compensation of `note`: records what it undid (a row a test can count)."""
    _count(ctx)
    DemoNotification.objects.create(idempotency_key=ctx.idempotency_key, customer="undo",
                                    message=str(args["original_key"]))
    original = args.get("original_result") or {}
    return {"undone": args["original_key"], "note_id": original.get("note_id")}


def big(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A read answering `size` characters of text (the same for the same `size`
    and `marker`, whatever else its arguments say)."""
    marker = str(args.get("marker", "big"))
    line = f"{marker} line of a large tool output. "
    size = int(args.get("size", 100_000))
    return {"marker": marker, "text": (line * (size // len(line) + 1))[:size]}


def mirror(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A read answering its arguments as they are."""
    return dict(args)
