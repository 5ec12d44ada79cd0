"""`python manage.py bench`: Tether's performance benchmark (see `benchmarks`).

The command re-executes itself in the bench's production environment (its
own PostgreSQL database, created if missing; Redis db 7 as the broker with its
own queue; Redis db 6 as the channel layer), so it measures the same thing
whatever the caller's environment is. manage.py runs it under
`benchmarks.settings` (the product's settings plus this app); the processes it
starts run the product's own `config.settings`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from benchmarks.config import (
    CHILD_FLAG,
    DEFAULT_DATABASE_URL,
    BenchConfig,
    bench_env,
    database_url_of,
)
from benchmarks.models import store_ensure

KNOBS = ("tasks", "steps", "rounds", "long_steps", "workers", "ws_steps", "console_tasks",
         "console_events", "workflow_runs")


class Command(BaseCommand):
    help = ("Measure Tether: the I/O and workflow workloads first, then its overhead per step "
            "(runner, floor, long task, live latency, console).")
    # The bench measures; the URL and model checks are the test suite's job.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tasks", type=int, help="tasks in the throughput run (200)")
        parser.add_argument("--steps", type=int, help="steps per task (10)")
        parser.add_argument("--long-steps", type=int, help="steps of the long task (1000)")
        parser.add_argument("--workers", type=int, help="Celery worker processes (one per CPU)")
        parser.add_argument(
            "--rounds", type=int,
            help="runner and floor measured this many times, alternately; medians (3)")
        parser.add_argument(
            "--ws-steps", type=int, help="steps published for the WebSocket latency (1000)"
        )
        parser.add_argument(
            "--console-tasks", type=int, help="tasks in the console history (100000)"
        )
        parser.add_argument(
            "--console-events", type=int, help="events in the console history (1000000)"
        )
        parser.add_argument(
            "--skip-console", action="store_true", help="no history, no console timings"
        )
        parser.add_argument(
            "--json", dest="json_path", default="", help="write the figures to this file"
        )
        parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
        parser.add_argument(
            "--io-tasks", default="",
            help="sizes of the I/O workload, comma-separated (200,1000)")
        parser.add_argument(
            "--workflow-runs", type=int,
            help="runs of the workflow workload, with the 0.2 s tool and with instant tools "
            "(500)")
        parser.add_argument(
            "--only", choices=["io", "parallel", "workflow", "breaker", "chaos", "memory",
                               "rate_limit", "evaluation", "submit", "stream", "history"],
            default="",
            help="one workload only: `io` (the I/O workload and its scripted comparison), "
            "`parallel` (the I/O workload with 5 parallel reads per reply: wall time against "
            "its critical path; --io-tasks, default 200), "
            "`workflow` (the 6-node workflow: wall time against its critical path, and "
            "node steps/s with instant tools against the scripted runner's; --workflow-runs, "
            "--rounds), "
            "`breaker` (a downstream outage under running tasks; --tasks (100), "
            "--outage-s (20), --workers), `chaos` (worker kills and PostgreSQL and Redis "
            "restarts on a private cluster; --tasks (1000), --kills (10), --seed, --workers), "
            "`memory` (the I/O workload with memory on against off, alternated; --tasks (200), "
            "--rounds; and memory retrieval at 100,000 items), "
            "`rate_limit` (a model's tokens-per-minute limit at a third of what the endpoint "
            "could serve, under a backlog; --tasks (1000), --period-s (60), --workers), "
            "`evaluation` (recorded I/O tasks replayed as shadow tasks: shadow against live "
            "tasks/s, and live tasks/s during an evaluation; --tasks (500)), "
            "`stream` (the I/O workload with the model's replies streamed and their tokens "
            "published live against plain replies, alternated; --tasks (200), --rounds), "
            "`submit` (API submission: a submission's anatomy, 16 concurrent clients while "
            "the I/O workload runs, 10,000 tasks through the batch endpoint; --submissions, "
            "--batch-tasks, --web-processes), "
            "`history` (the scripted runner on a database preloaded with 1 million tasks and "
            "10 million events against an empty one, alternated, and the archive sweep's "
            "events/s; --history-tasks, --history-events, --archive-tasks, --tasks, --steps, "
            "--rounds)")
        parser.add_argument(
            "--database-url",
            default="",
            help=f"the bench's database (default $BENCH_DATABASE_URL or {DEFAULT_DATABASE_URL})",
        )
        _workload_arguments(parser)

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        if os.environ.get(CHILD_FLAG) != "1":
            return self._in_bench_environment(opts)
        if connection.vendor != "postgresql":
            raise CommandError("the bench runs against PostgreSQL only")
        cfg = BenchConfig.quick_defaults() if opts["quick"] else BenchConfig()
        given = {k: opts[k] for k in KNOBS if opts.get(k) is not None}
        cfg = replace(cfg, skip_console=opts["skip_console"], json_path=opts["json_path"],
                      only=opts["only"], **given)
        if cfg.workflow_runs < 1:
            raise CommandError("--workflow-runs must be at least 1")
        if opts["io_tasks"]:
            cfg = replace(cfg, io_tasks=tuple(int(n) for n in opts["io_tasks"].split(",")))
        if opts["only"] == "chaos":  # on a cluster of its own
            return self._chaos(opts, cfg)
        call_command("migrate", verbosity=0, skip_checks=True)
        store_ensure()  # the bench's own table: not in the product's migrations
        if opts["only"] == "breaker":
            return self._breaker(opts, cfg)
        if opts["only"] == "memory":
            return self._memory(opts, cfg)
        if opts["only"] == "stream":
            return self._stream(opts, cfg)
        if opts["only"] == "rate_limit":
            return self._rate_limit(opts, cfg)
        if opts["only"] == "evaluation":
            return self._evaluation(opts, cfg)
        if opts["only"] == "submit":
            return self._submit(opts, cfg)
        if opts["only"] == "history":
            return self._history(opts, cfg)

        from benchmarks.report import table
        from benchmarks.run import bench_run

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-"))
        self.stdout.write(
            f"bench on database {connection.settings_dict['NAME']}; logs in {log_dir}"
        )
        doc = bench_run(cfg, log_dir=log_dir, say=lambda line: self.stdout.write(line))
        if cfg.json_path:
            Path(cfg.json_path).write_text(json.dumps(doc, indent=2, default=str))
            self.stdout.write(f"figures written to {cfg.json_path}")
        self.stdout.write("")
        self.stdout.write(table(doc))

    def _submit(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.config import bench_env, database_url_of
        from benchmarks.procs import purge_queue
        from benchmarks.submit_load import run_submit_phase, submit_table
        from benchmarks.world import world_ensure

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-submit-"))
        world = world_ensure()
        purge_queue()
        doc = run_submit_phase(
            world, bench_env(database_url_of(connection.settings_dict)),
            submissions=opts["submissions"] or (200 if cfg.quick else 3000),
            batch_tasks=opts["batch_tasks"] or (2000 if cfg.quick else 10_000),
            web_processes=opts["web_processes"] or os.cpu_count() or 1,
            log_dir=log_dir, say=lambda line: self.stdout.write(line))
        purge_queue()
        if opts["json_path"]:
            Path(opts["json_path"]).write_text(json.dumps(doc, indent=2, default=str))
        self.stdout.write("")
        self.stdout.write(submit_table(doc))

    def _history(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.history_load import history_table, run_history

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-history-"))
        self.stdout.write(f"history bench; logs in {log_dir}")
        doc = run_history(
            cfg, history_tasks=opts["history_tasks"] or (10_000 if cfg.quick else 1_000_000),
            history_events=opts["history_events"] or (100_000 if cfg.quick else 10_000_000),
            archive_tasks=opts["archive_tasks"] or (200 if cfg.quick else 2000),
            log_dir=log_dir, say=lambda line: self.stdout.write(line))
        # a --quick run's figures are a smoke test's: printed, not judged
        self._figures(doc, cfg, history_table(doc), "history", judge=not cfg.quick)

    def _breaker(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.breaker import breaker_table, run_breaker

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-breaker-"))
        doc = run_breaker(
            tasks=opts["tasks"] or (10 if cfg.quick else 100),
            outage_s=opts["outage_s"] or (4.0 if cfg.quick else 20.0),
            workers=cfg.workers, log_dir=log_dir, say=lambda line: self.stdout.write(line))
        self._figures(doc, cfg, breaker_table(doc), "breaker")

    def _memory(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.memory_load import memory_table, run_memory_phase

        self._io_pair(opts, cfg, "memory", memory_table, lambda world, env, **kw: (
            run_memory_phase(world, env, recall_items=5_000 if cfg.quick else 100_000, **kw)))

    def _stream(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.stream_load import run_stream_phase, stream_table

        self._io_pair(opts, cfg, "stream", stream_table, run_stream_phase)

    def _io_pair(self, opts: dict, cfg: BenchConfig, workload: str, table: Any,
                 run_phase: Any) -> None:
        """A workload that alternates two agents on the I/O workload (memory,
        stream): --tasks (200; 20 with --quick), --rounds."""
        from benchmarks.procs import purge_queue
        from benchmarks.world import world_ensure

        log_dir = Path(tempfile.mkdtemp(prefix=f"tether-bench-{workload}-"))
        self.stdout.write(f"{workload} bench; logs in {log_dir}")
        world = world_ensure()
        purge_queue()
        doc = run_phase(
            world, bench_env(database_url_of(connection.settings_dict)),
            tasks=opts["tasks"] or (20 if cfg.quick else 200), rounds=cfg.rounds,
            log_dir=log_dir, say=lambda line: self.stdout.write(line))
        self._figures(doc, cfg, table(doc), workload)

    def _rate_limit(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.rate_limit import rate_limit_table, run_rate_limit

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-rate-limit-"))
        doc = run_rate_limit(
            tasks=opts["tasks"] or (200 if cfg.quick else 1000),
            period_s=opts["period_s"] or (10.0 if cfg.quick else 60.0),
            workers=cfg.workers, log_dir=log_dir, say=lambda line: self.stdout.write(line))
        self._figures(doc, cfg, rate_limit_table(doc), "rate_limit")

    def _evaluation(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.config import bench_env, database_url_of
        from benchmarks.evaluation_load import evaluation_table, run_evaluation

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-evaluation-"))
        doc = run_evaluation(tasks=opts["tasks"] or (30 if cfg.quick else 500),
                             env=bench_env(database_url_of(connection.settings_dict)),
                             log_dir=log_dir, say=lambda line: self.stdout.write(line))
        self._figures(doc, cfg, evaluation_table(doc), "evaluation")

    def _chaos(self, opts: dict, cfg: BenchConfig) -> None:
        from benchmarks.chaos import chaos_table, run_chaos

        log_dir = Path(tempfile.mkdtemp(prefix="tether-bench-chaos-"))
        self.stdout.write(f"chaos bench; logs in {log_dir}")
        doc = run_chaos(tasks=opts["tasks"] or (30 if cfg.quick else 1000),
                        kills=10 if opts["kills"] is None else opts["kills"],
                        workers=opts["workers"] or 3, seed=opts["seed"], log_dir=log_dir,
                        say=lambda line: self.stdout.write(line), network=opts["network"])
        self._figures(doc, cfg, chaos_table(doc), "chaos")

    def _figures(self, doc: dict, cfg: BenchConfig, table: str, workload: str, *,
                 judge: bool = True) -> None:
        """A one-workload run's figures: JSON if asked, the table, the verdict
        (unless not `judge`)."""
        if cfg.json_path:
            Path(cfg.json_path).write_text(json.dumps(doc, indent=2, default=str))
            self.stdout.write(f"figures written to {cfg.json_path}")
        self.stdout.write("")
        self.stdout.write(table)
        if judge and not doc["target_met"]:
            raise CommandError(f"the {workload} target was not met")

    def _in_bench_environment(self, opts: dict) -> None:
        url = opts["database_url"] or os.environ.get("BENCH_DATABASE_URL") or DEFAULT_DATABASE_URL
        _database_ensure(url)
        argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "bench"]
        for knob in KNOBS:
            if opts.get(knob) is not None:
                argv += [f"--{knob.replace('_', '-')}", str(opts[knob])]
        for flag in ("skip_console", "quick", "network"):
            if opts[flag]:
                argv.append(f"--{flag.replace('_', '-')}")
        if opts["json_path"]:
            argv += ["--json", str(Path(opts["json_path"]).resolve())]
        extra: dict[str, str] = {}
        if opts["io_tasks"]:
            argv += ["--io-tasks", opts["io_tasks"]]
        if opts["only"]:
            argv += ["--only", opts["only"]]
        if opts["only"] == "breaker":
            from benchmarks.breaker import ENV

            extra = ENV
        if opts["only"] == "rate_limit":
            from benchmarks.rate_limit import ENV as RATE_LIMIT_ENV

            extra = RATE_LIMIT_ENV
        for knob in ("outage_s", "kills", "seed", "period_s", "submissions", "batch_tasks",
                     "web_processes", "history_tasks", "history_events", "archive_tasks"):
            if opts[knob] is not None:
                argv += [f"--{knob.replace('_', '-')}", str(opts[knob])]
        done = subprocess.run(argv, env=bench_env(url, **extra), cwd=settings.BASE_DIR,
                              check=False)
        if done.returncode:
            raise CommandError(f"the bench failed (exit {done.returncode})")


def _database_ensure(url: str) -> None:
    """Create the bench's database if it does not exist (it is migrated by the bench)."""
    import psycopg
    from psycopg import sql

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    conninfo = psycopg.conninfo.make_conninfo(
        dbname="postgres",
        host=parsed.hostname or "127.0.0.1",
        port=str(parsed.port or 5432),
        user=unquote(parsed.username or "postgres"),
        **({"password": unquote(parsed.password)} if parsed.password else {}),
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _workload_arguments(parser) -> None:  # type: ignore[no-untyped-def]
    """The sizes and knobs of the workloads run alone (`--only`)."""
    parser.add_argument("--submissions", type=int,
                        help="the submit workload's single submissions (3000)")
    parser.add_argument("--batch-tasks", type=int,
                        help="the submit workload's tasks through the batch endpoint (10000)")
    parser.add_argument("--web-processes", type=int,
                        help="the submit workload's web processes (one per CPU)")
    parser.add_argument("--history-tasks", type=int,
                        help="the history workload's preloaded tasks (1000000)")
    parser.add_argument("--history-events", type=int,
                        help="the history workload's preloaded events (10000000)")
    parser.add_argument("--archive-tasks", type=int,
                        help="the history workload's tasks archived (2000)")
    parser.add_argument("--kills", type=int, help="the chaos workload's worker kills (10)")
    parser.add_argument("--seed", type=int, help="the chaos workload's random seed")
    parser.add_argument("--network", action="store_true",
                        help="the chaos workload's faults are the network's: its workers "
                             "through proxies adding 50 ms each way to PostgreSQL and Redis, "
                             "every connection cut twice for 5 s (target within 2x)")
    parser.add_argument("--outage-s", type=float, help="the breaker workload's outage (20)")
    parser.add_argument("--period-s", type=float,
                        help="the rate_limit workload's limit period, its 'minute' "
                             "(60; 10 with --quick)")
