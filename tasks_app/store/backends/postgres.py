"""PostgreSQL: the store's hot paths as one prepared statement each.

- A commit (`shapes.Commit`) is one statement of data-modifying CTEs, each
  part hanging off the version-checked UPDATE of the task (the CTE `task`),
  with table and column names from the models' `_meta`; built once per shape
  (`statement_of`) and prepared on the server (`prepared`). Alone, the
  statement is its own transaction (no BEGIN/COMMIT round trips). A commit
  with something to run after its rows (`Commit.then`) or an event hook
  registered for its type runs in a transaction, the hooks after the
  statement, as the ORM's way runs them after its inserts.
- Closing a task's open work, a call's usage with its rollup, the lease's
  take and release, admission's reads and lock, the slice memo's probe, a
  breaker's row, the registry's specs: one prepared statement each.
"""
from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection, models, transaction
from django.db.models import DateTimeField, Expression, Func

from tools_app.executor.ledger import record_while
from tools_app.models import Breaker, ToolExecution

from ...keys import idempotency_key_around
from ...machine import TaskStatus
from ...models import Event, Step, Task
from ...models.tasks import OPEN_STEP_STATUSES
from ...prepared import fetch_all_prepared, fetch_one_prepared
from ..effects import ends
from ..events import EVENT_COLUMNS, EVENT_INSERT, written_event
from ..hooks import OPEN_REQUESTS, event_hooked, run_event_hooks
from ..shapes import Commit, Committed, NewStep
from ..spend import rollup_params, rollup_sql
from ..sql import column, json_param, table
from ..steps import open_steps_end_as, sources_of
from .base import (
    ADMISSION_PAGE,
    BREAKER_ADMISSION_COLUMNS,
    AdmissionReads,
    Backend,
    Candidate,
    running_counts,
)

# --- admission's reads -------------------------------------------------------------

ADMISSION_LOCK_KEY = 0x7E7E_0001  # the recovery sweep's is 0x7E7E_0002 (`runner.sweeper`)
_TASKS, _CREATED, _RUNNING = table(Task), TaskStatus.CREATED.value, TaskStatus.RUNNING.value
ANY_CREATED_SQL = f"SELECT EXISTS (SELECT 1 FROM {_TASKS} WHERE status = '{_CREATED}')"
LOCK_SQL = "SELECT pg_advisory_xact_lock(%s)"
RUNNING_SQL = f"""
SELECT tenant_id, agent_id, shadow_of IS NOT NULL, count(*) FROM {_TASKS}
 WHERE status = '{_RUNNING}' GROUP BY 1, 2, 3
"""
_CANDIDATE = f"""
SELECT id, tenant_id, agent_id, version, trace_id,
       agent_snapshot -> 'budget' ->> 'max_concurrent_tasks',
       agent_snapshot -> 'budget' ->> 'max_duration_s', parent_id
  FROM {_TASKS}
 WHERE status = '{_CREATED}' AND id > %(after)s"""
CHILDREN_SQL = (f"{_CANDIDATE} AND parent_id IS NOT NULL AND shadow_of IS NULL"
                " ORDER BY id LIMIT %(page)s")
TENANT_PAGE_SQL = (f"{_CANDIDATE} AND tenant_id = %(tenant)s AND parent_id IS NULL"
                   " AND shadow_of IS NULL ORDER BY id LIMIT %(page)s")
EVALUATION_PAGE_SQL = f"{_CANDIDATE} AND shadow_of IS NOT NULL ORDER BY id LIMIT %(page)s"
# A skip scan of the waiting tasks' index (task_waiting_by_tenant): one probe
# per waiting tenant, however long its queue; then each one's oldest top-level task.
WAITING_TENANTS_SQL = f"""
WITH RECURSIVE waiting(tenant_id) AS (
    (SELECT tenant_id FROM {_TASKS} WHERE status = '{_CREATED}' ORDER BY tenant_id LIMIT 1)
  UNION ALL
    SELECT (SELECT t.tenant_id FROM {_TASKS} t
             WHERE t.status = '{_CREATED}' AND t.tenant_id > w.tenant_id
             ORDER BY t.tenant_id LIMIT 1)
      FROM waiting w WHERE w.tenant_id IS NOT NULL
)
SELECT w.tenant_id, h.id FROM waiting w CROSS JOIN LATERAL (
    SELECT t.id FROM {_TASKS} t
     WHERE t.status = '{_CREATED}' AND t.tenant_id = w.tenant_id AND t.parent_id IS NULL
       AND t.shadow_of IS NULL
     ORDER BY t.id LIMIT 1) h
 WHERE w.tenant_id IS NOT NULL
"""


