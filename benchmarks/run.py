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
from dataclasses import asdict, dataclass
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
from .world import World, api_key, session_cookie, world_ensure
from .ws_latency import run_ws_latency

TETHER_KNOBS = (
    "SLICE_S",
    "SLICE_MAX_STEPS",
    "LEASE_TTL_S",
    "MAX_RUNNING_TASKS",
    "MAX_RUNNING_PER_TENANT",
)


@dataclass
class _Run:
    """One bench run: what every phase reads, and the document they fill."""

    cfg: BenchConfig
    env: dict[str, str]
    log_dir: Path
    say: Callable[[str], None]
    world: World
    doc: dict[str, Any]
    load: dict[str, float]

    def phase(self, name: str, line: str) -> None:
        # The machine may be shared: the 1-minute load average as each phase starts.
        self.load[name] = round(os.getloadavg()[0], 2)
        self.say(line)


def bench_run(cfg: BenchConfig, *, log_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    settings_dict = connection.settings_dict
    started = time.monotonic()
    load: dict[str, float] = {}
    doc: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "machine": machine_info(),
        "config": asdict(cfg),
        "tether": {k: settings.TETHER[k] for k in TETHER_KNOBS},
        "database": settings_dict["NAME"],
        "logs": str(log_dir),
        "loadavg_1m": load,
    }
    run = _Run(cfg, bench_env(database_url_of(settings_dict)), log_dir, say,
               world_ensure(), doc, load)
    purge_queue()
    _workload_phases(run)
    if cfg.only:
        if cfg.only == "workflow":
            doc["targets"] = workflow_targets(doc)
    else:
        _runtime_phases(run)
        _server_phases(run)
        doc["targets"] = check_targets(doc)
    purge_queue()
    load["end"] = round(os.getloadavg()[0], 2)
    doc["duration_s"] = round(time.monotonic() - started, 1)
    return doc


def _workload_phases(run: _Run) -> None:
    """The workloads on the worker as deployed: I/O, parallel reads, workflows."""
    cfg, doc = run.cfg, run.doc
    common = {"log_dir": run.log_dir, "say": run.say}
    if cfg.only in ("", "io"):
        run.phase("io", f"I/O workload: {', '.join(str(n) for n in cfg.io_tasks)} tasks ...")
        doc["io"] = run_io_phase(run.world, run.env, sizes=list(cfg.io_tasks),
                                 rounds=cfg.rounds, **common)
        purge_queue()
    if cfg.only == "parallel":
        sizes = list(cfg.io_tasks[:1])  # the first I/O size: 200 tasks unless told
        run.phase("parallel", f"parallel I/O workload: {sizes[0]} tasks ...")
        doc["parallel"] = run_parallel_phase(run.world, run.env, sizes=sizes, **common)
        purge_queue()
    if cfg.only in ("", "workflow"):
        run.phase("workflow", f"workflow workload: {cfg.workflow_runs} runs ...")
        doc["workflow"] = run_workflow_phase(run.world, run.env, runs=cfg.workflow_runs,
                                             rounds=cfg.rounds, **common)
        purge_queue()


def _runtime_phases(run: _Run) -> None:
    """Console history, then the runner against the psycopg floor, waiting
    tasks, the long task and a step's anatomy."""
    cfg, doc, world = run.cfg, run.doc, run.world
    if not cfg.skip_console:
        run.phase(
            "console_data",
            f"console data: {cfg.console_tasks:,} tasks / {cfg.console_events:,} events ...",
        )
        doc["console_data"] = console_data_ensure(
            world, tasks=cfg.console_tasks, events=cfg.console_events
        )
        run.say(f"  done in {doc['console_data']['generate_s']} s")

    run.say(f"starting a Celery worker ({cfg.workers} processes) ...")
    with celery_workers(run.env, concurrency=cfg.workers, log_dir=run.log_dir) as workers:
        warm_up(world, cfg)
        run.phase("runner",
                  f"runner and floor: {cfg.rounds} x {cfg.tasks} tasks x {cfg.steps} steps")
        runners, floors = [], []
        dsn = psycopg_dsn(connection.settings_dict)
        for n in range(cfg.rounds):
            runners.append(run_throughput(world, cfg, workers=workers))
            floors.append(run_floor(dsn, world, tasks=cfg.tasks, steps=cfg.steps))
            run.say(
                f"  round {n + 1}: runner {runners[-1]['steps_per_s']} steps/s, "
                f"floor {floors[-1]['steps_per_s']} steps/s"
            )
        doc["runner"], doc["floor"] = _median_round(runners), _median_round(floors)
        run.phase("waiting", f"waiting: {cfg.waiting_tasks} tasks parked on a question ...")
        doc["waiting"] = run_waiting(world, cfg, workers=workers)
        run.phase("long_task", f"long task: {cfg.rounds} x {cfg.long_steps} steps ...")
        doc["long_task"] = run_long_tasks(world, cfg)
        run.say(f"  ratio {doc['long_task']['ratio_last_to_10']}")

    run.phase("anatomy", "step anatomy: statements per tool step ...")
    doc["anatomy"] = run_anatomy(world)
    run.say(
        f"  {doc['anatomy'].get('statements_per_step')} statements, "
        f"{doc['anatomy'].get('commits_per_step')} commits per step"
    )
    purge_queue()  # the anatomy task's admission enqueued it; no worker is left to take it
    runner_rate, floor_rate = doc["runner"].get("steps_per_s"), doc["floor"].get("steps_per_s")
    doc["runner"]["ratio_to_floor"] = (
        round(runner_rate / floor_rate, 3) if runner_rate and floor_rate else None
    )


def _server_phases(run: _Run) -> None:
    """Through daphne: WebSocket latency, then the console's timings."""
    cfg, doc, world = run.cfg, run.doc, run.world
    run.say("starting daphne ...")
    with daphne_server(run.env, log_dir=run.log_dir) as base_url:
        cookie = session_cookie(world)
        run.phase("ws_latency", f"websocket: {cfg.ws_steps} steps at {cfg.ws_rate:g}/s ...")
        doc["ws_latency"] = run_ws_latency(
            world, cfg, base_url=base_url, cookie=cookie, log_dir=run.log_dir
        )
        if not cfg.skip_console:
            run.phase("console", "console timings ...")
            doc["console"] = run_console(
                world,
                cfg,
                base_url=base_url,
                cookie=cookie,
                api_key=api_key(world),
                sample_task=sample_generated_task(world),
                long_task=doc["long_task"].get("task_id"),
            )


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median steps/s (its figures as they were), and every
    round's steps/s."""
    ranked = sorted(rounds, key=lambda r: r.get("steps_per_s") or 0.0)
    median = dict(ranked[(len(ranked) - 1) // 2])
    median["rounds_steps_per_s"] = [r.get("steps_per_s") for r in rounds]
    return median
