"""`bench --only history`: does a step cost the same with years of history in the
database? (issue 37's partitioned history)

Two databases of their own, next to the bench's: one left empty, one preloaded
with `history_tasks` finished tasks and `history_events` events (1 million and
10 million; 10,000 and 100,000 with --quick), generated inside PostgreSQL with
`generate_series` (`datagen`: no row goes through Python; a COPY would ship the
same rows through the client first). The months the preload spans are created
as partitions first, as the recovery sweep would have made them while that
history was written. Then, `rounds` times and alternately (empty, full; full,
empty; ...), a Celery worker on that database runs the scripted throughput
workload (`throughput`: `tasks` tasks of `steps` steps), so both databases see
the same machine; the medians of steps/s and of the step latency's p50 and p99
are compared (target: the full one within 10 % of the empty one).

Last, the archive sweep archives a batch of the preloaded tasks (the oldest
`archive_tasks`: as if their retention had just run out) and its throughput is
reported in events per second, from the first file written to the last task
deleted online. Both databases are dropped at the end.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from foundations.deployment_locks import close_lock_connections
from retention_app.services.archive import archive_sweep
from retention_app.services.policy import retention_days
from tasks_app.models import Event, Task
from tasks_app.store.partitions import event_months, event_months_ensure

from .config import BenchConfig, bench_env, database_url_of
from .datagen import GEN_AGENT, console_data_ensure
from .models import store_ensure
from .procs import celery_workers, purge_queue
from .throughput import run_throughput, warm_up
from .world import tenant_of, world_ensure

RATIO_TARGET = 0.1  # the full database within 10 % of the empty one
# datagen spaces its tasks 15 s apart, ending an hour ago
GEN_SPACING = timedelta(seconds=15)


def run_history(cfg: BenchConfig, *, history_tasks: int, history_events: int,
                archive_tasks: int, log_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    base = connection.settings_dict["NAME"]
    names = {"empty": f"{base}_history_empty", "full": f"{base}_history_full"}
    doc: dict[str, Any] = {"tasks": cfg.tasks, "steps_per_task": cfg.steps, "rounds": cfg.rounds,
                           "workers": cfg.workers, "databases": names}
    try:
        for kind, name in names.items():
            _database_create(name)
            with _on_database(name):
                call_command("migrate", verbosity=0, skip_checks=True)
                store_ensure()
                world_ensure()
            say(f"database {name} ({kind}) migrated")
        with _on_database(names["full"]):
            say(f"preloading {history_tasks:,} tasks / {history_events:,} events ...")
            doc["preload"] = _preload(tasks=history_tasks, events=history_events)
            say(f"  done in {doc['preload']['generate_s']} s "
                f"({doc['preload']['partitions']} month partitions)")
        order = ["empty", "full"]
        runs: dict[str, list[dict[str, Any]]] = {"empty": [], "full": []}
        for n in range(cfg.rounds):
            for kind in order:
                runs[kind].append(_round(names[kind], cfg, log_dir=log_dir))
                say(f"  round {n + 1} {kind}: {runs[kind][-1]['steps_per_s']} steps/s, "
                    f"step p50 {runs[kind][-1]['step_latency']['p50_ms']} ms, "
                    f"p99 {runs[kind][-1]['step_latency']['p99_ms']} ms")
            order.reverse()  # the next round starts with the other one
        doc.update(_compare(runs))
        with _on_database(names["full"]):
            say(f"archiving the {archive_tasks:,} oldest preloaded tasks ...")
            doc["archive"] = _archive(archive_tasks)
            say(f"  {doc['archive']['events_per_s']} events/s "
                f"({doc['archive']['events']:,} events in {doc['archive']['seconds']} s)")
    finally:
        for name in names.values():
            _database_drop(name)
    doc["target_met"] = bool(
        doc.get("steps_ratio") and doc["steps_ratio"] >= 1 - RATIO_TARGET
        and doc.get("p50_ratio") and doc["p50_ratio"] <= 1 + RATIO_TARGET
        and doc.get("p99_ratio") and doc["p99_ratio"] <= 1 + RATIO_TARGET
        and doc.get("succeeded") == doc.get("submitted"))
    return doc


def _round(name: str, cfg: BenchConfig, *, log_dir: Path) -> dict[str, Any]:
    """One throughput run on database `name`, with a worker of its own."""
    with _on_database(name):
        world = world_ensure()
        purge_queue()
        env = bench_env(database_url_of(connection.settings_dict))
        with celery_workers(env, concurrency=cfg.workers, log_dir=log_dir) as workers:
            warm_up(world, cfg)
            load = os.getloadavg()[0]  # the machine may be shared
            return {**run_throughput(world, cfg, workers=workers),
                    "loadavg_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


def _preload(*, tasks: int, events: int) -> dict[str, Any]:
    oldest = timezone.now() - timedelta(hours=1) - tasks * GEN_SPACING - timedelta(days=1)
    months = 0
    moment = oldest
    while moment < timezone.now():
        moment += timedelta(days=28)
        months += 1
    event_months_ensure(now=oldest, ahead=months + 2)
    data = console_data_ensure(world_ensure(), tasks=tasks, events=events)
    with connection.cursor() as cursor:
        # the load's dirty pages written now, not by the checkpointer during the rounds
        cursor.execute("CHECKPOINT")
    return {**data, "partitions": len(event_months())}


def _archive(count: int) -> dict[str, Any]:
    """The archive sweep on the `count` oldest generated tasks: the sweep runs at
    the moment their tenant's retention ran out for the last of them."""
    tenant = tenant_of(world_ensure())
    generated = Task.objects.filter(tenant=tenant, agent__name=GEN_AGENT).order_by("finished_at")
    batch = list(generated.values_list("pk", "finished_at")[:count])
    if not batch:
        return {"tasks": 0, "events": 0, "seconds": None, "events_per_s": None}
    last_finished = batch[-1][1]
    assert last_finished is not None  # generated tasks are all finished
    events = Event.objects.filter(task_id__in=[pk for pk, _ in batch]).count()
    now = last_finished + timedelta(days=retention_days(tenant), seconds=1)
    with tempfile.TemporaryDirectory(prefix="tether-bench-archive-") as where, override_settings(
            STORAGES=_storages_with_archive_in(where)):
        started = time.monotonic()
        report = archive_sweep(now=now, tenant=tenant)
        seconds = time.monotonic() - started
        size = sum(p.stat().st_size for p in Path(where).rglob("*") if p.is_file())
    return {"tasks": report.tasks, "events": events, "rows": report.rows, "files": report.files,
            "deleted": report.deleted, "bytes": size, "seconds": round(seconds, 2),
            "events_per_s": round(events / seconds, 1) if seconds else None,
            "tasks_per_s": round(report.tasks / seconds, 1) if seconds else None}


