"""The one PostgreSQL statement of a commit's shape (`writes.Commit`): its
data-modifying CTEs, each hanging off the version-checked UPDATE of the task
(named `task`), with table and column names from the models' `_meta`. Built
once per shape (a handful: the runner's commits, admission's start) and
prepared on the server (`prepared`)."""
from __future__ import annotations

from functools import cache
from typing import Any

from django.db import models

from tools_app.executor.ledger import record_while
from tools_app.models import ToolExecution

from ..models import Step, Task
from .effects import closing_ctes
from .events import EVENT_COLUMNS, EVENT_INSERT
from .spend import rollup_sql
from .sql import column, json_param, table


@cache
def insertable(model: type[models.Model]) -> tuple[models.Field, ...]:  # type: ignore[type-arg]
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key)


@cache
def _json_fields(model: type[models.Model]) -> frozenset[str]:
    return frozenset(f.name for f in model._meta.concrete_fields
                     if isinstance(f, models.JSONField))


def db_value(model: type[models.Model], name: str, value: Any) -> Any:
    """`value` as the ORM would send it (JSON columns adapted, the rest as is)."""
    return json_param(model, name, value) if name in _json_fields(model) else value


@cache
def statement_of(shape: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """The one statement of every commit of this shape, and its fixed parameters."""
    (transition, ending, set_cols, add_cols, new, move_cols, claim_cols, record_cols, keyed_event,
     billed) = shape
    sets = [f"{column(Task, k)} = %(t_{k})s" for k in set_cols]
    sets += [f"{column(Task, k)} = {column(Task, k)} + %(a_{k})s" for k in add_cols]
    if transition:
        sets += ["status = %(to)s", "version = version + 1"]
    parts = [f"task AS (UPDATE {table(Task)} SET {', '.join(sets)} WHERE id = %(task_id)s "
             "AND version = %(version)s AND status = %(from)s RETURNING version)"]
    after_task = "EXISTS (SELECT 1 FROM task)"
    if new is not None:
        names = [f.name for f in insertable(Step) if f.name != "task"]
        keyed = new[1]
        cols = [column(Step, n) for n in names if not (keyed and n == "idempotency_key")]
        values = [f"%(s_{n})s" for n in names if not (keyed and n == "idempotency_key")]
        if keyed:
            parts.append(f"new_step AS (SELECT nextval(pg_get_serial_sequence("
                         f"'{table(Step)}', 'id')) AS id FROM task)")
            parts.append(
                f"step AS (INSERT INTO {table(Step)} (id, task_id, {', '.join(cols)}, "
                f"idempotency_key) SELECT new_step.id, %(task_id)s, {', '.join(values)}, "
                "encode(sha256(convert_to(%(key_head)s || new_step.id || %(key_tail)s, "
                "'UTF8')), 'hex') FROM new_step RETURNING id, idempotency_key)")
        else:
            parts.append(f"step AS (INSERT INTO {table(Step)} (task_id, {', '.join(cols)}) "
                         f"SELECT %(task_id)s, {', '.join(values)} FROM task "
                         "RETURNING id, idempotency_key)")
    if move_cols is not None:
        moved = ", ".join(f"{column(Step, k)} = %(m_{k})s" for k in move_cols)
        parts.append(f"moved AS (UPDATE {table(Step)} SET {moved} WHERE id = %(step_id)s "
                     f"AND status = ANY(%(step_from)s) AND {after_task})")
    if claim_cols is not None:
        claimed = ", ".join(column(ToolExecution, k) for k in claim_cols)
        claim_values = ", ".join(f"%(c_{k})s" for k in claim_cols)
        parts.append(f"claim AS (INSERT INTO {table(ToolExecution)} (idempotency_key, step_id, "
                     f"{claimed}) SELECT step.idempotency_key, step.id, {claim_values} FROM step)")
    if record_cols is not None:
        equal, differ = record_while("", "")
        recorded = ", ".join(f"{column(ToolExecution, k)} = %(r_{k})s" for k in record_cols)
        where = [f"{column(ToolExecution, k)} = %(r_eq_{k})s" for k in equal]
        where += [f"{column(ToolExecution, k)} <> %(r_ne_{k})s" for k in differ]
        parts.append(f"ledger AS (UPDATE {table(ToolExecution)} SET {recorded} WHERE "
                     f"{' AND '.join(where)} AND {after_task} RETURNING id)")
    if billed:
        parts.append(f"rollup AS ({rollup_sql(from_task=True)})")
    payload = "%(payload)s"
    if keyed_event:
        payload += " || jsonb_build_object('idempotency_key', step.idempotency_key)"
    event_values = {"task_id": "%(task_id)s", "tenant_id": "%(tenant_id)s",
                    "task_version": "task.version", "type": "%(event_type)s", "payload": payload,
                    "actor": "%(actor)s", "actor_role": "%(actor_role)s",
                    "trace_id": "%(trace_id)s", "created_at": "%(now)s"}
    parts.append(f"event AS ({EVENT_INSERT} SELECT "
                 f"{', '.join(event_values[c] for c in EVENT_COLUMNS)} "
                 f"FROM task{', step' if keyed_event else ''} RETURNING id)")
    fixed: dict[str, Any] = {}
    if ending:
        closing, fixed = closing_ctes(after_task)
        parts.extend(closing)
    step_cols = "step.id, step.idempotency_key" if new is not None else "NULL, NULL"
    recorded_n = "(SELECT count(*) FROM ledger)" if record_cols is not None else "0"
    sql = (f"WITH {', '.join(parts)} SELECT task.version, event.id, {step_cols}, {recorded_n} "
           f"FROM task, event{', step' if new is not None else ''}")
    return sql, fixed
