"""The memory workload (`manage.py bench --only memory`): what memory costs a step.

1. **Steps/s with memory on against off, in the same run.** The I/O workload
   (`io_load`: five model calls of 0.5 s and four HTTP tool calls of 0.2 s a
   task, on the worker started as docs/how-to/deploy.md says) with two agents
   that differ only in `memory_policy`: `read` (each model call's context is
   built with the task's memory: 100 items for each of 10 subjects, the tasks
   spread over the subjects) and `off`. The two are alternated `rounds` times;
   the median steps/s of each and their ratio (target: at least 0.9).
2. **Retrieval at 100,000 items in a tenant.** A tenant of its own with
   100,000 items over its own scope, an agent's and 100 subjects' (980 or so
   each, under the per-scope limit of 1,000); `recall` as a step's context
   asks it (the task's scopes, the setting's number of items), for tasks of
   each subject in turn: p50, p95, p99 over `RECALL_CALLS` calls (target: p99
   under 20 ms).
"""
from __future__ import annotations

import os
import random
import statistics
import time
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from accounts_app.models import Tenant
from memory_app.models import MemoryItem, scope_key
from memory_app.selectors import recall
from memory_app.services import limits
from tasks_app.models import AgentProfile
from tasks_app.services.releases import agent_seed

from .io_load import (
    IO_AGENT,
    alternated,
    edge_process,
    io_world_ensure,
    pair_figures,
    pair_table,
    readme_worker,
    roomy_admission,
    run_io,
)
from .vacuum import vacuum
from .world import World

MEMORY_AGENT = "bench-io-memory"
SUBJECTS = 10
ITEMS_PER_SUBJECT = 100
RECALL_TENANT = "bench-memory-recall"
RECALL_ITEMS = 100_000
RECALL_SUBJECTS = 100
RECALL_CALLS = 500
SERVER_CALLS = 200
STEPS_RATIO_TARGET = 0.9
RECALL_P99_TARGET_MS = 20.0
_WORDS = [f"w{n}" for n in range(3000)] + [
    "window", "seat", "flight", "refund", "invoice", "lisbon", "porto", "email", "phone",
    "customer", "prefers", "delivery", "morning", "evening", "discount", "damaged", "bench"]


def subject_of(i: int) -> str:
    return f"bench-cust-{i % SUBJECTS}"


def _fill(tenant_id: int, scopes: list[tuple[str, int | None, str]], items: int,
          seed: int) -> None:
    """`items` items of 6-20 words, spread evenly over `scopes`."""
    rng = random.Random(seed)
    rows = []
    for i in range(items):
        scope, agent_id, subject = scopes[i % len(scopes)]
        rows.append(MemoryItem(
            tenant_id=tenant_id, scope=scope, agent_id=agent_id, subject=subject,
            scope_key=scope_key(scope, agent_id=agent_id, subject=subject), kind="fact",
            text=" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 20))),
            created_by="bench", updated_by="bench"))
        if len(rows) == 5000:
            MemoryItem.objects.bulk_create(rows)
            rows = []
    MemoryItem.objects.bulk_create(rows)


def memory_world_ensure(world: World, edge_url: str) -> None:
    """The I/O world, an agent like the I/O one with memory on, and its
    subjects' items (written once: the bench database keeps them)."""
    io_world_ensure(world, edge_url)
    io = AgentProfile.objects.get(tenant_id=world.tenant_id, name=IO_AGENT)
    fields = ("description", "model", "tools", "max_steps", "max_model_calls", "max_tool_calls",
              "max_tokens", "max_duration_s", "max_concurrent_tasks", "on_exhaustion")
    agent_seed(tenant_id=world.tenant_id, name=MEMORY_AGENT,
               defaults={**{f: getattr(io, f) for f in fields}, "memory_policy": "read"})
    keys = [scope_key("subject", subject=subject_of(s)) for s in range(SUBJECTS)]
    with transaction.atomic():
        MemoryItem.objects.filter(tenant_id=world.tenant_id, scope_key__in=keys).delete()
        _fill(world.tenant_id, [("subject", None, subject_of(s)) for s in range(SUBJECTS)],
              SUBJECTS * ITEMS_PER_SUBJECT, seed=11)


def recall_tenant_ensure(items: int = RECALL_ITEMS) -> tuple[int, int]:
    """The tenant of the retrieval figure and its agent, with `items` items (made once)."""
    tenant, _ = Tenant.objects.get_or_create(name=RECALL_TENANT)
    agent, _ = AgentProfile.objects.get_or_create(tenant=tenant, name="recall",
                                                  defaults={"memory_policy": "read"})
    if MemoryItem.objects.filter(tenant=tenant).count() != items:
        with transaction.atomic():
            MemoryItem.objects.filter(tenant=tenant).delete()
            scopes = ([("tenant", None, ""), ("agent", agent.pk, "")]
                      + [("subject", None, f"cust-{n}") for n in range(RECALL_SUBJECTS)])
            _fill(tenant.pk, scopes, items, seed=7)
    return tenant.pk, agent.pk


