"""Retrieval stays bounded as a tenant's memory grows: a tenant with
`TETHER_MEMORY_SCALE_ITEMS` items (20,000 by default; 100,000 for the figure
in docs/performance/memory.md) spread over its own scope, agents' scopes and
subjects' scopes, each at most the per-scope limit. The test checks what
comes back (only the task's scopes, at most the limit) and prints the
latency of `recall` and of the whole context source; it asserts no time."""
from __future__ import annotations

import json
import os
import random
import statistics
import time

import pytest
from django.db import connection
from django.utils import timezone

from memory_app.models import MemoryItem, scope_key
from memory_app.selectors import _text_ranks, recall, task_scopes, words
from memory_app.services import memory_context
from tasks_app.snapshot import TaskSnapshot
from tests.factories import submit

pytestmark = pytest.mark.django_db

ITEMS = int(os.environ.get("TETHER_MEMORY_SCALE_ITEMS", "20000"))
PER_SCOPE = 1000
WORDS = [f"w{n}" for n in range(3000)] + [
    "window", "seat", "flight", "refund", "invoice", "lisbon", "porto", "email", "phone",
    "customer", "prefers", "delivery", "morning", "evening", "discount", "damaged"]
GOAL = "Book a flight to Lisbon for the customer; check the refund of the damaged invoice"


def _fill(tenant, agent) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    now = timezone.now()
    rows = []
    scopes = ([("tenant", None, "")] + [("agent", agent.pk, "")]
              + [("subject", None, f"cust-{n}") for n in range(ITEMS // PER_SCOPE)])
    for i in range(ITEMS):
        scope, agent_id, subject = scopes[i % len(scopes)]
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20)))
        rows.append(MemoryItem(
            tenant=tenant, scope=scope, agent_id=agent_id, subject=subject,
            scope_key=scope_key(scope, agent_id=agent_id, subject=subject), kind="fact",
            text=text, created_by="bench", updated_by="bench"))
        if len(rows) == 5000:
            MemoryItem.objects.bulk_create(rows)
            rows = []
    MemoryItem.objects.bulk_create(rows)
    MemoryItem.objects.update(updated_at=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE" if connection.vendor == "sqlite"
                       else "ANALYZE memory_app_memoryitem")


def _timed(call, runs: int = 50) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    call()  # warm
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def test_recall_reads_a_bounded_number_of_rows_whatever_the_tenants_size(world, capsys):
    agent = world.tenant.agents.get(name="support")
    _fill(world.tenant, agent)
    task = submit(world.tenant, [{"final": {}}], goal=GOAL, subject="cust-3")
    snap = TaskSnapshot.of(task)
    snap = TaskSnapshot(**{**snap.__dict__, "agent": {**snap.agent, "memory_policy": "read"}})

    found = recall(tenant_id=world.tenant.pk, agent_id=agent.pk, subject="cust-3", text=GOAL,
                   limit=8, now=timezone.now())
    assert 0 < len(found) <= 8
    assert {r.item.scope_key for r in found} <= {"tenant", f"agent:{agent.pk}", "subject:cust-3"}
    assert any(r.matched for r in found)

    recall_ms = _timed(lambda: recall(tenant_id=world.tenant.pk, agent_id=agent.pk,
                                      subject="cust-3", text=GOAL, limit=8, now=timezone.now()))
    source_ms = _timed(lambda: memory_context(snap, 3200))
    server = ""
    if connection.vendor == "postgresql":
        plan = _rank_plan(world.tenant.pk, agent.pk)
        assert "memory_scope_recent" in json.dumps(plan)  # the scopes' index, not a table scan
        server = f"; the match-and-rank query {plan['Execution Time']:.2f} ms in the server"
    with capsys.disabled():
        print(f"\nmemory recall, {connection.vendor}, {MemoryItem.objects.count()} items in the "
              f"tenant: recall p50 {recall_ms[0]:.2f} ms, p95 {recall_ms[1]:.2f} ms; "
              f"context source p50 {source_ms[0]:.2f} ms, p95 {source_ms[1]:.2f} ms{server}")


def _rank_plan(tenant_id: int, agent_id: int) -> dict:  # type: ignore[type-arg]
    """EXPLAIN ANALYZE of `_text_ranks`'s query, as `recall` sends it."""
    keys = task_scopes(agent_id=agent_id, subject="cust-3")
    sent: list = []  # type: ignore[type-arg]

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if "ts_rank_cd" in sql:
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        _text_ranks(tenant_id, keys, words(GOAL), 8, PER_SCOPE)
    [(sql, params)] = sent
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        return cursor.fetchone()[0][0]
