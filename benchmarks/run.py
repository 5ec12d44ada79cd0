"""The bench's phases, in order, against the database Django is connected to.

0. the I/O workload (`io_load`): tasks waiting on a model and an HTTP tool,
   through the worker started as docs/how-to/deploy.md says (alone with `only="io"`);
   then the workflow workload (`workflow_load`) on the same kind of worker
   (alone with `only="workflow"`);
1. console history (unless skipped), so every later phase runs on big tables;
2. Celery workers: warm-up, then `rounds` times the runner throughput and the
   psycopg floor (the workers idle meanwhile), alternately, so both see the
   same machine; the medians are compared; then waiting tasks, the long task;
3. workers stopped: the anatomy of a step (statements and connections per
   step, in this process);
4. daphne: WebSocket latency, then the console timings.

Every process started here is stopped before returning, also on errors.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from .anatomy import run_anatomy
from .config import BenchConfig, bench_env, database_url_of, psycopg_dsn
from .console import run_console
from .datagen import console_data_ensure, sample_generated_task
from .floor import run_floor
from .io_load import run_io_phase
from .long_task import run_long_tasks
from .parallel_load import run_parallel_phase
from .procs import celery_workers, daphne_server, purge_queue
from .report import check_targets, machine_info, workflow_targets
from .throughput import run_throughput, run_waiting, warm_up
from .workflow_load import run_workflow_phase
from .world import api_key, session_cookie, world_ensure
from .ws_latency import run_ws_latency

TETHER_KNOBS = (
    "SLICE_S",
    "SLICE_MAX_STEPS",
    "LEASE_TTL_S",
    "MAX_RUNNING_TASKS",
    "MAX_RUNNING_PER_TENANT",
)


def bench_run(cfg: BenchConfig, *, log_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    settings_dict = connection.settings_dict
    env = bench_env(database_url_of(settings_dict))
    started = time.monotonic()
    load: dict[str, float] = {}
    doc: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "machine": machine_info(),
        "config": asdict(cfg),
        "tether": {k: settings.TETHER[k] for k in TETHER_KNOBS},
        "database": settings_dict["NAME"],
        "logs": str(log_dir),
        # The machine may be shared: the 1-minute load average as each phase starts.
        "loadavg_1m": load,
    }

    def phase(name: str, line: str) -> None:
        load[name] = round(os.getloadavg()[0], 2)
        say(line)

    world = world_ensure()
    purge_queue()

    if cfg.only in ("", "io"):
        phase("io", f"I/O workload: {', '.join(str(n) for n in cfg.io_tasks)} tasks ...")
        doc["io"] = run_io_phase(world, env, sizes=list(cfg.io_tasks), rounds=cfg.rounds,
                                 log_dir=log_dir, say=say)
        purge_queue()
    if cfg.only == "parallel":
        sizes = list(cfg.io_tasks[:1])  # the first I/O size: 200 tasks unless told
        phase("parallel", f"parallel I/O workload: {sizes[0]} tasks ...")
        doc["parallel"] = run_parallel_phase(world, env, sizes=sizes, log_dir=log_dir, say=say)
        purge_queue()
    if cfg.only in ("", "workflow"):
        phase("workflow", f"workflow workload: {cfg.workflow_runs} runs ...")
        doc["workflow"] = run_workflow_phase(world, env, runs=cfg.workflow_runs,
                                             rounds=cfg.rounds, log_dir=log_dir, say=say)
        purge_queue()
    if cfg.only:
        load["end"] = round(os.getloadavg()[0], 2)
        if cfg.only == "workflow":
            doc["targets"] = workflow_targets(doc)
        doc["duration_s"] = round(time.monotonic() - started, 1)
        return doc

    if not cfg.skip_console:
        phase(
            "console_data",
            f"console data: {cfg.console_tasks:,} tasks / {cfg.console_events:,} events ...",
        )
        doc["console_data"] = console_data_ensure(
            world, tasks=cfg.console_tasks, events=cfg.console_events
        )
        say(f"  done in {doc['console_data']['generate_s']} s")

    say(f"starting a Celery worker ({cfg.workers} processes) ...")
    with celery_workers(env, concurrency=cfg.workers, log_dir=log_dir) as workers:
        warm_up(world, cfg)
        phase("runner", f"runner and floor: {cfg.rounds} x {cfg.tasks} tasks x {cfg.steps} steps")
        runners, floors = [], []
        for n in range(cfg.rounds):
            runners.append(run_throughput(world, cfg, workers=workers))
            floors.append(
                run_floor(psycopg_dsn(settings_dict), world, tasks=cfg.tasks, steps=cfg.steps)
            )
            say(
                f"  round {n + 1}: runner {runners[-1]['steps_per_s']} steps/s, "
                f"floor {floors[-1]['steps_per_s']} steps/s"
            )
        doc["runner"], doc["floor"] = _median_round(runners), _median_round(floors)
        phase("waiting", f"waiting: {cfg.waiting_tasks} tasks parked on a question ...")
        doc["waiting"] = run_waiting(world, cfg, workers=workers)
        phase("long_task", f"long task: {cfg.rounds} x {cfg.long_steps} steps ...")
        doc["long_task"] = run_long_tasks(world, cfg)
        say(f"  ratio {doc['long_task']['ratio_last_to_10']}")

    phase("anatomy", "step anatomy: statements per tool step ...")
    doc["anatomy"] = run_anatomy(world)
    say(
        f"  {doc['anatomy'].get('statements_per_step')} statements, "
        f"{doc['anatomy'].get('commits_per_step')} commits per step"
    )
    purge_queue()  # the anatomy task's admission enqueued it; no worker is left to take it
    runner_rate, floor_rate = doc["runner"].get("steps_per_s"), doc["floor"].get("steps_per_s")
    doc["runner"]["ratio_to_floor"] = (
        round(runner_rate / floor_rate, 3) if runner_rate and floor_rate else None
    )

    say("starting daphne ...")
    with daphne_server(env, log_dir=log_dir) as base_url:
        cookie = session_cookie(world)
        phase("ws_latency", f"websocket: {cfg.ws_steps} steps at {cfg.ws_rate:g}/s ...")
        doc["ws_latency"] = run_ws_latency(
            world, cfg, base_url=base_url, cookie=cookie, log_dir=log_dir
        )
        if not cfg.skip_console:
            phase("console", "console timings ...")
            doc["console"] = run_console(
                world,
                cfg,
                base_url=base_url,
                cookie=cookie,
                api_key=api_key(world),
                sample_task=sample_generated_task(world),
                long_task=doc["long_task"].get("task_id"),
            )
    purge_queue()
    load["end"] = round(os.getloadavg()[0], 2)
    doc["targets"] = check_targets(doc)
    doc["duration_s"] = round(time.monotonic() - started, 1)
    return doc


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median steps/s (its figures as they were), and every
    round's steps/s."""
    ranked = sorted(rounds, key=lambda r: r.get("steps_per_s") or 0.0)
    median = dict(ranked[(len(ranked) - 1) // 2])
    median["rounds_steps_per_s"] = [r.get("steps_per_s") for r in rounds]
    return median
