"""The I/O workload: tasks that wait on a model and on an HTTP tool, as real
agent work does, through the worker started exactly as docs/how-to/deploy.md says.

Each task asks an OpenAI-compatible model (the `openai` backend) five times
and calls an HTTP tool four times; both are the fake edge (`edge_server`, a
process of its own) answering any number of calls at once after a set
latency (0.5 s for the model, 0.2 s for the tool), with usage in every
answer. The ideal wall time is one task's critical path: 5 x 0.5 + 4 x 0.2 =
3.3 s, whatever the number of tasks.

Per run (N tasks): the wall time (first task started to last finished), its
ratio to the ideal, the model and tool calls in flight at the peak (counted
by the edge), steps/s, CPU per step by process (the worker's pool processes
and its consumer, PostgreSQL, Redis, the edge), and the worker's memory (the
largest sum of its processes' RSS while the tasks ran).

Then the comparison that says what waiting costs (`compare`): the I/O
workload at its largest size and the scripted, instant-tools workload of the
same shape (as many tasks, each four tool calls and a final answer, so the
per-task costs, a message, a lease, the start and the end, weigh the same in
both), alternated `rounds` times on the same worker; their median steps/s
and the ratio of the medians, with the CPU per step of each by process. One
run of each can be luck on a shared machine: single runs of the scripted
workload measured 346 to 517 steps/s on one machine in one hour.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Sum

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.releases import agent_seed
from tasks_app.services.tasks import task_submit
from tools_app.models import Tool

from .anatomy import run_anatomy
from .procs import (
    BASE_DIR,
    BIN,
    Workers,
    _spawn,
    cpu_by_process,
    purge_queue,
    server_cpu_s,
    stop,
)
from .throughput import wait_terminal
from .vacuum import vacuum
from .world import BIG_BUDGET, World, cancel_open, step_script, submit

IO_AGENT = "bench-io"
IO_TOOL = "bench_io_call"
MODEL_LATENCY_S = 0.5
TOOL_LATENCY_S = 0.2
TOOL_CALLS = 4
ROOMY = 100_000  # admission limits out of the way: the bench measures the runner


def ideal_s() -> float:
    return (TOOL_CALLS + 1) * MODEL_LATENCY_S + TOOL_CALLS * TOOL_LATENCY_S


@contextmanager
def edge_process(log_dir: Any, *, parallel: int = 1) -> Iterator[tuple[str, int]]:
    """The fake edge in a process of its own; yields (base URL, pid). With
    `parallel`, each of the model's tool-calling replies asks for that many calls."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.edge_server", "--port", "0",
         "--model-latency", str(MODEL_LATENCY_S), "--tool-latency", str(TOOL_LATENCY_S),
         "--tool-calls", str(TOOL_CALLS), "--parallel", str(parallel)],
        cwd=BASE_DIR, stdout=subprocess.PIPE, stderr=open(log_dir / "edge.log", "wb"),  # noqa: SIM115
        start_new_session=True, env={**os.environ, "PYTHONPATH": str(BASE_DIR)})
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        stop(proc)


@contextmanager
def readme_worker(env: dict[str, str], *, log_dir: Any) -> Iterator[Workers]:
    """`celery -A config worker`, as docs/how-to/deploy.md starts it (a node name added, to
    ping it): the pool and its concurrency come from the project's configuration."""
    from config.celery import app

    node = f"bench-io-{os.getpid()}@{socket.gethostname()}"
    proc = _spawn([str(BIN / "celery"), "-A", "config", "worker", "-n", node,
                   "--loglevel", "WARNING"], env, "celery-io-worker.log", log_dir)
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[node], timeout=0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not start; see {log_dir}")
        yield Workers(node=node, pgid=proc.pid)
    finally:
        stop(proc)


def io_world_ensure(world: World, edge_url: str) -> None:
    with transaction.atomic():
        Tool.objects.update_or_create(tenant_id=world.tenant_id, name=IO_TOOL, defaults={
            "kind": "http", "url": f"{edge_url}/tool/{IO_TOOL}", "target": "",
            "args_schema": {"type": "object"}, "side_effect": "read", "timeout_s": 10.0,
            "max_retries": 2, "description": "An HTTP call that takes 0.2 s."})
    io_agent_seed(world, edge_url, IO_AGENT)


def io_agent_seed(world: World, edge_url: str, name: str, **model: Any) -> None:
    """An agent of the I/O workload (`model`: settings besides the edge's, e.g. stream)."""
    with transaction.atomic():
        agent_seed(tenant_id=world.tenant_id, name=name, defaults={
            "description": "Benchmark agent: a model and an HTTP tool that take their time.",
            "model": {"backend": "openai", "name": "edge", "base_url": f"{edge_url}/v1",
                      "timeout_s": 30, "max_retries": 2, "system_prompt": "", **model},
            "tools": [IO_TOOL],
            "max_steps": BIG_BUDGET, "max_model_calls": BIG_BUDGET,
            "max_tool_calls": BIG_BUDGET, "max_tokens": 2_000_000_000,
            "max_duration_s": 86_400, "max_concurrent_tasks": BIG_BUDGET,
            "on_exhaustion": "fail"})


