"""The rate-limit benchmark (`manage.py bench --only rate_limit`): a model
endpoint's `tokens_per_minute` limit under a backlog of tasks, on real Celery
workers.

Every task asks an OpenAI-compatible model (a local server in this process)
once and ends with its answer. The server counts the tokens of each request as
a provider would bill them (the prompt at four characters a token, plus the
reply's) and keeps when each arrived.

1. Capacity: `min(tasks, 200)` tasks with no limit: the tokens per second the
   server was sent when nothing held the workers back: what it "could serve".
2. The limited run: `tasks` tasks submitted at once, the agent's
   `tokens_per_minute` set to a third of that capacity. The limit's minute is
   a minute (`period_s`, `TETHER_RATE_LIMIT_PERIOD_S`; shorter with --quick).

Figures: the tokens the server received in each full window of one period,
against the limit (the target: each within 5 %), and the drain rate (tasks
finished per second) against the rate the limit allows.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from tasks_app.machine import NON_TERMINAL, TaskStatus
from tasks_app.models import Task
from tasks_app.services.releases import agent_seed

from .config import bench_env, database_url_of
from .procs import celery_workers, purge_queue
from .tools import BENCH_TOOLS
from .world import BIG_BUDGET, World, world_ensure

AGENT = "bench-rate-limited"
MAX_TOKENS = 32
COMPLETION_TOKENS = 20
TARGET_PCT = 5.0
ENV = {"TETHER_MAX_RUNNING_PER_TENANT": "100000", "TETHER_MAX_RUNNING_TASKS": "100000",
       "TETHER_EGRESS_ALLOW": "127.0.0.1"}


class ModelServer:
    """Chat completions answered at once ("done"), each request's tokens kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, int]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                prompt = math.ceil(len(json.dumps([body.get("messages") or [],
                                                   body.get("tools") or []],
                                                  separators=(",", ":"))) / 4)
                server.record(prompt + COMPLETION_TOKENS)
                data = json.dumps({
                    "id": "bench", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "done"}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": COMPLETION_TOKENS,
                              "total_tokens": prompt + COMPLETION_TOKENS}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def record(self, tokens: int) -> None:
        with self.lock:
            self.seen.append((time.time(), tokens))

    def take(self) -> list[tuple[float, int]]:
        with self.lock:
            seen, self.seen = sorted(self.seen), []
        return seen

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _agent(world: World, base_url: str, tokens_per_minute: int | None) -> None:
    model: dict[str, Any] = {"backend": "openai", "name": "bench-model", "base_url": base_url,
                             "system_prompt": "You answer in one word.", "timeout_s": 30,
                             "max_retries": 2, "max_tokens": MAX_TOKENS}
    if tokens_per_minute:
        model["rate_limit"] = {"tokens_per_minute": tokens_per_minute}
    with transaction.atomic():
        agent_seed(tenant_id=world.tenant_id, name=AGENT, defaults={
            "description": "Benchmark agent: one model call under a rate limit.",
            "model": model, "tools": [BENCH_TOOLS[0]["name"]], "max_steps": BIG_BUDGET,
            "max_model_calls": BIG_BUDGET, "max_tool_calls": BIG_BUDGET,
            "max_tokens": 2_000_000_000, "max_duration_s": 86_400,
            "max_concurrent_tasks": BIG_BUDGET, "on_exhaustion": "fail"})


def run_rate_limit(*, tasks: int, period_s: float, workers: int, log_dir: Path,
                   say: Callable[[str], None]) -> dict[str, Any]:
    env = bench_env(database_url_of(connection.settings_dict), **ENV,
                    TETHER_RATE_LIMIT_PERIOD_S=str(period_s))
    server = ModelServer()
    world = world_ensure()
    purge_queue()
    try:
        with celery_workers(env, concurrency=workers, log_dir=log_dir):
            baseline_n = min(tasks, 200)
            say(f"rate limit: capacity, {baseline_n} tasks with no limit ...")
            _agent(world, server.base_url, None)
            base = _run(world, baseline_n, server)
            capacity_per_s = base["tokens"] / max(base["sending_s"], 1e-3)
            limit = max(1, int(capacity_per_s * period_s / 3))
            say(f"rate limit: {tasks} tasks, {limit} tokens per {period_s:g} s "
                f"(a third of {capacity_per_s * period_s:.0f}) ...")
            _agent(world, server.base_url, limit)
            run = _run(world, tasks, server)
    finally:
        server.close()
    return _figures(run, base, limit=limit, period_s=period_s, workers=workers,
                    capacity_per_s=capacity_per_s)


