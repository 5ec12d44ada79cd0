"""Bulk data for the console timings: many finished tasks with their events
and a few steps each, generated inside PostgreSQL with `generate_series`
(about a million rows in tens of seconds, not row by row through the ORM).

The generated tasks belong to the bench tenant under their own agent
(`console-gen`), so a later run tops them up instead of starting again. All
are terminal (SUCCEEDED, FAILED, CANCELED): admission and recovery never see
them. Events of different tasks are interleaved by id, as concurrent tasks'
events are.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.db import connection, transaction

from tasks_app.models import AgentProfile, Event, Step, Task

from .world import World

GEN_AGENT = "console-gen"
TASK, EVENT, STEP = (m._meta.db_table for m in (Task, Event, Step))

INSERT_TASKS = f"""
INSERT INTO {TASK} (tenant_id, agent_id, requester_id, agent_snapshot, goal, input, script,
    status, version, steps_count, model_calls, tool_calls, tokens, per_tool, budget_extension,
    last_call_hash, repeat_count, stale_steps, lease_owner, trace_id, result, failure_reason,
    request_hash, created_at, updated_at, started_at, finished_at)
SELECT %(tenant)s, %(agent)s, %(user)s, %(snapshot)s::jsonb,
    'Generated task ' || g || ': look up order A-' || (g %% 5000) || ' and answer the customer',
    jsonb_build_object('order_id', 'A-' || (g %% 5000)), NULL,
    CASE WHEN g %% 20 = 0 THEN 'FAILED' WHEN g %% 20 = 1 THEN 'CANCELED' ELSE 'SUCCEEDED' END,
    %(events)s, %(steps)s, %(steps)s, %(steps)s, 120 * %(steps)s,
    jsonb_build_object('bench_read', %(steps)s), '{{}}'::jsonb, '', 0, 0, '', md5(%(salt)s || g),
    CASE WHEN g %% 20 > 1 THEN jsonb_build_object('answer', 'done ' || g) END,
    CASE WHEN g %% 20 = 0 THEN 'max_steps' WHEN g %% 20 = 1 THEN 'canceled' ELSE '' END, '',
    ts, ts, ts, ts + interval '3 seconds'
FROM (SELECT g, now() - interval '1 hour' - (%(n)s - g) * interval '15 seconds' AS ts
      FROM generate_series(1, %(n)s) AS g) AS s
ORDER BY g
"""

INSERT_EVENTS = f"""
INSERT INTO {EVENT} (task_id, tenant_id, task_version, type, payload, actor, actor_role,
    trace_id, created_at)
SELECT t.id, t.tenant_id, e,
    CASE WHEN e = 1 THEN 'task_created' WHEN e = 2 THEN 'task_started'
         WHEN e = %(events)s THEN 'final_accepted'
         WHEN e %% 2 = 1 THEN 'decision_recorded' ELSE 'step_succeeded' END,
    jsonb_build_object('step_no', e / 2, 'tool', 'bench_read', 'args', jsonb_build_object('n', e),
                       'from', 'RUNNING', 'to', 'RUNNING', 'latency_ms', 3),
    'worker:console-gen', 'system', t.trace_id, t.created_at + e * interval '200 milliseconds'
FROM generate_series(1, %(events)s) AS e
CROSS JOIN (SELECT id, tenant_id, trace_id, created_at FROM {TASK}
            WHERE agent_id = %(agent)s AND id > %(after)s) AS t
ORDER BY e, t.id
"""

INSERT_STEPS = f"""
INSERT INTO {STEP} (task_id, step_no, kind, status, decision, model_log, tool, args,
    idempotency_key, attempt, output, output_hash, started_at, finished_at, latency_ms)
SELECT t.id, s, 'tool', 'SUCCEEDED',
    jsonb_build_object('kind', 'tool_call', 'tool', 'bench_read',
                       'args', jsonb_build_object('n', s), 'reason', 'generated',
                       'cites', '[]'::jsonb),
    jsonb_build_object('backend', 'scripted', 'model', 'scripted', 'tokens', 120),
    'bench_read', jsonb_build_object('n', s), md5(t.id || ':' || s) || md5(s || ':' || t.id), 0,
    jsonb_build_object('n', s, 'value', 'read-' || s), md5('out' || t.id || ':' || s),
    t.created_at, t.created_at + interval '1 second', 3
FROM generate_series(1, %(steps)s) AS s
CROSS JOIN (SELECT id, created_at FROM {TASK}
            WHERE agent_id = %(agent)s AND id > %(after)s) AS t
"""


def _gen_agent(world: World) -> AgentProfile:
    agent, _ = AgentProfile.objects.get_or_create(
        tenant_id=world.tenant_id,
        name=GEN_AGENT,
        defaults={
            "description": "Generated history for the console timings.",
            "tools": ["bench_read"],
            "enabled": False,
        },
    )
    return agent


def console_data_ensure(world: World, *, tasks: int, events: int) -> dict[str, Any]:
    """Top the generated history up to `tasks` tasks and about `events` events."""
    agent = _gen_agent(world)
    have = Task.objects.filter(agent=agent).count()
    missing = max(0, tasks - have)
    per_task = max(1, events // max(1, tasks))
    steps = max(1, min(3, per_task // 3))
    started = time.monotonic()
    if missing:
        with transaction.atomic(), connection.cursor() as cur:
            # One bulk transaction: sort the interleaved events in memory, and do not
            # wait for each WAL flush (all or nothing at COMMIT anyway).
            cur.execute("SET LOCAL work_mem = '256MB'")
            cur.execute("SET LOCAL synchronous_commit = off")
            cur.execute(f"SELECT coalesce(max(id), 0) FROM {TASK}")
            after = cur.fetchone()[0]
            params = {
                "tenant": world.tenant_id,
                "agent": agent.pk,
                "user": world.user_id,
                "snapshot": json.dumps(agent.snapshot()),
                "n": missing,
                "events": per_task,
                "steps": steps,
                "salt": f"gen{time.time_ns()}-",
                "after": after,
            }
            cur.execute(INSERT_TASKS, params)
            cur.execute(INSERT_EVENTS, params)
            cur.execute(INSERT_STEPS, params)
        # Vacuum now (outside any transaction), or autovacuum does it in the middle of
        # the phases that follow and skews their figures.
        with connection.cursor() as cur:
            for table in (TASK, EVENT, STEP):
                cur.execute(f"VACUUM (ANALYZE) {table}")
    total_tasks = Task.objects.filter(tenant_id=world.tenant_id).count()
    total_events = Event.objects.filter(tenant_id=world.tenant_id).count()
    return {
        "generated_tasks": missing,
        "generated_events": missing * per_task,
        "generate_s": round(time.monotonic() - started, 2),
        "tenant_tasks": total_tasks,
        "tenant_events": total_events,
        "table_tasks": Task.objects.count(),
        "table_events": Event.objects.count(),
    }


def sample_generated_task(world: World) -> int | None:
    """A generated task from the middle of the history (its page is a typical one)."""
    agent = _gen_agent(world)
    ids = Task.objects.filter(agent=agent).order_by("id").values_list("id", flat=True)
    n = ids.count()
    return ids[n // 2] if n else None