def rss_mb(pgid: int) -> float:
    total = 0
    for pid in cpu_by_process(lambda pid, pgrp, comm: pgrp == pgid):
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            continue
    return round(total / 1024, 1)


def watch_until_ended(ids: list[int], workers: Workers) -> float:
    """Poll (4 times a second, with a deadline) until none of `ids` is CREATED
    or RUNNING; the workers' largest RSS meanwhile, in MB."""
    rss = 0.0
    deadline = time.monotonic() + max(300.0, len(ids) * 0.5)
    while Task.objects.filter(pk__in=ids, status__in=(TaskStatus.CREATED, TaskStatus.RUNNING)
                              ).exists() and time.monotonic() < deadline:
        rss = max(rss, rss_mb(workers.pgid))
        time.sleep(0.25)  # the bench's pace of polling, not a synchronisation
    return rss


def admit_all() -> None:
    """Admission starts 100 tasks per call: start the rest as the sweep would."""
    while admit_created_tasks(limit=500):
        pass


def run_io(world: World, *, tasks: int, edge_url: str, edge_pid: int,
           workers: Workers, agent: str = IO_AGENT,
           subject_of: Callable[[int], str] | None = None) -> dict[str, Any]:
    """One run of `tasks` I/O tasks of `agent` (task i about `subject_of(i)`, if given)."""
    vacuum()
    httpx.post(f"{edge_url}/reset")
    before = cpu_now(workers, edge_pid)
    with transaction.atomic():
        ids = [task_submit(tenant_id=world.tenant_id, requester_id=world.user_id,
                           agent=agent, goal=f"bench io {i}", input={}, script=None,
                           actor=SYSTEM, subject=subject_of(i) if subject_of else ""
                           ).task.pk for i in range(tasks)]
    admit_all()
    rss = watch_until_ended(ids, workers)
    spent = cpu_since(before, workers, edge_pid)
    cancel_open(world, ids)
    edge = httpx.get(f"{edge_url}/stats").json()
    agg = Task.objects.filter(pk__in=ids).aggregate(
        first=Min("started_at"), last=Max("finished_at"), steps=Sum("steps_count"))
    succeeded = Task.objects.filter(pk__in=ids, status=TaskStatus.SUCCEEDED).count()
    wall = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else None
    steps = int(agg["steps"] or 0)
    return {
        "tasks": tasks, "succeeded": succeeded, "steps": steps,
        "wall_s": round(wall, 2) if wall else None, "ideal_s": ideal_s(),
        "ratio_to_ideal": round(wall / ideal_s(), 2) if wall else None,
        "peak_model_calls_in_flight": edge["model_peak"],
        "peak_tool_calls_in_flight": edge["tool_peak"],
        "model_calls": edge["model_calls"], "tool_calls": edge["tool_calls"],
        "steps_per_s": round(steps / wall, 1) if wall and steps else None,
        "cpu_ms_per_step": per_step_ms(spent, steps),
        "worker_rss_mb_max": rss,
    }


def cpu_since(before: dict[str, float], workers: Workers, edge_pid: int) -> dict[str, float]:
    return {k: v - before[k] for k, v in cpu_now(workers, edge_pid).items()}


def per_step_ms(spent: dict[str, float], steps: int) -> dict[str, float | None]:
    return {k: round(v / steps * 1000, 2) if steps else None for k, v in spent.items()}


def cpu_now(workers: Workers, edge_pid: int) -> dict[str, float]:
    consumer = workers.consumer_cpu_s()
    return {
        "worker_pool": workers.cpu_s() - consumer,
        "worker_consumer": consumer,
        "postgres": server_cpu_s("postgres"),
        "redis": server_cpu_s("redis-server"),
        "edge": sum(cpu_by_process(lambda pid, pgrp, comm: pgrp == edge_pid).values()),
    }