def _storages_with_archive_in(where: str) -> dict[str, Any]:
    from django.conf import settings

    return {**settings.STORAGES, "archive": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": where}}}


def _compare(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, rounds in runs.items():
        out[kind] = {
            "steps_per_s": _median([r["steps_per_s"] for r in rounds]),
            "p50_ms": _median([r["step_latency"]["p50_ms"] for r in rounds]),
            "p99_ms": _median([r["step_latency"]["p99_ms"] for r in rounds]),
            "rounds_steps_per_s": [r["steps_per_s"] for r in rounds],
            "rounds_p50_ms": [r["step_latency"]["p50_ms"] for r in rounds],
            "rounds_p99_ms": [r["step_latency"]["p99_ms"] for r in rounds],
            "rounds_loadavg_1m": [r["loadavg_1m"] for r in rounds],
            "postgres_cpu_ms_per_step": _median(
                [r["cpu_ms_per_step"]["postgres"] for r in rounds]),
        }
    empty, full = out["empty"], out["full"]
    out["steps_ratio"] = _ratio(full["steps_per_s"], empty["steps_per_s"])
    out["p50_ratio"] = _ratio(full["p50_ms"], empty["p50_ms"])
    out["p99_ratio"] = _ratio(full["p99_ms"], empty["p99_ms"])
    out["submitted"] = sum(r["tasks"] for rounds in runs.values() for r in rounds)
    out["succeeded"] = sum(r["succeeded"] for rounds in runs.values() for r in rounds)
    return out


def _median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


@contextmanager
def _on_database(name: str) -> Iterator[None]:
    """This process's Django connection on database `name` for the block (its
    connection pool, made for the database it first served, closed on the way
    in and out)."""
    previous = connection.settings_dict["NAME"]
    _disconnect()
    connection.settings_dict["NAME"] = name
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_database()")
            if cursor.fetchone()[0] != name:
                raise RuntimeError(f"could not move this process's connection to {name}")
        yield
    finally:
        _disconnect()
        connection.settings_dict["NAME"] = previous


def _disconnect() -> None:
    connection.close()
    connection.close_pool()  # type: ignore[attr-defined]  # PostgreSQL's wrapper
    close_lock_connections()


def _admin() -> psycopg.Connection[Any]:
    s = connection.settings_dict
    return psycopg.connect(dbname="postgres", host=s.get("HOST") or "127.0.0.1",
                           port=str(s.get("PORT") or 5432), user=s.get("USER") or "postgres",
                           password=s.get("PASSWORD") or None, autocommit=True)


def _database_create(name: str) -> None:
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def _database_drop(name: str) -> None:
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def history_table(doc: dict[str, Any]) -> str:
    empty, full = doc.get("empty") or {}, doc.get("full") or {}
    pre, arc = doc.get("preload") or {}, doc.get("archive") or {}
    rows = [
        ("preloaded", f"{pre.get('table_tasks', 0):,} tasks, {pre.get('table_events', 0):,} "
                      f"events in {pre.get('partitions')} month partitions "
                      f"(generated in {pre.get('generate_s')} s)"),
        ("steps/s, full vs empty",
         f"{full.get('steps_per_s')} vs {empty.get('steps_per_s')}: ratio "
         f"{doc.get('steps_ratio')} (rounds: full {full.get('rounds_steps_per_s')}, "
         f"empty {empty.get('rounds_steps_per_s')})"),
        ("step p50, full vs empty",
         f"{full.get('p50_ms')} vs {empty.get('p50_ms')} ms: ratio {doc.get('p50_ratio')}"),
        ("step p99, full vs empty",
         f"{full.get('p99_ms')} vs {empty.get('p99_ms')} ms: ratio {doc.get('p99_ratio')}"),
        ("PostgreSQL CPU per step",
         f"full {full.get('postgres_cpu_ms_per_step')} ms, empty "
         f"{empty.get('postgres_cpu_ms_per_step')} ms"),
        ("archive sweep",
         f"{arc.get('events_per_s')} events/s, {arc.get('tasks_per_s')} tasks/s "
         f"({arc.get('tasks')} tasks, {arc.get('events')} events, {arc.get('files')} files, "
         f"{arc.get('seconds')} s)"),
        ("tasks", f"{doc.get('succeeded')}/{doc.get('submitted')} succeeded"),
        ("targets", f"{'met' if doc.get('target_met') else 'NOT met'} (each ratio within "
                    f"{RATIO_TARGET:.0%})"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
