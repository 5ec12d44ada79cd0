"""The benchmark's knobs, and the environment of the processes it starts.

The bench always runs in production mode: PostgreSQL, a Redis broker with its
own queue, the Redis channel layer. `bench_env` builds that environment for
the bench process itself (the management command re-executes itself in it)
and for the Celery workers and daphne it starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/tether_bench"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/7"
DEFAULT_CHANNEL_LAYER_URL = "redis://127.0.0.1:6379/6"
QUEUE = "tether-bench"
CHILD_FLAG = "TETHER_BENCH_CHILD"


@dataclass(frozen=True)
class BenchConfig:
    tasks: int = 200
    steps: int = 10
    # The runner and the floor are measured alternately this many times and their
    # medians compared: on a shared machine one measurement of each can be luck.
    rounds: int = 3
    long_steps: int = 1000
    # One worker process per CPU, plus one: a worker waits on its commits about a
    # third of a step, and the extra process uses that time (measured on 2 vCPUs:
    # 3 processes do 12-40 % more steps/s than 2; 4 no more than 3).
    workers: int = field(default_factory=lambda: (os.cpu_count() or 2) + 1)
    ws_steps: int = 1000
    ws_rate: float = 100.0
    console_tasks: int = 100_000
    console_events: int = 1_000_000
    console_requests: int = 30
    waiting_tasks: int = 50
    skip_console: bool = False
    json_path: str = ""
    quick: bool = False
    # The I/O workload (`io_load`), reported first: its sizes, and "io" in `only`
    # to run nothing else.
    io_tasks: tuple[int, ...] = (200, 1000)
    # The workflow workload (`workflow_load`): runs with the 0.2 s tool, and as
    # many with instant tools beside the scripted workload; "workflow" in `only`
    # to run nothing else.
    workflow_runs: int = 500
    only: str = ""

    @classmethod
    def quick_defaults(cls, **overrides: Any) -> BenchConfig:
        """Small sizes for a smoke run: every figure, none of them meaningful."""
        base = cls(
            tasks=8,
            steps=4,
            rounds=1,
            long_steps=40,
            workers=2,
            ws_steps=40,
            console_tasks=2000,
            console_events=20_000,
            console_requests=3,
            waiting_tasks=3,
            io_tasks=(20,),
            workflow_runs=6,
            quick=True,
        )
        return replace(base, **overrides)


def database_url_of(settings_dict: dict[str, Any]) -> str:
    """A postgres:// URL for the database Django is connected to."""
    user = quote(settings_dict.get("USER") or "postgres")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password)}" if password else user
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or "5432"
    return f"postgres://{auth}@{host}:{port}/{settings_dict['NAME']}"


def psycopg_dsn(settings_dict: dict[str, Any]) -> str:
    parts = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict.get("USER") or "postgres",
        "host": settings_dict.get("HOST") or "127.0.0.1",
        "port": str(settings_dict.get("PORT") or "5432"),
    }
    if settings_dict.get("PASSWORD"):
        parts["password"] = settings_dict["PASSWORD"]
    return " ".join(f"{k}={v}" for k, v in parts.items())


def bench_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of the bench process and of everything it starts."""
    env = dict(os.environ)
    env.update(
        {
            # the product's settings (manage.py swaps in benchmarks.settings for
            # the bench command's own re-execution)
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER_URL),
            "CHANNEL_LAYER_URL": os.environ.get(
                "BENCH_CHANNEL_LAYER_URL", DEFAULT_CHANNEL_LAYER_URL
            ),
            "CELERY_QUEUE": QUEUE,
            "TETHER_RUNNER": "celery",
            "DEBUG": "false",
            "TETHER_HTTPS": "false",  # its daphne serves plain HTTP on loopback
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            # the I/O workload's fake model and tool listen on loopback
            "TETHER_EGRESS_ALLOW": "127.0.0.1",
            CHILD_FLAG: "1",
        }
    )
    env.update(extra)
    return env