def run_scripted(world: World, *, tasks: int, edge_pid: int, workers: Workers,
                 steps: int = TOOL_CALLS + 1) -> dict[str, Any]:
    """The scripted model and instant tools on the same worker, `steps` steps a
    task (the I/O workload's shape by default): its steps/s and CPU per step."""
    vacuum()
    with transaction.atomic():
        ids = [submit(world, step_script(steps, salt=f"io-cmp{i}-"),
                      goal=f"bench cmp {i}") for i in range(tasks)]
    before = cpu_now(workers, edge_pid)  # admission hands them to the worker
    admit_all()
    wait_terminal(ids, timeout=max(300.0, tasks * 0.5))
    spent = cpu_since(before, workers, edge_pid)
    cancel_open(world, ids)
    agg = Task.objects.filter(pk__in=ids).aggregate(
        first=Min("started_at"), last=Max("finished_at"), steps=Sum("steps_count"))
    window = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else None
    total = int(agg["steps"] or 0)
    return {"tasks": tasks, "steps_per_task": steps, "steps": total,
            "steps_per_s": round(total / window, 1) if window and total else None,
            "cpu_ms_per_step": per_step_ms(spent, total)}


def compare(world: World, *, first_io: dict[str, Any], rounds: int, edge_url: str,
            edge_pid: int, workers: Workers) -> dict[str, Any]:
    """The I/O workload (its largest run, `first_io`, is the first round's) and
    the scripted one of the same shape, alternated `rounds` times: the median
    steps/s of each and their ratio."""
    tasks = first_io["tasks"]
    io_runs, scripted_runs = [first_io], []
    for n in range(max(1, rounds)):
        if n:
            io_runs.append(run_io(world, tasks=tasks, edge_url=edge_url, edge_pid=edge_pid,
                                  workers=workers))
        scripted_runs.append(run_scripted(world, tasks=tasks, edge_pid=edge_pid,
                                          workers=workers))
    io_rate = median([r.get("steps_per_s") for r in io_runs])
    scripted_rate = median([r.get("steps_per_s") for r in scripted_runs])
    return {
        "tasks": tasks, "steps_per_task": TOOL_CALLS + 1, "rounds": rounds,
        "io_steps_per_s": [r.get("steps_per_s") for r in io_runs],
        "scripted_steps_per_s": [r.get("steps_per_s") for r in scripted_runs],
        "io_median_steps_per_s": io_rate, "scripted_median_steps_per_s": scripted_rate,
        "io_cpu_ms_per_step": io_runs[-1]["cpu_ms_per_step"],
        "scripted_cpu_ms_per_step": scripted_runs[-1]["cpu_ms_per_step"],
        "ratio": round(io_rate / scripted_rate, 2) if io_rate and scripted_rate else None,
    }


