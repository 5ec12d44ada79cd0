"""Event -> browser latency on the console's live channel.

Producers in this process commit steps at a steady total rate, each through
`task_transition(step_succeeded)`: the same event row and the same on-commit
publication (Redis channel layer, the task's and the tenant's groups) as a
runner step (whose commit on PostgreSQL is the store's one statement,
`store.commits.commit_outcome`). The rate is spread over as few producer
threads as can keep it (each paced at half of what one thread manages,
probed first), each with its own task and database connection. A WebSocket client in its
own process subscribes to those tasks through daphne (session cookie,
`/ws/live/`).

What is measured, precisely:
- `commit_to_browser`: from `time.time()` taken in an on-commit hook
  registered *before* the event's own publication hook in the same
  transaction (Django runs on-commit hooks in order, right after COMMIT
  returns) to `time.time()` in the client when the message is handed to it.
  One machine, one clock. With more than one producer thread, a thread may
  wait for the GIL before its hook runs (the switch interval is lowered to
  1 ms meanwhile), which can only make this figure smaller than the truth, by
  at most that wait. The target is checked against this figure;
- `created_at_to_browser`: from the event's `created_at`, stamped inside the
  transaction before COMMIT, to the same arrival: an upper bound of the true
  commit -> browser time (it includes the rest of the transaction, COMMIT's
  WAL flush among it).

The producers hold the tasks' leases, so no worker advances them meanwhile.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from foundations.actors import Actor
from tasks_app.models import Task
from tasks_app.store.leases import lease_extend, lease_take
from tasks_app.store.tasks import task_transition

from .config import BenchConfig
from .procs import BASE_DIR
from .stats import summary_ms
from .world import World, cancel_open, submit_running

OWNER = "bench-ws-producer"
PROBE_COMMITS = 30
HEADROOM = 0.5  # a producer thread is paced at no more than half of what it can do


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            return proc.stdout.readline().decode().strip()
        if proc.poll() is not None:
            return ""
    return ""


def _stamp(box: dict[str, float]) -> None:
    box["t"] = time.time()


def _produce(
    task_id: int,
    seqs: list[int],
    *,
    period: float,
    start: float,
    commits: dict[int, float],
    errors: list[str],
) -> None:
    """Commit one step per seq of `seqs`, each due at `start + (seq - 1) * period`."""
    actor = Actor.worker(OWNER)
    try:
        version = Task.objects.only("version").get(pk=task_id).version
        last_extend = time.perf_counter()
        for seq in seqs:
            pause = start + (seq - 1) * period - time.perf_counter()
            if pause > 0:
                time.sleep(pause)  # pacing the producer to the target rate
            stamp: dict[str, float] = {}
            with transaction.atomic():
                # Registered before the event's publication hook, so it runs first after COMMIT.
                transaction.on_commit(partial(_stamp, stamp))
                done = task_transition(
                    task_id=task_id,
                    event="step_succeeded",
                    actor=actor,
                    expected_version=version,
                    payload={"step_no": seq, "bench_seq": seq},
                )
            commits[seq] = stamp["t"]
            version = done.version
            if time.perf_counter() - last_extend > 5:
                lease_extend(task_id=task_id, owner=OWNER)
                last_extend = time.perf_counter()
        task_transition(
            task_id=task_id,
            event="final_accepted",
            actor=actor,
            expected_version=version,
            fields={"result": {"ws": True}},
            payload={},
        )
    except Exception as exc:  # noqa: BLE001 - reported in the figures
        errors.append(f"task {task_id}: {type(exc).__name__}: {exc}")
    finally:
        connection.close()


def _single_thread_rate(world: World) -> float:
    """Commits (with their publication) per second one producer thread manages, unpaced."""
    task_id = submit_running(world, [{"final": {"probe": True}}], goal="bench websocket probe")
    actor = Actor.worker(OWNER)
    try:
        if not lease_take(task_id=task_id, owner=OWNER):
            return 50.0
        version = Task.objects.only("version").get(pk=task_id).version
        started = time.perf_counter()
        for n in range(PROBE_COMMITS):
            version = task_transition(
                task_id=task_id,
                event="step_succeeded",
                actor=actor,
                expected_version=version,
                payload={"probe": n},
            ).version
        return PROBE_COMMITS / (time.perf_counter() - started)
    finally:
        cancel_open(world, [task_id])


def run_ws_latency(
    world: World, cfg: BenchConfig, *, base_url: str, cookie: str, log_dir: Path
) -> dict[str, Any]:
    capacity = _single_thread_rate(world)
    producers = max(1, math.ceil(cfg.ws_rate / (capacity * HEADROOM)))
    task_ids = [
        submit_running(world, [{"final": {"ws": True}}], goal="bench websocket latency")
        for _ in range(producers)
    ]
    if not all(lease_take(task_id=t, owner=OWNER) for t in task_ids):
        cancel_open(world, task_ids)
        return {"error": "a latency task was not RUNNING or its lease was taken"}
    out = log_dir / f"ws-arrivals-{task_ids[0]}.json"
    client = _client(cfg, base_url=base_url, cookie=cookie, task_ids=task_ids, out=out)
    commits: dict[int, float] = {}
    errors: list[str] = []
    switch = sys.getswitchinterval()
    try:
        if _read_line(client, 30) != "READY":
            return {"error": "the WebSocket client did not subscribe (see the daphne log)"}
        sys.setswitchinterval(0.001)
        produce_s = _produce_all(cfg, task_ids, commits=commits, errors=errors)
        try:
            client.wait(timeout=60)
        except subprocess.TimeoutExpired:
            client.kill()
    finally:
        sys.setswitchinterval(switch)
        if client.poll() is None:
            client.kill()
            client.wait(5)
        cancel_open(world, task_ids)
    if not out.exists():
        return {"error": "the WebSocket client wrote no result", "producer_errors": errors}
    return {
        "task_ids": task_ids,
        "producers": producers,
        "producer_capacity_per_s": round(capacity, 1),
        "steps": cfg.ws_steps,
        "committed": len(commits),
        "target_rate": cfg.ws_rate,
        "achieved_rate": round(len(commits) / produce_s, 1),
        "producer_errors": errors[:5],
        **_arrivals(json.loads(out.read_text()), commits),
    }


def _client(cfg: BenchConfig, *, base_url: str, cookie: str, task_ids: list[int],
            out: Path) -> subprocess.Popen:
    """The WebSocket client, in its own process, subscribed to `task_ids`; it
    prints READY once subscribed and writes what arrived, and when, to `out`."""
    host = base_url.split("://", 1)[1]
    return subprocess.Popen(
        [
            sys.executable, "-m", "benchmarks.ws_client",
            "--url", f"ws://{host}/ws/live/",
            "--origin", base_url,
            "--cookie", f"sessionid={cookie}",
            "--tasks", ",".join(map(str, task_ids)),
            "--count", str(cfg.ws_steps),
            "--out", str(out),
            "--timeout", str(cfg.ws_steps / cfg.ws_rate + 60),
        ],
        cwd=BASE_DIR,
        stdout=subprocess.PIPE,
        env={**os.environ},
    )


def _produce_all(cfg: BenchConfig, task_ids: list[int], *, commits: dict[int, float],
                 errors: list[str]) -> float:
    """`cfg.ws_steps` commits at `cfg.ws_rate`, spread over one thread per task;
    returns the seconds they took."""
    producers = len(task_ids)
    start = time.perf_counter() + 0.05
    threads = [
        threading.Thread(
            target=_produce,
            args=(task_id, list(range(i + 1, cfg.ws_steps + 1, producers))),
            kwargs={"period": 1.0 / cfg.ws_rate, "start": start, "commits": commits,
                    "errors": errors},
            name=f"bench-ws-producer-{i}",
        )
        for i, task_id in enumerate(task_ids)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _arrivals(received: dict[str, Any], commits: dict[int, float]) -> dict[str, Any]:
    """The client's arrivals against the commits' times."""
    arrivals = {int(k): v for k, v in received["arrivals"].items()}
    from_commit = [arrivals[s]["at"] - t for s, t in commits.items() if s in arrivals]
    from_created = [
        arrivals[s]["at"] - datetime.fromisoformat(arrivals[s]["created_at"]).timestamp()
        for s in commits
        if s in arrivals and arrivals[s]["created_at"]
    ]
    return {
        "received": len(arrivals),
        "lost": len([s for s in commits if s not in arrivals]),
        "commit_to_browser": summary_ms(from_commit),
        "created_at_to_browser": summary_ms(from_created),
        "client_errors": received["errors"][:5],
    }