class PostgresAdmissionReads(AdmissionReads):
    """Prepared: admission runs once for every task that ends."""

    def any_created(self) -> bool:
        row = fetch_one_prepared(ANY_CREATED_SQL, ())
        return bool(row and row[0])

    def lock(self) -> None:
        """A transaction-scoped advisory lock: two admitters never both take the last slot."""
        fetch_one_prepared(LOCK_SQL, (ADMISSION_LOCK_KEY,))

    def running_counts(self) -> tuple[Counter[int], Counter[int], int]:
        return running_counts(fetch_all_prepared(RUNNING_SQL, ()))

    def children(self, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(CHILDREN_SQL, {"after": after, "page": ADMISSION_PAGE})
        return [Candidate(*row) for row in rows]

    def waiting_tenants(self) -> dict[int, int]:
        return dict(fetch_all_prepared(WAITING_TENANTS_SQL, ()))

    def tenant_page(self, tenant_id: int, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(
            TENANT_PAGE_SQL, {"after": after, "tenant": tenant_id, "page": ADMISSION_PAGE})
        return [Candidate(*row) for row in rows]

    def evaluation_page(self, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(EVALUATION_PAGE_SQL, {"after": after, "page": ADMISSION_PAGE})
        return [Candidate(*row) for row in rows]



class PostgresBackend(Backend):
    admission = PostgresAdmissionReads()
    partitions_events = True  # declarative partitioning (`store.partitions`)

    # --- commits ---------------------------------------------------------------------

    def commit(self, c: Commit, *, target: str, set_: dict[str, Any], payload: dict[str, Any],
               now: datetime, savepoint: bool) -> Committed | None:
        if c.then is None and (c.event is None or not event_hooked(c.event)):
            done = _statement(c, target=target, set_=set_, payload=payload, now=now,
                              savepoint=savepoint)
            return None if done is None else done[0]
        with transaction.atomic(savepoint=savepoint):
            done = _statement(c, target=target, set_=set_, payload=payload, now=now,
                              savepoint=False)
            if done is None:
                return None
            committed, event = done
            if c.then is not None:
                c.then(committed.step, committed.version)
            if event is not None:
                run_event_hooks(event)
        return committed

    def close_open_work(self, task_id: int, *, event: str, payload: dict[str, Any],
                        now: datetime) -> None:
        parts, fixed = closing_ctes()
        fetch_one_prepared(f"WITH {', '.join(parts)} SELECT 1",
                           {**fixed, **closing_params(task_id=task_id, event=event,
                                                      payload=payload, now=now)})

    def usage_add(self, task_id: int, amounts: dict[str, int],
                  with_statement: tuple[str, dict[str, Any]] | None) -> None:
        """With a statement to commit with it (the spend rollup's upsert), one
        statement: the UPDATE as a CTE before it (one round trip, not BEGIN,
        two statements and COMMIT)."""
        if with_statement is None:
            super().usage_add(task_id, amounts, with_statement)
            return
        sql, params = with_statement
        run_one(_usage_cte(tuple(amounts)) + sql,
                {**params, "u_task_id": task_id, **{f"u_{k}": v for k, v in amounts.items()}})

    # --- leases ----------------------------------------------------------------------

    def lease_take(self, *, task_id: int, owner: str, now: datetime,
                   until: datetime) -> Task | None:
        """One statement, which returns the task's row (the slice's first step reads no other)."""
        row = fetch_one_prepared(TAKE_SQL, {
            "owner": owner, "until": until, "now": now, "task_id": task_id,
            "running": TaskStatus.RUNNING.value})
        return _task_of(row) if row is not None else None

    def lease_release(self, *, task_id: int, owner: str, next_run_at: datetime | None) -> None:
        fetch_one_prepared(RELEASE_SQL, {"next_run_at": next_run_at, "task_id": task_id,
                                         "owner": owner})

    def wall_clock(self) -> Expression:
        """The wall clock (`clock_timestamp()`), not the transaction's start."""
        return _ClockTimestamp()

    # --- reads -----------------------------------------------------------------------

    def fetch_one(self, sql: str, params: Any) -> tuple[Any, ...] | None:
        return fetch_one_prepared(sql, params)

    def fetch_all(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        return fetch_all_prepared(sql, params)

    def breaker_row(self, key: str) -> dict[str, Any] | None:
        """Prepared: read before every call to a downstream (two per step of a
        model and a tool), the ORM's compiling was about a tenth of a busy
        worker's CPU."""
        row = fetch_one_prepared(_breaker_sql(), [key])
        return dict(zip(BREAKER_ADMISSION_COLUMNS, row, strict=True)) if row is not None else None


class _ClockTimestamp(Func):
    function = "clock_timestamp"
    template = "clock_timestamp()"
    output_field = DateTimeField()


# --- a commit in one statement --------------------------------------------------------


def run_one(sql: str, params: dict[str, Any], *, savepoint: bool = True) -> tuple[Any, ...] | None:
    """Run `sql`, prepared, and return its first row. Alone, the statement is its
    own transaction (no BEGIN/COMMIT round trips); inside a caller's transaction,
    with `savepoint`, a failure does not poison it."""
    enclosing = (transaction.atomic() if savepoint and connection.in_atomic_block
                 else nullcontext())
    with enclosing:
        return fetch_one_prepared(sql, params)


def _statement(c: Commit, *, target: str, set_: dict[str, Any], payload: dict[str, Any],
               now: datetime, savepoint: bool) -> tuple[Committed, Event | None] | None:
    t = c.task
    ending = c.transition and ends(target)
    new, move, record = c.new_step, c.move, c.record
    shape = (c.transition, ending, tuple(set_), tuple(c.add),
             None if new is None else (tuple(new.fields), new.keyed is not None),
             None if move is None else tuple(move.fields),
             None if c.claim is None else tuple(c.claim),
             None if record is None else tuple(record.fields), c.payload_key,
             c.bill is not None, c.event is not None)
    params: dict[str, Any] = {
        "task_id": t.id, "tenant_id": t.tenant_id, "trace_id": t.trace_id, "version": t.version,
        "from": t.status, "to": target, "now": now, "event_type": c.event,
        "payload": db_value(Event, "payload", payload), "actor": c.actor.name,
        "actor_role": c.actor.role,
        **{f"t_{k}": db_value(Task, k, v) for k, v in set_.items()},
        **{f"a_{k}": v for k, v in c.add.items()},
    }
    if new is not None:
        params.update({f"s_{k}": db_value(Step, k, v) for k, v in _step_row(new, now).items()})
        if new.keyed is not None:
            tool, args = new.keyed
            params["key_head"], params["key_tail"] = idempotency_key_around(
                task_id=t.id, tool=tool, args=args)
    if move is not None:
        params.update({f"m_{k}": db_value(Step, k, v) for k, v in move.fields.items()},
                      step_id=move.step_id, step_from=list(sources_of(move.fields["status"])))
    if c.claim is not None:
        params.update({f"c_{k}": db_value(ToolExecution, k, v) for k, v in c.claim.items()})
    if c.bill is not None:
        params.update(rollup_params(c.bill))
    if record is not None:
        equal, differ = record_while(record.key, record.owner)
        params.update({f"r_{k}": db_value(ToolExecution, k, v) for k, v in record.fields.items()})
        params.update({f"r_eq_{k}": v for k, v in equal.items()})
        params.update({f"r_ne_{k}": v for k, v in differ.items()})
    sql, fixed = statement_of(shape)
    if ending:
        assert c.event is not None  # a transition's event
        params.update(fixed, **closing_params(task_id=t.id, event=c.event, payload=c.payload,
                                              now=now))
    row = run_one(sql, params, savepoint=savepoint)
    if row is None:
        return None
    version, event_id, step_id, key, recorded = row
    step = None
    if new is not None:
        step = Step(pk=step_id, task_id=t.id, **{**new.fields, "idempotency_key": key})
        if c.payload_key:
            payload = {**payload, "idempotency_key": key}
    event = None if c.event is None else written_event(
        event_id=event_id, task_id=t.id, tenant_id=t.tenant_id, trace_id=t.trace_id,
        task_version=version, type=c.event, payload=payload, actor=c.actor, at=now)
    return Committed(version=int(version), event_id=None if event is None else int(event_id),
                     target=target, step=step, recorded=recorded == 1), event


def _step_row(new: NewStep, now: datetime) -> dict[str, Any]:
    """Every column of the new step, as the ORM would fill it (SQL sets no defaults)."""
    return {**_step_defaults(now), **new.fields}


def _step_defaults(now: datetime) -> dict[str, Any]:
    return {f.name: (now if getattr(f, "auto_now_add", False) else f.get_default())
            for f in insertable(Step) if f.name != "task"}


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
     billed, has_event) = shape
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
    if has_event:
        parts.append(f"event AS ({EVENT_INSERT} SELECT "
                     f"{', '.join(event_values[c] for c in EVENT_COLUMNS)} "
                     f"FROM task{', step' if keyed_event else ''} RETURNING id)")
    fixed: dict[str, Any] = {}
    if ending:
        closing, fixed = closing_ctes(after_task)
        parts.extend(closing)
    step_cols = "step.id, step.idempotency_key" if new is not None else "NULL, NULL"
    recorded_n = "(SELECT count(*) FROM ledger)" if record_cols is not None else "0"
    event_id = "event.id" if has_event else "NULL"
    sql = (f"WITH {', '.join(parts)} SELECT task.version, {event_id}, {step_cols}, {recorded_n} "
           f"FROM task{', event' if has_event else ''}{', step' if new is not None else ''}")
    return sql, fixed


def closing_params(*, task_id: int, event: str, payload: dict[str, Any],
                   now: datetime) -> dict[str, Any]:
    """The varying parameters of `closing_ctes`."""
    status, error = open_steps_end_as(event, payload)
    return {"task_id": task_id, "close_status": str(status), "close_at": now,
            "close_error": json_param(Step, "error", error)}


@cache
def closing_ctes(guard: str = "") -> tuple[tuple[str, ...], dict[str, Any]]:
    """The CTEs that close a task's open steps and requests, and their fixed
    parameters. `guard`, a condition every part also needs (that the
    version-checked UPDATE of the same statement matched), lets a statement
    that ends a task embed them."""
    also = f" AND {guard}" if guard else ""
    fixed: dict[str, Any] = {"open_steps": [s.value for s in OPEN_STEP_STATUSES]}
    parts = [f"closed_steps AS (UPDATE {table(Step)} SET status = %(close_status)s, "
             "error = %(close_error)s, finished_at = %(close_at)s "
             f"WHERE task_id = %(task_id)s AND status = ANY(%(open_steps)s){also})"]
    for n, (model, open_status, canceled_status) in enumerate(OPEN_REQUESTS):
        fixed[f"open_{n}"], fixed[f"canceled_{n}"] = str(open_status), str(canceled_status)
        parts.append(f"closed_{n} AS (UPDATE {table(model)} SET status = %(canceled_{n})s "
                     f"WHERE task_id = %(task_id)s AND status = %(open_{n})s{also})")
    return tuple(parts), fixed


@cache
def _usage_cte(names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{column(Task, k)} = {column(Task, k)} + %(u_{k})s" for k in names)
    return f"WITH usage AS (UPDATE {table(Task)} SET {sets} WHERE id = %(u_task_id)s) "


# --- the lease -------------------------------------------------------------------------


def _col(name: str) -> str:
    return column(Task, name)


TAKE_SQL = f"""
UPDATE {table(Task)}
   SET {_col("lease_owner")} = %(owner)s, {_col("lease_expires_at")} = %(until)s,
       {_col("heartbeat_at")} = %(now)s, {_col("next_run_at")} = NULL
 WHERE {_col("id")} = %(task_id)s AND {_col("status")} = %(running)s
   AND ({_col("lease_owner")} = '' OR {_col("lease_expires_at")} < %(now)s
        OR {_col("lease_owner")} = %(owner)s)
RETURNING {", ".join(f'"{f.column}"' for f in Task._meta.concrete_fields)}
"""
RELEASE_SQL = f"""
UPDATE {table(Task)}
   SET {_col("lease_owner")} = '', {_col("lease_expires_at")} = NULL,
       {_col("next_run_at")} = %(next_run_at)s
 WHERE {_col("id")} = %(task_id)s AND {_col("lease_owner")} = %(owner)s
RETURNING {_col("id")}
"""


def _task_of(row: tuple[Any, ...]) -> Task:
    """A Task from the raw row `TAKE_SQL` returns, converted as the ORM would."""
    attnames, converters = _row_converters(connection.alias)
    values = []
    for value, (col, converts) in zip(row, converters, strict=True):
        for convert in converts:
            value = convert(value, col, connection)
        values.append(value)
    return Task.from_db(connection.alias, attnames, values)


@cache
def _row_converters(alias: str) -> tuple[list[str], list[tuple[Any, list[Any]]]]:
    """The task's attribute names and, per column, the converters the ORM applies
    to what the database returns (JSON text to Python, for one)."""
    fields = Task._meta.concrete_fields
    converters = []
    for field in fields:
        col = field.get_col(Task._meta.db_table)
        converters.append((col, connection.ops.get_db_converters(col)
                           + col.get_db_converters(connection)))
    return [f.attname for f in fields], converters


# --- a breaker's row ---------------------------------------------------------------


@cache
def _breaker_sql() -> str:
    columns = ", ".join(column(Breaker, name) for name in BREAKER_ADMISSION_COLUMNS)
    return f"SELECT {columns} FROM {table(Breaker)} WHERE {column(Breaker, 'key')} = %s"