def alternated(world: World, agents: dict[str, str], *, tasks: int, rounds: int,
               edge_url: str, edge_pid: int, workers: Workers, say: Any,
               subject_of: Callable[[int], str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The I/O workload with each of `agents` (label -> agent) in turn, `rounds`
    times on the same worker (one run of each can be luck on a shared machine):
    each label's runs."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in agents}
    width = max(len(label) for label in agents)
    for n in range(max(1, rounds)):
        for label, agent in agents.items():
            run = run_io(world, tasks=tasks, edge_url=edge_url, edge_pid=edge_pid,
                         workers=workers, agent=agent, subject_of=subject_of)
            runs[label].append(run)
            cpu = run["cpu_ms_per_step"]
            say(f"  round {n + 1}, {label.ljust(width)}: {run['steps_per_s']} steps/s "
                f"({run['succeeded']}/{tasks} succeeded), worker pool CPU "
                f"{cpu.get('worker_pool')} ms/step, PostgreSQL {cpu.get('postgres')} ms/step, "
                f"Redis {cpu.get('redis')} ms/step")
    return runs


def pair_figures(runs: dict[str, list[dict[str, Any]]], *, tasks: int) -> dict[str, Any]:
    """`alternated`'s two labels' runs (the first label against the second):
    `<label>_steps_per_s` (each run), `<label>_median`, `<label>_cpu_ms_per_step`
    (the last run's), the medians' `steps_ratio`, and tasks succeeded of submitted."""
    (a, a_runs), (b, b_runs) = runs.items()
    figures: dict[str, Any] = {}
    for label, label_runs in ((a, a_runs), (b, b_runs)):
        key = label.replace(" ", "_")
        figures[f"{key}_steps_per_s"] = [r.get("steps_per_s") for r in label_runs]
        figures[f"{key}_median"] = median(figures[f"{key}_steps_per_s"])
        figures[f"{key}_cpu_ms_per_step"] = label_runs[-1]["cpu_ms_per_step"]
    on, off = figures[f"{a.replace(' ', '_')}_median"], figures[f"{b.replace(' ', '_')}_median"]
    figures["steps_ratio"] = round(on / off, 3) if on and off else None
    figures["succeeded"] = sum(r["succeeded"] for r in a_runs + b_runs)
    figures["submitted"] = tasks * (len(a_runs) + len(b_runs))
    return figures


def pair_table(rows: list[tuple[str, str]], doc: dict[str, Any]) -> str:
    """A two-agent workload's table: `rows`, then its tasks and its verdict."""
    rows = [*rows, ("tasks", f"{doc.get('succeeded')}/{doc.get('submitted')} succeeded"),
            ("targets", "met" if doc.get("target_met") else "NOT met")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def median(values: list[Any]) -> float | None:
    known = [v for v in values if v]
    return round(statistics.median(known), 1) if known else None


@contextmanager
def roomy_admission() -> Iterator[dict[str, str]]:
    """Admission's limits out of the way in this process; yields the environment
    that does the same for the worker (and lets it reach the edge)."""
    saved = dict(settings.TETHER)
    settings.TETHER.update(MAX_RUNNING_TASKS=ROOMY, MAX_RUNNING_PER_TENANT=ROOMY)
    try:
        yield {"TETHER_MAX_RUNNING_TASKS": str(ROOMY),
               "TETHER_MAX_RUNNING_PER_TENANT": str(ROOMY), "TETHER_EGRESS_ALLOW": "127.0.0.1"}
    finally:
        settings.TETHER.clear()
        settings.TETHER.update(saved)


README_WORKER = "celery -A config worker (pool and concurrency from config/celery.py settings)"


def run_io_phase(world: World, env: dict[str, str], *, sizes: list[int], rounds: int,
                 log_dir: Any, say: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"worker": README_WORKER, "runs": []}
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, edge_pid):
        io_world_ensure(world, edge_url)
        doc["anatomy"] = io_anatomy(world)
        say(f"  an I/O step: {doc['anatomy'].get('phases_per_step')} database phases, "
            f"{doc['anatomy'].get('statements_per_step')} statements, "
            f"{doc['anatomy'].get('commits_per_step')} commits")
        doc.update(_with_worker(world, env, roomy, sizes=sizes, rounds=rounds,
                                edge_url=edge_url, edge_pid=edge_pid, log_dir=log_dir,
                                say=say))
    doc["io_to_scripted_steps_ratio"] = (doc.get("compare") or {}).get("ratio")
    return doc


def io_anatomy(world: World) -> dict[str, Any]:
    """`anatomy.run_anatomy` of an I/O task's tool steps, run in this process
    before the worker starts (so no worker takes the task)."""
    saved = getattr(settings, "TETHER_EGRESS_ALLOW", [])
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]  # the edge, as the worker is allowed
    try:
        with transaction.atomic():
            task_id = task_submit(tenant_id=world.tenant_id, requester_id=world.user_id,
                                  agent=IO_AGENT, goal="bench io anatomy", input={},
                                  script=None, actor=SYSTEM).task.pk
        admit_all()
        return run_anatomy(world, steps=TOOL_CALLS, task_id=task_id)
    finally:
        settings.TETHER_EGRESS_ALLOW = saved
        purge_queue()  # its admission enqueued it; no worker is there to take it


def _with_worker(world: World, env: dict[str, str], roomy: dict[str, str], *, sizes: list[int],
                 rounds: int, edge_url: str, edge_pid: int, log_dir: Any,
                 say: Any) -> dict[str, Any]:
    """The runs on the worker started as docs/how-to/deploy.md says."""
    doc: dict[str, Any] = {"runs": []}
    with readme_worker({**env, **roomy}, log_dir=log_dir) as workers:
        run_io(world, tasks=10, edge_url=edge_url, edge_pid=edge_pid, workers=workers)  # warm
        for n in sizes:
            say(f"  I/O workload: {n} tasks x ({TOOL_CALLS + 1} model calls of "
                f"{MODEL_LATENCY_S} s, {TOOL_CALLS} tool calls of {TOOL_LATENCY_S} s) ...")
            run = run_io(world, tasks=n, edge_url=edge_url, edge_pid=edge_pid,
                         workers=workers)
            doc["runs"].append(run)
            say(f"    wall {run['wall_s']} s (ideal {run['ideal_s']} s, ratio "
                f"{run['ratio_to_ideal']}), peak {run['peak_model_calls_in_flight']} model "
                f"calls in flight, {run['steps_per_s']} steps/s, worker RSS "
                f"{run['worker_rss_mb_max']} MB, CPU ms/step {run['cpu_ms_per_step']}")
        if not doc["runs"]:
            return doc
        largest = max(doc["runs"], key=lambda r: r["tasks"])
        say(f"  I/O vs scripted-instant, {largest['tasks']} tasks of the same shape, "
            f"alternated {rounds} times ...")
        doc["compare"] = cmp = compare(world, first_io=largest, rounds=rounds,
                                       edge_url=edge_url, edge_pid=edge_pid, workers=workers)
        say(f"    I/O {cmp['io_steps_per_s']} steps/s, scripted "
            f"{cmp['scripted_steps_per_s']} steps/s: medians' ratio {cmp['ratio']}")
    return doc
