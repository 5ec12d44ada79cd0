"""API submission at scale: where a single submission's time goes, how many
single submissions the web tier takes from 16 concurrent clients while the
worker runs the I/O workload, and 10,000 tasks through the batch endpoint.

1. `anatomy`: submissions through the whole Django stack in this process
   (`django.test.Client`: middleware, token authentication, the view, the
   commit, admission and the enqueue after it, the rendering), under
   cProfile; the time per submission split by part (authentication,
   validation, the idempotency check, the insert, admission and the enqueue,
   the rendering of the answer), and the CPU of this process against the
   wall time (what is not CPU here is waiting: on PostgreSQL, Redis).
2. `concurrent`: the web server started as docs/how-to/deploy.md says
   (`--web-processes` of them behind one port), the worker as it says, 200
   I/O tasks running (`io_load`), and 16 client threads each submitting one
   scripted task after another with an Idempotency-Key; submissions/s over the
   window and the latency's p50 and p99 as the clients saw it.
3. `batch`: 10,000 tasks in batches of 1,000 (`POST /api/v1/tasks/batch`),
   one after another, on the same server: the wall time.
"""
from __future__ import annotations

import cProfile
import pstats
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import api_key_create, user_ensure
from foundations.actors import SYSTEM
from tasks_app.models import Task
from tasks_app.services.tasks import task_submit

from .io_load import (
    IO_AGENT,
    admit_all,
    edge_process,
    io_world_ensure,
    readme_worker,
    roomy_admission,
)
from .procs import BIN, free_port, http_server
from .world import AGENT, World, cancel_open

CLIENTS = 16
BATCH = 1000
BODY = {"agent": AGENT, "goal": "bench submission", "input": {"n": 1},
        "script": [{"final": {"ok": True}}]}

# What each part of a submission is, by the functions that do it (cProfile's
# cumulative time of the outermost call of each).
PARTS = {
    "authentication": ("rest_framework/request.py", "_authenticate"),
    "validation": ("foundations/api_base.py", "validated"),
    "idempotency check": ("tasks_app/services/tasks.py", "earlier_submission"),
    "spend check": ("tasks_app/services/quotas.py", "spend_refusal"),
    "agent and version": ("tasks_app/services/agent_versions.py", "version_for_submission"),
    "insert": ("tasks_app/store/creation.py", "task_create"),
    "commit": ("django/db/backends/base/base.py", "commit"),
    "admission and enqueue": ("tasks_app/services/admission.py", "admit_created_tasks"),
    "rendering": ("tasks_app/api/views.py", "render_task"),
}


def run_submit_phase(world: World, env: dict[str, str], *, submissions: int, batch_tasks: int,
                     web_processes: int, log_dir: Any, say: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, _edge_pid):
        io_world_ensure(world, edge_url)
        key = submitter_key(world)
        keys = [submitter_key(world, n) for n in range(CLIENTS)]
        say("  anatomy of a submission (in this process, cProfile) ...")
        doc["anatomy"] = anatomy(key, n=min(submissions, 300), dump=log_dir / "submission.prof")
        a = doc["anatomy"]
        say(f"    {a['ms_per_submission']} ms per submission, {a['cpu_ms_per_submission']} ms "
            f"of it CPU in this process, {a['statements_per_submission']} statements; "
            "profiled, ms: " + ", ".join(f"{k} {v}" for k, v in a["parts_ms"].items()))
        with readme_worker({**env, **roomy}, log_dir=log_dir), \
                web_server({**env, **roomy}, processes=web_processes,
                           log_dir=log_dir) as base:
            _submit_over_http(base, keys, n=50, clients=4)  # warm every process
            io_ids = _io_tasks(world, 200)
            say(f"  {CLIENTS} clients, {submissions} single submissions while 200 I/O tasks "
                f"run ({web_processes} web process(es)) ...")
            doc["concurrent"] = _submit_over_http(base, keys, n=submissions, clients=CLIENTS)
            doc["concurrent"]["io_tasks_running_at_end"] = Task.objects.filter(
                pk__in=io_ids, status="RUNNING").count()
            c = doc["concurrent"]
            say(f"    {c['per_s']} submissions/s, p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms "
                f"({c['errors']} errors)")
            cancel_open(world, io_ids)
            say(f"  batch: {batch_tasks} tasks in batches of {BATCH} ...")
            doc["batch"] = _batches(base, key, tasks=batch_tasks)
            say(f"    {doc['batch']['wall_s']} s ({doc['batch']['tasks_per_s']} tasks/s)")
        doc["web_processes"] = web_processes
    return doc


def submitter_key(world: World, n: int = 0) -> str:
    """An API key of a requester of the bench's tenant (the bench's own user
    operates): one per client, as each client of a deployment has its own (and
    the API's throttle, `API_THROTTLE_RATE`, is per key)."""
    tenant = Tenant.objects.get(pk=world.tenant_id)
    user = user_ensure(tenant=tenant, username=f"bench-submitter-{n}", role=Role.REQUESTER,
                       password=uuid.uuid4().hex)
    return api_key_create(user=user)