def _run(world: World, n: int, server: ModelServer) -> dict[str, Any]:
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    server.take()
    started = time.time()
    with transaction.atomic():
        ids = [task_submit(tenant_id=world.tenant_id, requester_id=world.user_id, agent=AGENT,
                           goal=f"question {i}", input={}, script=None, actor=SYSTEM).task.pk
               for i in range(n)]
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline and Task.objects.filter(
            pk__in=ids, status__in=NON_TERMINAL).exists():
        time.sleep(0.25)  # the bench's own pace of polling, not a synchronisation
    seen = server.take()
    finished = list(Task.objects.filter(pk__in=ids).exclude(finished_at=None)
                    .order_by("finished_at").values_list("finished_at", flat=True))
    statuses = Counter(Task.objects.filter(pk__in=ids).values_list("status", flat=True))
    return {"tasks": n, "seen": seen, "started": started,
            "tokens": sum(t for _, t in seen),
            "sending_s": (seen[-1][0] - seen[0][0]) if len(seen) > 1 else 0.0,
            "succeeded": statuses.get(TaskStatus.SUCCEEDED, 0),
            "other_statuses": {s: c for s, c in statuses.items() if s != TaskStatus.SUCCEEDED},
            "finished": [f.timestamp() for f in finished if f is not None]}


def _figures(run: dict[str, Any], base: dict[str, Any], *, limit: int, period_s: float,
             workers: int, capacity_per_s: float) -> dict[str, Any]:
    seen = run["seen"]
    first = seen[0][0] if seen else 0.0
    last = seen[-1][0] if seen else 0.0
    full = int((last - first) // period_s)  # the last window, partly empty, is left out
    windows = [sum(t for at, t in seen if first + k * period_s <= at < first + (k + 1) * period_s)
               for k in range(full)]
    deviations = [100.0 * (w - limit) / limit for w in windows]
    per_task = run["tokens"] / max(1, len(seen))
    allowed_tasks_per_s = limit / period_s / per_task if per_task else 0.0
    done = run["finished"]
    drain_s = (done[-1] - first) if done and seen else 0.0
    doc: dict[str, Any] = {
        "tasks": run["tasks"], "workers": workers, "period_s": period_s,
        "capacity_tokens_per_period": round(capacity_per_s * period_s),
        "capacity_tasks": base["tasks"], "capacity_run_s": round(base["sending_s"], 2),
        "limit_tokens_per_period": limit,
        "tokens_per_call": round(per_task, 1),
        "reserved_per_call": round(per_task - COMPLETION_TOKENS + MAX_TOKENS, 1),
        "windows": windows,
        "window_deviation_pct": [round(d, 2) for d in deviations],
        "max_abs_deviation_pct": round(max((abs(d) for d in deviations), default=0.0), 2),
        "calls": len(seen),
        "succeeded": run["succeeded"], "other_statuses": run["other_statuses"],
        "drain_tasks_per_s": round(len(done) / drain_s, 2) if drain_s else 0.0,
        "allowed_tasks_per_s": round(allowed_tasks_per_s, 2),
        "drain_s": round(drain_s, 2),
        "tokens_per_s_sent": round(run["tokens"] / max(last - first, 1e-3), 1),
    }
    doc["drain_vs_allowed_pct"] = (round(100.0 * doc["drain_tasks_per_s"] / allowed_tasks_per_s, 1)
                                   if allowed_tasks_per_s else 0.0)
    doc["target_met"] = (bool(windows) and doc["max_abs_deviation_pct"] <= TARGET_PCT
                         and doc["succeeded"] == run["tasks"])
    return doc


def rate_limit_table(doc: dict[str, Any]) -> str:
    per_window = ", ".join(f"{w} ({d:+.1f}%)" for w, d in zip(
        doc["windows"], doc["window_deviation_pct"], strict=True))
    rows = [
        ("tasks / workers", f"{doc['tasks']} / {doc['workers']}"),
        ("the limit's minute", f"{doc['period_s']:g} s (TETHER_RATE_LIMIT_PERIOD_S)"),
        ("capacity (no limit)", f"{doc['capacity_tokens_per_period']} tokens per period "
                                f"({doc['capacity_tasks']} tasks sent in "
                                f"{doc['capacity_run_s']} s)"),
        ("limit (a third)", f"{doc['limit_tokens_per_period']} tokens per period"),
        ("tokens per call", f"{doc['tokens_per_call']} used, {doc['reserved_per_call']} "
                            f"reserved (max_tokens {MAX_TOKENS})"),
        ("tokens sent per window", per_window or "none (the run was shorter than a window)"),
        ("worst window vs limit", f"{doc['max_abs_deviation_pct']}% (target <= {TARGET_PCT:g}%)"),
        ("drain rate", f"{doc['drain_tasks_per_s']} tasks/s; the limit allows "
                       f"{doc['allowed_tasks_per_s']} ({doc['drain_vs_allowed_pct']}%), "
                       f"{doc['drain_s']} s for all"),
        ("succeeded", f"{doc['succeeded']} of {doc['tasks']} {doc['other_statuses'] or ''}"),
        ("target (every window within 5%, all succeed)",
         "met" if doc["target_met"] else "NOT MET"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
