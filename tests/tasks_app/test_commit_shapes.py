"""Every commit shape writes the same rows on PostgreSQL and on SQLite.

The store writes each commit through the backend of its connection
(`tasks_app.store.backends`): one statement of data-modifying CTEs on
PostgreSQL, the ORM in one transaction on SQLite. `run_shapes` drives one
scripted task per shape (admission's start, a tool call's decision and
outcome with the ledger's claim and record, a business error, a final answer,
an invalid decision, a source read back, a question, an approval, a cancel
that closes the open work of each, a failure whose compensation is due) and
`written` dumps what they wrote, normalised (no ids, no clocks: a key is its
step's number, a timestamp whether it is set). The comparison runs the shapes
here, on PostgreSQL, and again in a pytest of its own on SQLite (another
process: the test database is chosen at start), and compares the two dumps.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from approvals_app.models import Approval, Question
from foundations.actors import Actor
from tasks_app.models import Event, Step, Task
from tasks_app.services.tasks import task_cancel
from tests.factories import submit
from tests.helpers import drive
from tools_app.models import ToolExecution

DUMP_TO = "TETHER_COMMIT_SHAPES_OUT"  # set: the dump test writes the shapes' rows there
REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 1000,
                                           "reason": "damaged"}, "reason": "damaged parcel"}
SHAPES: dict[str, list[dict[str, Any]]] = {
    # decision + claim, outcome + record (an ok and a business error), final + closing
    "tool calls": [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                   {"tool": "lookup_order", "args": {"order_id": "Z-9"}},
                   {"final": {"ok": True}}],
    # an invalid decision, a source read back (allowed and not), a final answer
    "invalid and read": [{"invalid": "not json"}, {"read_source": "step:1"},
                         {"read_source": "step:99"}, {"final": {"read": True}}],
    # a question: the task waits (then a cancel closes the question)
    "question": [{"ask": "Which order do you mean?"}],
    # a call that needs approval: the task waits (then a cancel closes the approval)
    "approval": [REFUND],
    # a call, then the script runs out: the task fails, its compensation due
    "failure": [{"tool": "lookup_order", "args": {"order_id": "A-2"}}],
}
CANCELED_AFTER = ("question", "approval")
OPERATOR = Actor(name="op", role="operator")


def run_shapes(world: Any) -> dict[str, int]:
    """Drive one task per shape; their ids by shape."""
    ids = {}
    for name, script in SHAPES.items():
        task = drive(submit(world.tenant, script, goal=f"shape: {name}").pk)
        if name in CANCELED_AFTER:
            task_cancel(task_id=task.pk, actor=OPERATOR, reason="shape comparison")
        ids[name] = task.pk
    return ids


def _clock(value: Any) -> Any:
    return value is not None


def _who(actor: str) -> str:
    """An actor or owner without its process (`worker:<host>:<pid>:...`)."""
    return actor.split(":", 1)[0]


def _normal(value: Any, keys: dict[str, int]) -> Any:
    """`value` without what differs by database or run: ids, clocks, latencies, keys."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("latency_ms", "step_id", "approval_id", "question_id", "event_id",
                     "task_id", "id"):
                continue
            if k.endswith("_at") or k == "at":
                out[k] = _clock(v)
            elif k in ("idempotency_key", "original_key"):
                out[k] = keys.get(v, v)
            elif k == "raw" and isinstance(v, str) and v.startswith("{"):
                # the script's entry as the model "said" it: PostgreSQL's jsonb
                # kept the script with its keys sorted, SQLite as written
                out[k] = json.loads(v)
            else:
                out[k] = _normal(v, keys)
        return out
    if isinstance(value, list | tuple):
        return [_normal(v, keys) for v in value]
    return value