def run_recall(*, items: int = RECALL_ITEMS, calls: int = RECALL_CALLS) -> dict[str, Any]:
    """`recall` as a step's context asks it, at `items` items: its latency."""
    tenant_id, agent_id = recall_tenant_ensure(items)
    vacuum()
    rng = random.Random(3)
    cap = limits()
    goals = [" ".join(rng.choice(_WORDS) for _ in range(13)) for _ in range(calls)]

    def one(n: int) -> int:
        return len(recall(tenant_id=tenant_id, agent_id=agent_id,
                          subject=f"cust-{n % RECALL_SUBJECTS}", text=goals[n],
                          limit=cap["context_items"], now=timezone.now(),
                          per_scope=cap["per_scope"]))

    for n in range(20):  # warm: the index pages and the plan cache
        one(n)
    load_before = os.getloadavg()[0]
    times, found = [], 0
    for n in range(calls):
        started = time.perf_counter()
        found += one(n)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    server = sorted(_server_ms(one, n) for n in range(min(calls, SERVER_CALLS)))
    items = MemoryItem.objects.filter(tenant_id=tenant_id).count()
    return {"items_in_tenant": items, "calls": calls,
            "items_per_call": round(found / calls, 1),
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[int(calls * 0.95) - 1], 2),
            "p99_ms": round(times[int(calls * 0.99) - 1], 2),
            "max_ms": round(times[-1], 2), "database": connection.vendor,
            # the query's own time in PostgreSQL (EXPLAIN ANALYZE), less the round trip
            # and the client: steadier than the client's clock on a shared machine
            "server_p50_ms": round(statistics.median(server), 2) if server else None,
            "server_p99_ms": round(server[max(0, int(len(server) * 0.99) - 1)], 2)
            if server else None,
            # the machine may be shared: the 1-minute load average around the calls
            "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def _server_ms(one: Any, n: int) -> float:
    """Call `n`'s retrieval query run again under EXPLAIN ANALYZE: its execution
    time in the server, in ms."""
    sent: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        one(n)
    total = 0.0
    with connection.cursor() as cursor:
        for sql, params in sent:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            total += float(cursor.fetchone()[0][0]["Execution Time"])
    return total


def run_memory_phase(world: World, env: dict[str, str], *, tasks: int, rounds: int,
                     log_dir: Any, say: Any, recall_items: int = RECALL_ITEMS) -> dict[str, Any]:
    doc: dict[str, Any] = {"tasks": tasks, "rounds": rounds, "subjects": SUBJECTS,
                           "items_per_subject": ITEMS_PER_SUBJECT}
    say(f"memory retrieval at {recall_items:,} items in a tenant ...")
    doc["recall"] = rec = run_recall(items=recall_items)
    say(f"  recall p50 {rec['p50_ms']} ms, p95 {rec['p95_ms']} ms, p99 {rec['p99_ms']} ms "
        f"(in the server p50 {rec['server_p50_ms']} ms, p99 {rec['server_p99_ms']} ms) "
        f"({rec['calls']} calls, {rec['items_per_call']} items each, load average "
        f"{rec['loadavg_1m']})")
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, edge_pid):
        memory_world_ensure(world, edge_url)
        with readme_worker({**env, **roomy}, log_dir=log_dir) as workers:
            run_io(world, tasks=10, edge_url=edge_url, edge_pid=edge_pid, workers=workers)
            runs = alternated(world, {"memory on": MEMORY_AGENT, "memory off": IO_AGENT},
                              tasks=tasks, rounds=rounds, edge_url=edge_url,
                              edge_pid=edge_pid, workers=workers, say=say,
                              subject_of=subject_of)
    doc.update(pair_figures(runs, tasks=tasks))
    ratio = doc["steps_ratio"]
    doc["target_met"] = bool(ratio is not None and ratio >= STEPS_RATIO_TARGET
                             and rec["p99_ms"] < RECALL_P99_TARGET_MS
                             and doc["succeeded"] == doc["submitted"])
    return doc


def memory_table(doc: dict[str, Any]) -> str:
    rec = doc.get("recall") or {}
    rows = [
        ("steps/s, memory on vs off",
         f"{doc.get('memory_on_median')} vs {doc.get('memory_off_median')} (medians of "
         f"{doc.get('rounds')} alternated rounds of {doc.get('tasks')} I/O tasks; on "
         f"{doc.get('memory_on_steps_per_s')}, off {doc.get('memory_off_steps_per_s')}): "
         f"ratio {doc.get('steps_ratio')} (target >= {STEPS_RATIO_TARGET})"),
        ("worker pool CPU per step",
         f"on {(doc.get('memory_on_cpu_ms_per_step') or {}).get('worker_pool')} ms, off "
         f"{(doc.get('memory_off_cpu_ms_per_step') or {}).get('worker_pool')} ms; PostgreSQL "
         f"on {(doc.get('memory_on_cpu_ms_per_step') or {}).get('postgres')} ms, off "
         f"{(doc.get('memory_off_cpu_ms_per_step') or {}).get('postgres')} ms"),
        ("memory retrieval",
         f"p50 {rec.get('p50_ms')} ms, p95 {rec.get('p95_ms')} ms, p99 {rec.get('p99_ms')} ms, "
         f"max {rec.get('max_ms')} ms at {rec.get('items_in_tenant'):,} items in the tenant "
         f"(in the server: p50 {rec.get('server_p50_ms')} ms, p99 {rec.get('server_p99_ms')} ms) "
         f"({rec.get('calls')} calls, load average {rec.get('loadavg_1m')}; target p99 < "
         f"{RECALL_P99_TARGET_MS:g} ms)"),
    ]
    return pair_table(rows, doc)