def anatomy(key: str, *, n: int, dump: Any = None) -> dict[str, Any]:
    """`n` submissions through the Django stack in this process, under cProfile."""
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")
    for _ in range(20):  # warm: imports, prepared statements, the connection
        _post(client)
    # Without the profiler: the time and CPU per submission, and its statements.
    wall, cpu = time.perf_counter(), time.process_time()
    with CaptureQueriesContext(connection) as statements:
        for _ in range(n):
            _post(client)
    plain = {"ms_per_submission": round((time.perf_counter() - wall) / n * 1000, 2),
             "cpu_ms_per_submission": round((time.process_time() - cpu) / n * 1000, 2),
             "statements_per_submission": round(len(statements.captured_queries) / n, 1)}
    profile = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    profile.enable()
    for _ in range(n):
        _post(client)
    profile.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if dump:
        profile.dump_stats(dump)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    parts = {}
    for part, (path, name) in PARTS.items():
        cumulative = sum(v[3] for (file, _line, func), v in stats.items()
                         if func == name and file.endswith(path))
        parts[part] = round(cumulative / n * 1000, 2)
    return {"submissions": n, **plain,
            # under cProfile, whose own overhead inflates both: the parts' shares matter
            "profiled_ms_per_submission": round(wall / n * 1000, 2),
            "profiled_cpu_ms_per_submission": round(cpu / n * 1000, 2),
            "parts_ms": parts}


def _post(client: Client) -> None:
    response = client.post("/api/v1/tasks", BODY, content_type="application/json",
                           HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert response.status_code == 201, response.content


def _io_tasks(world: World, n: int) -> list[int]:
    with transaction.atomic():
        ids = [task_submit(tenant_id=world.tenant_id, requester_id=world.user_id,
                           agent=IO_AGENT, goal=f"bench io {i}", input={}, script=None,
                           actor=SYSTEM).task.pk for i in range(n)]
    admit_all()
    return ids


def _submit_over_http(base: str, keys: list[str], *, n: int, clients: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    per_client = n // clients

    def client_loop(key: str) -> None:
        with httpx.Client(base_url=base, timeout=30.0,
                          headers={"Authorization": f"Token {key}"}) as http:
            for _ in range(per_client):
                t0 = time.perf_counter()
                response = http.post("/api/v1/tasks", json=BODY,
                                     headers={"Idempotency-Key": uuid.uuid4().hex})
                took = time.perf_counter() - t0
                with lock:
                    latencies.append(took)
                    if response.status_code != 201:
                        errors.append(response.status_code)

    threads = [threading.Thread(target=client_loop, args=(keys[i],)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"submissions": len(latencies), "clients": clients, "wall_s": round(wall, 2),
            "per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
            "errors": len(errors)}


def _batches(base: str, key: str, *, tasks: int) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    bodies = [{"tasks": [{**BODY, "idempotency_key": f"batch-{run}-{i}"}
                         for i in range(start, min(tasks, start + BATCH))]}
              for start in range(0, tasks, BATCH)]
    with httpx.Client(base_url=base, timeout=120.0,
                      headers={"Authorization": f"Token {key}"}) as http:
        started = time.perf_counter()
        for body in bodies:
            response = http.post("/api/v1/tasks/batch", json=body)
            assert response.status_code == 201, response.text[:500]
        wall = time.perf_counter() - started
    return {"tasks": tasks, "batches": len(bodies), "wall_s": round(wall, 2),
            "tasks_per_s": round(tasks / wall, 1)}


@contextmanager
def web_server(env: dict[str, str], *, processes: int, log_dir: Any) -> Iterator[str]:
    """The ASGI application as docs/how-to/deploy.md starts it: uvicorn with
    `processes` workers on one port; yields its base URL."""
    port = free_port()
    with http_server([str(BIN / "uvicorn"), "config.asgi:application", "--host", "127.0.0.1",
                      "--port", str(port), "--workers", str(processes), "--no-access-log",
                      "--log-level", "warning"], env, port=port, what="web",
                     log_dir=log_dir) as base:
        yield base


def submit_table(doc: dict[str, Any]) -> str:
    a, c, b = doc["anatomy"], doc["concurrent"], doc["batch"]
    lines = [
        f"API submission ({doc['web_processes']} web process(es), uvicorn):",
        f"  one submission in-process: {a['ms_per_submission']} ms "
        f"({a['cpu_ms_per_submission']} ms CPU, {a['statements_per_submission']} statements), "
        "by part (cProfile, ms): "
        + ", ".join(f"{k} {v}" for k, v in a["parts_ms"].items()),
        f"  {c['clients']} clients, {c['submissions']} submissions while the I/O workload "
        f"runs: {c['per_s']}/s (target >= 300), p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms "
        f"(target < 100), {c['errors']} errors",
        f"  {b['tasks']:,} tasks through the batch endpoint: {b['wall_s']} s (target < 10)",
    ]
    return "\n".join(lines)