def written(task_id: int) -> dict[str, Any]:
    """What the task's commits wrote, normalised."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task_id=task_id).order_by("step_no"))
    keys = {s.idempotency_key: s.step_no for s in steps if s.idempotency_key}
    rows = {
        "task": {
            **{f: getattr(task, f) for f in (
                "status", "version", "steps_count", "model_calls", "tool_calls", "tokens",
                "per_tool", "last_call_hash", "repeat_count", "stale_steps", "result",
                "failure_reason", "lease_owner", "cost_pico")},
            **{f: _clock(getattr(task, f)) for f in (
                "started_at", "finished_at", "deadline_at", "compensation_due_at",
                "lease_expires_at", "next_run_at")},
        },
        "steps": [{
            **{f: getattr(s, f) for f in (
                "step_no", "kind", "status", "decision", "model_log", "tool", "args", "output",
                "error", "output_hash", "attempt", "idempotency_key")},
            **{f: _clock(getattr(s, f)) for f in ("started_at", "finished_at")},
        } for s in steps],
        "events": [{"type": e.type, "task_version": e.task_version, "actor": _who(e.actor),
                    "actor_role": e.actor_role, "payload": e.payload}
                   for e in Event.objects.filter(task_id=task_id).order_by("id")],
        "ledger": [{
            **{f: getattr(x, f) for f in ("idempotency_key", "tool", "args", "status", "result",
                                          "error")},
            "claimed_by": _who(x.claimed_by), "claimed_until": _clock(x.claimed_until),
            "attempts": [a.get("outcome") for a in x.attempts],
        } for x in ToolExecution.objects.filter(task_id=task_id).order_by("id")],
        "approvals": list(Approval.objects.filter(task_id=task_id).order_by("id").values(
            "status", "tool", "args", "kind", "task_version")),
        "questions": list(Question.objects.filter(task_id=task_id).order_by("id").values(
            "status", "question", "task_version")),
    }
    # JSON's types on both sides (tuples as lists, decimals and datetimes as text)
    return json.loads(json.dumps(_normal(rows, keys), default=str))


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where `a` and `b` differ, path by path (an assertion that says where)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for n, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{n}]")]
    return [] if a == b else [f"{path}: {a!r} (PostgreSQL) != {b!r} (SQLite)"]


def shapes_written(world: Any) -> dict[str, Any]:
    return {name: written(task_id) for name, task_id in run_shapes(world).items()}


@pytest.mark.skipif(not os.environ.get(DUMP_TO), reason=f"run by the comparison ({DUMP_TO})")
@pytest.mark.django_db(transaction=True)
def test_dump_the_shapes_written_here(world):
    """The other side of the comparison, on whichever database this run uses."""
    dump = {"database": settings.DATABASES["default"]["ENGINE"], "shapes": shapes_written(world)}
    Path(os.environ[DUMP_TO]).write_text(json.dumps(dump, indent=1, sort_keys=True))


@pytest.mark.system  # a second pytest, on SQLite
@pytest.mark.postgres_only("compares PostgreSQL's rows with SQLite's")
@pytest.mark.django_db(transaction=True)
def test_every_commit_shape_writes_the_same_rows_on_postgresql_and_sqlite(world, tmp_path):
    here = shapes_written(world)
    out = tmp_path / "sqlite.json"
    env = {**os.environ, "TETHER_TEST_DB": "sqlite", DUMP_TO: str(out),
           "TEST_DATABASE_NAME": f"{os.environ.get('TEST_DATABASE_NAME', 'test')}_shapes"}
    ran = subprocess.run(  # noqa: S603 - this interpreter, this repository's test
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
         f"{__file__}::test_dump_the_shapes_written_here"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=300,
        check=False)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    there = json.loads(out.read_text())
    assert "sqlite" in there["database"]

    assert set(there["shapes"]) == set(SHAPES)
    for name in SHAPES:
        assert differences(here[name], there["shapes"][name]) == [], name
    # the shapes did what they are named for
    assert [here[n]["task"]["status"] for n in SHAPES] == [
        "SUCCEEDED", "SUCCEEDED", "CANCELED", "CANCELED", "FAILED"]
    assert here["approval"]["approvals"][0]["status"] == "canceled"
    assert here["question"]["questions"][0]["status"] == "canceled"
    assert here["failure"]["task"]["compensation_due_at"] is True
    assert [row["status"] for row in here["tool calls"]["ledger"]] == [
        "SUCCEEDED", "FAILED_FINAL"]
