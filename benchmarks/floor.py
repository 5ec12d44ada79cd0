"""The floor: the durable writes of a step, done directly with psycopg 3.

One process, one connection, no Django, no Celery. Per step, one transaction:
the version-checked task update, the step row, the event row and the ledger
row with the idempotency key, then COMMIT (synchronous, as the runner's).
Plain statements, one round trip each, psycopg's defaults (it prepares a
statement after its fifth use). It writes into the real tables, with their
real indexes, so the ratio to the runner compares like with like.
"""

from __future__ import annotations

import json
import time
from hashlib import sha256
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tasks_app.models import Event, Step, Task
from tools_app.models import ToolExecution

from .procs import machine_cpu_ticks, steal_pct
from .vacuum import vacuum
from .world import World

# The real tables, named by their models (read once, at import).
TASK, STEP, EVENT = (m._meta.db_table for m in (Task, Step, Event))
LEDGER = ToolExecution._meta.db_table

INSERT_TASK = f"""
INSERT INTO {TASK} (tenant_id, agent_id, requester_id, agent_snapshot, goal, input, script,
    status, version, steps_count, model_calls, tool_calls, tokens, per_tool, budget_extension,
    last_call_hash, repeat_count, stale_steps, lease_owner, lease_expires_at, trace_id,
    failure_reason, request_hash, created_at, updated_at, started_at)
VALUES (%s, %s, %s, '{{}}', 'bench floor', '{{}}', NULL, 'RUNNING', 1, 0, 0, 0, 0, '{{}}', '{{}}',
    '', 0, 0, 'bench-floor', now() + interval '1 hour', %s, '', '', now(), now(), now())
RETURNING id
"""
# Leased to the floor: a RUNNING task without a lease that waits its turn is an
# orphan to the recovery sweep every worker runs, which would advance it too.
UPDATE_TASK = f"""
UPDATE {TASK} SET version = version + 1, status = %s, steps_count = steps_count + 1,
    model_calls = model_calls + 1, tool_calls = tool_calls + 1, per_tool = %s, updated_at = now(),
    finished_at = %s
WHERE id = %s AND version = %s
"""
INSERT_STEP = f"""
INSERT INTO {STEP} (task_id, step_no, kind, status, decision, model_log, tool, args,
    idempotency_key, attempt, output, output_hash, started_at, finished_at, latency_ms)
VALUES (%s, %s, 'tool', 'SUCCEEDED', %s, %s, %s, %s, %s, 0, %s, %s, now(), now(), 0)
RETURNING id
"""
INSERT_EVENT = f"""
INSERT INTO {EVENT} (task_id, tenant_id, task_version, type, payload, actor, actor_role,
    trace_id, created_at)
VALUES (%s, %s, %s, 'step_succeeded', %s, 'bench-floor', 'system', %s, now())
"""
INSERT_LEDGER = f"""
INSERT INTO {LEDGER} (idempotency_key, tenant_id, task_id, step_id, tool, args,
    status, result, attempts, claimed_by, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, 'SUCCEEDED', %s, %s, '', now(), now())
"""


def run_floor(dsn: str, world: World, *, tasks: int, steps: int) -> dict[str, Any]:
    vacuum()
    with psycopg.connect(dsn, autocommit=False) as conn:
        task_ids = []
        with conn.cursor() as cur:
            for i in range(tasks):
                trace = sha256(f"floor-{time.time_ns()}-{i}".encode()).hexdigest()[:32]
                cur.execute(INSERT_TASK, (world.tenant_id, world.agent_id, world.user_id, trace))
                task_ids.append((cur.fetchone()[0], trace))  # type: ignore[index]
        conn.commit()

        started, machine0 = time.perf_counter(), machine_cpu_ticks()
        try:
            with conn.cursor() as cur:
                for task_id, trace in task_ids:
                    version = 1
                    for n in range(1, steps + 1):
                        _step(cur, world, task_id, trace, version, n, last=n == steps)
                        conn.commit()
                        version += 1
        finally:
            elapsed, machine1 = time.perf_counter() - started, machine_cpu_ticks()
            conn.rollback()
            # Nothing of the floor may stay RUNNING: admission counts RUNNING tasks.
            conn.execute(
                f"UPDATE {TASK} SET status = 'FAILED', finished_at = now() "
                "WHERE id = ANY(%s) AND status = 'RUNNING'",
                ([t for t, _ in task_ids],),
            )
            conn.commit()
    total = tasks * steps
    return {
        "tasks": tasks,
        "steps": total,
        "elapsed_s": round(elapsed, 3),
        "steps_per_s": round(total / elapsed, 1),
        "step_mean_ms": round(elapsed / total * 1000, 3),
        "machine_cpu_steal_pct": steal_pct(machine0, machine1),
        "first_task_id": task_ids[0][0] if task_ids else None,
    }


def _step(
    cur: psycopg.Cursor, world: World, task_id: int, trace: str, version: int, n: int, *, last: bool
) -> None:
    tool = "bench_read" if n % 2 else "bench_write"
    args = {"n": n, "value": str(n)}
    key = sha256(f"{task_id}|{n}|{tool}|{json.dumps(args, sort_keys=True)}".encode()).hexdigest()
    output = {"n": n, "task": task_id, "value": f"read-{n}"}
    cur.execute(
        UPDATE_TASK,
        (
            "SUCCEEDED" if last else "RUNNING",
            Jsonb({tool: n}),
            _now() if last else None,
            task_id,
            version,
        ),
    )
    if cur.rowcount != 1:
        raise RuntimeError(f"floor: version check failed for task {task_id} at version {version}")
    cur.execute(
        INSERT_STEP,
        (
            task_id,
            n,
            Jsonb({"kind": "tool_call", "tool": tool, "args": args, "reason": "", "cites": []}),
            Jsonb({"backend": "scripted", "model": "scripted", "tokens": 10}),
            tool,
            Jsonb(args),
            key,
            Jsonb(output),
            sha256(json.dumps(output).encode()).hexdigest(),
        ),
    )
    step_id = cur.fetchone()[0]  # type: ignore[index]
    cur.execute(
        INSERT_EVENT,
        (
            task_id,
            world.tenant_id,
            version + 1,
            Jsonb(
                {
                    "from": "RUNNING",
                    "to": "SUCCEEDED" if last else "RUNNING",
                    "step_no": n,
                    "tool": tool,
                    "step_status": "SUCCEEDED",
                    "latency_ms": 0,
                    "from_ledger": False,
                }
            ),
            trace,
        ),
    )
    cur.execute(
        INSERT_LEDGER,
        (
            key,
            world.tenant_id,
            task_id,
            step_id,
            tool,
            Jsonb(args),
            Jsonb(output),
            Jsonb([{"owner": "bench-floor", "outcome": "ok", "ms": 0}]),
        ),
    )


def _now():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime.now(UTC)
