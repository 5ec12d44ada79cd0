"""The breaker benchmark (`manage.py bench --only breaker`): a downstream outage
of `outage_s` seconds under `tasks` running tasks, on real Celery workers.

Every task calls one http tool (`bench_outage`, a read) once and ends. The
downstream, a local HTTP server in this process, answers 503 from its first
call for `outage_s` seconds, then 200. Figures: the calls the downstream
received (in all, during the outage, while the breaker was open, per task
while it was open), the breaker's openings, how many tasks succeeded, and how
long after the outage's end the last one finished, beside a baseline run of the
same tasks with a healthy downstream. The target: at most 2 calls
per task while the breaker is open, and every task succeeds.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from tasks_app.machine import NON_TERMINAL, TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services.releases import agent_seed
from tools_app.models import Breaker, Tool

from .config import bench_env, database_url_of
from .procs import celery_workers, purge_queue
from .world import BIG_BUDGET, World, world_ensure

TOOL = "bench_outage"
AGENT = "bench-outage"
BREAKER = {"failures": 5, "cooldown_s": 2.0, "max_cooldown_s": 8.0}
# The tasks must all run at once: the bench's processes get these limits.
ENV = {"TETHER_MAX_RUNNING_PER_TENANT": "100000", "TETHER_MAX_RUNNING_TASKS": "100000",
       "TETHER_EGRESS_ALLOW": "127.0.0.1"}


class Downstream:
    """503 for `outage_s` from the first call, then 200; every call kept."""

    def __init__(self, outage_s: float) -> None:
        self.outage_s = outage_s
        self.first: float | None = None
        self.calls: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                down = downstream.record(self.headers.get("X-Tether-Task", ""))
                body = json.dumps({"error": "down"} if down else {"ok": True}).encode()
                self.send_response(503 if down else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/outage"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, task: str) -> bool:
        now = time.time()
        with self.lock:
            self.first = self.first or now
            self.calls.append((now, task))
            return now < self.first + self.outage_s

    @property
    def ends_at(self) -> float:
        return (self.first or time.time()) + self.outage_s

    def between(self, start: float, end: float) -> Counter[str]:
        with self.lock:
            return Counter(task for at, task in self.calls if start <= at <= end)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _world(url: str) -> World:
    world = world_ensure()
    with transaction.atomic():
        Tool.objects.update_or_create(tenant_id=world.tenant_id, name=TOOL, defaults={
            "kind": "http", "url": url, "side_effect": "read", "timeout_s": 5.0,
            "max_retries": 10, "retry_delays_s": [0.5], "breaker": BREAKER,
            "args_schema": {"type": "object"}, "description": "A downstream with an outage."})
        agent_seed(tenant_id=world.tenant_id, name=AGENT, defaults={
            "description": "Benchmark agent: one call to a downstream with an outage.",
            "model": {"backend": "scripted", "name": "scripted", "system_prompt": ""},
            "tools": [TOOL], "max_steps": BIG_BUDGET, "max_model_calls": BIG_BUDGET,
            "max_tool_calls": BIG_BUDGET, "max_tokens": 2_000_000_000,
            "max_duration_s": 86_400, "max_concurrent_tasks": BIG_BUDGET,
            "on_exhaustion": "fail"})
    # A breaker left by an earlier run starts closed: this run measures its own.
    Breaker.objects.filter(tenant_id=world.tenant_id, kind="tool", name=TOOL).delete()
    return world


def run_breaker(*, tasks: int, outage_s: float, workers: int, log_dir: Path,
                say: Callable[[str], None]) -> dict[str, Any]:
    """The same tasks twice on the same workers: with a healthy downstream (the
    baseline), then with the outage."""
    env = bench_env(database_url_of(connection.settings_dict), **ENV)
    purge_queue()
    with celery_workers(env, concurrency=workers, log_dir=log_dir):
        say(f"breaker: baseline, {tasks} tasks, no outage ...")
        baseline, _ = _phase(tasks, 0.0)
        say(f"breaker: {tasks} tasks, a downstream outage of {outage_s:g} s ...")
        doc, downstream = _phase(tasks, outage_s)
    doc["baseline_run_s"] = baseline["run_s"]
    doc["baseline_calls"] = baseline["calls_total"]
    doc["workers"] = workers
    return doc


def _phase(tasks: int, outage_s: float) -> tuple[dict[str, Any], Downstream]:
    downstream = Downstream(outage_s)
    try:
        world = _world(downstream.url)
        started = time.time()
        ids = [_submit(world, n) for n in range(tasks)]
        deadline = time.monotonic() + outage_s + 300
        while time.monotonic() < deadline and Task.objects.filter(
                pk__in=ids, status__in=NON_TERMINAL).exists():
            time.sleep(0.2)  # the bench's own pace of polling, not a synchronisation
        finished = time.time()
        return _figures(world, ids, downstream, started=started, finished=finished,
                        outage_s=outage_s), downstream
    finally:
        downstream.close()


def _submit(world: World, n: int) -> int:
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    return task_submit(tenant_id=world.tenant_id, requester_id=world.user_id, agent=AGENT,
                       goal=f"outage {n}", input={}, actor=SYSTEM,
                       script=[{"tool": TOOL, "args": {"n": n}}, {"final": {"n": n}}]).task.pk


def _figures(world: World, ids: list[int], downstream: Downstream, *, started: float,
             finished: float, outage_s: float) -> dict[str, Any]:
    statuses = Counter(Task.objects.filter(pk__in=ids).values_list("status", flat=True))
    breaker = Breaker.objects.filter(tenant_id=world.tenant_id, kind="tool", name=TOOL).first()
    opened = (Event.objects.filter(task_id__in=ids, type="breaker_opened").order_by("id")
              .values_list("created_at", flat=True).first())
    ends = downstream.ends_at
    while_open = downstream.between(opened.timestamp(), ends) if opened else Counter()
    per_task = [while_open.get(str(i), 0) for i in ids]
    last_done = (Task.objects.filter(pk__in=ids).order_by("-finished_at")
                 .values_list("finished_at", flat=True).first())
    waited = Event.objects.filter(task_id__in=ids, type="breaker_waiting").count()
    woken = Event.objects.filter(task_id__in=ids, type="breaker_closed").count()
    doc: dict[str, Any] = {
        "tasks": len(ids), "outage_s": outage_s, "breaker": BREAKER,
        "succeeded": statuses.get(TaskStatus.SUCCEEDED, 0),
        "other_statuses": {s: n for s, n in statuses.items() if s != TaskStatus.SUCCEEDED},
        "calls_total": len(downstream.calls),
        "calls_during_outage": sum(downstream.between(downstream.first or 0, ends).values()),
        "calls_while_open": sum(while_open.values()),
        "max_calls_per_task_while_open": max(per_task, default=0),
        "tasks_over_2_calls_while_open": sum(1 for n in per_task if n > 2),
        "opened_s_after_outage_start": round(opened.timestamp() - (downstream.first or 0), 2)
        if opened else None,
        "breaker_openings": breaker.opened_count if breaker else 0,
        "breaker_state_at_end": breaker.state if breaker else "closed",
        "tasks_that_waited": waited, "tasks_woken_on_close": woken,
        "last_task_done_s_after_outage": round(last_done.timestamp() - ends, 2)
        if last_done else None,
        "run_s": round(finished - started, 2),
    }
    doc["target_met"] = (doc["max_calls_per_task_while_open"] <= 2
                         and doc["succeeded"] == len(ids))
    return doc


def breaker_table(doc: dict[str, Any]) -> str:
    rows = [
        ("tasks / workers", f"{doc['tasks']} / {doc['workers']}"),
        ("outage", f"{doc['outage_s']:g} s of 503 from the first call"),
        ("breaker", json.dumps(doc["breaker"])),
        ("breaker opened after", f"{doc['opened_s_after_outage_start']} s, "
                                 f"{doc['breaker_openings']} openings (probes that failed + 1)"),
        ("downstream calls", f"{doc['calls_total']} in all, {doc['calls_during_outage']} during "
                             f"the outage, {doc['calls_while_open']} while the breaker was open"),
        ("calls per task while open", f"max {doc['max_calls_per_task_while_open']} "
                                      f"({doc['tasks_over_2_calls_while_open']} tasks over 2)"),
        ("tasks that waited / woken", f"{doc['tasks_that_waited']} / "
                                      f"{doc['tasks_woken_on_close']}"),
        ("succeeded", f"{doc['succeeded']} of {doc['tasks']} {doc['other_statuses'] or ''}"),
        ("last task done", f"{doc['last_task_done_s_after_outage']} s after the outage ended"),
        ("run (outage) / baseline", f"{doc['run_s']} s / {doc['baseline_run_s']} s without "
                                    f"an outage ({doc['baseline_calls']} calls)"),
        ("target (<= 2 calls/task while open, all succeed)",
         "met" if doc["target_met"] else "NOT MET"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
