"""The benchmark's instant tools (used by `manage.py bench`, never by the demo).

- ``bench_read`` (read): answers from its arguments, no I/O at all.
- ``bench_write`` (idempotent write): one `BenchRecord` row (the bench's own
  table, see `models`) per idempotency key, written with a single
  ``INSERT ... ON CONFLICT DO NOTHING``, so a replay with the same key changes
  nothing and returns the same result.

Both results depend on the step (`n`), so the no-progress check never sees a
repeated observation.

- ``bench_echo`` (read): the workflow workload's instant tool (`workflow_load`
  registers it), answering as the fake edge's HTTP tool does: ``{"ok": true,
  "i": ..}``, and ``"echo"`` (the argument of that name) when given.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from tools_app.executor.types import ToolContext

from .models import BenchRecord


def bench_read(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"n": args["n"], "task": ctx.task_id, "value": f"read-{args['n']}"}


def bench_echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    answer = {"ok": True, "i": args.get("i")}
    if "echo" in args:
        answer["echo"] = args["echo"]
    return answer


def bench_write(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    # An instant write, as a service would do it: one statement, no ORM.
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {BenchRecord._meta.db_table} (idempotency_key, task_id, n, value, "
            "created_at) VALUES (%s, %s, %s, %s, now()) ON CONFLICT (idempotency_key) DO NOTHING",
            [ctx.idempotency_key, ctx.task_id, args["n"],
             json.dumps({"value": args.get("value", "")})],
        )
    return {"n": args["n"], "stored": True, "key": ctx.idempotency_key[:16]}


N_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0},
        "value": {"type": "string", "maxLength": 200},
    },
    "required": ["n"],
    "additionalProperties": False,
}

BENCH_TOOLS: list[dict[str, Any]] = [
    {
        "name": "bench_read",
        "description": "Benchmark: an instant read.",
        "target": "benchmarks.tools.bench_read",
        "args_schema": N_SCHEMA,
        "side_effect": "read",
        "risk": "low",
        "timeout_s": 5.0,
        "max_retries": 3,
    },
    {
        "name": "bench_write",
        "description": "Benchmark: an instant idempotent write keyed by the idempotency key.",
        "target": "benchmarks.tools.bench_write",
        "args_schema": N_SCHEMA,
        "side_effect": "idempotent_write",
        "risk": "low",
        "timeout_s": 5.0,
        "max_retries": 3,
    },
]
