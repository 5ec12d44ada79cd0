"""The workflow workload: runs of one 6-node workflow through the worker
started as docs/how-to/deploy.md says (`manage.py bench --only workflow`).

The graph (`definition`; T is the nodes' tool):

    lookup ─┬─> check ──────────────┬─> decide ─┬─> accept  (when decide's i is even)
            └─> enrich (map of 5) ──┘           └─> refer   (when decide's i is odd)

Five tool nodes and a map: `enrich` calls T once for each of the five items
of the list in `lookup`'s output; `accept` and `refer` are the branch: one of
them runs, the other is skipped (a run's input `n` picks which, so half the
runs take each side). Every run calls T 9 times: lookup, check, 5 items,
decide, and accept or refer; each call is a node step of the run, and its
final answer one more step.

T comes in two variants, both answering `{"ok": true, "i": ..}` (and the
`echo` argument, when given, which carries `lookup`'s list):
- `bench_wf_call`, an HTTP tool answered after 0.2 s by the fake edge
  (`edge_server`, the I/O workload's tool);
- `bench_wf_instant`, a python tool answering at once (`tools.bench_echo`).

Figures:
- before the worker starts, the anatomy of a run's node steps with the
  instant tool and of a scripted task's tool steps (`anatomy`): statements,
  commits, database phases, time in one process;
- 0.2 s tool, N runs (500 by default): the wall time from the first run's
  start to the last run's end; the critical paths computed from the graph
  (`critical_path_s`): the ideal, if independent nodes and a map's items ran
  at the same time (lookup, then check and the 5 items together, decide,
  accept or refer: 4 x 0.2 = 0.8 s), and the sequential, every call one after
  another as the runner makes them today (9 x 0.2 = 1.8 s); the wall time's
  ratio to each; node steps/s; each run's own duration; the tool calls in
  flight at the peak (counted by the edge); CPU per node step by process.
- instant tool: N runs, alternated `rounds` times on the same worker with the
  scripted-instant workload of the same shape (`io_load.run_scripted`: as
  many tasks, each 9 instant tool calls and a final answer); node steps/s of
  the workflow (its final steps not counted) over the scripted workload's
  steps/s (its final steps counted), at the medians (target 0.7).
"""

from __future__ import annotations

from typing import Any

import httpx
from django.db import transaction
from django.db.models import Count, Max, Min, Sum
from django.db.models.fields.json import KT

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tools_app.models import Tool
from workflows_app.definition import Definition, load
from workflows_app.models import Workflow, WorkflowVersion
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import (
    workflow_create,
    workflow_promote,
    workflow_update,
)

from .anatomy import run_anatomy
from .io_load import (
    README_WORKER,
    TOOL_LATENCY_S,
    admit_all,
    cpu_now,
    cpu_since,
    edge_process,
    median,
    per_step_ms,
    readme_worker,
    roomy_admission,
    run_scripted,
    watch_until_ended,
)
from .procs import Workers, purge_queue
from .report import dig
from .stats import summary_ms
from .throughput import wait_terminal
from .vacuum import vacuum
from .world import World, cancel_open

HTTP_WORKFLOW = "bench-wf-io"
INSTANT_WORKFLOW = "bench-wf-instant"
HTTP_TOOL = "bench_wf_call"
INSTANT_TOOL = "bench_wf_instant"
MAP_ITEMS = 5
BRANCH = ("accept", "refer")  # exactly one of them runs
CALLS_PER_RUN = 4 + MAP_ITEMS  # lookup, check, the items, decide, one side of the branch
STEPS_PER_RUN = CALLS_PER_RUN + 1  # and the final answer
WARM_RUNS = 10


def definition(tool: str) -> dict[str, Any]:
    """The workload's workflow, every node calling `tool`."""
    return {
        "description": "Benchmark: a fan-out and a map, joined, then a branch.",
        "inputs": {"type": "object", "required": ["n"],
                   "properties": {"n": {"type": "integer", "minimum": 0}}},
        "nodes": [
            {"id": "lookup", "tool": tool,
             "args": {"i": "${inputs.n}", "echo": {"items": list(range(1, MAP_ITEMS + 1))}}},
            {"id": "check", "after": ["lookup"], "tool": tool,
             "args": {"i": "${nodes.lookup.i}"}},
            {"id": "enrich", "after": ["lookup"],
             "map": {"over": "nodes.lookup.echo.items", "tool": tool, "args": {"i": "${item}"}}},
            {"id": "decide", "after": ["check", "enrich"], "tool": tool,
             "args": {"i": "${nodes.lookup.i}", "echo": {"enriched": "${size(nodes.enrich)}"}}},
            {"id": "accept", "after": ["decide"], "when": "nodes.decide.i % 2 == 0",
             "tool": tool, "args": {"i": "${nodes.decide.i}"}},
            {"id": "refer", "after": ["decide"], "when": "nodes.decide.i % 2 == 1",
             "tool": tool, "args": {"i": "${nodes.decide.i}"}},
        ],
    }


def critical_path_s(graph: Definition, *, latency_s: float, concurrent: bool) -> float:
    """The longest chain of calls a run waits for, each `latency_s`, over both
    sides of the branch (the side not taken costs nothing). `concurrent`:
    nodes whose dependencies are done, and a map's items, run at the same
    time; otherwise every call runs after the one before."""
    def path(skipped: str) -> float:
        def cost(node_id: str, kind: str) -> float:
            if node_id == skipped:
                return 0.0
            calls = MAP_ITEMS if kind == "map" and not concurrent else 1
            return calls * latency_s

        if not concurrent:
            return sum(cost(n.id, n.kind) for n in graph.nodes)
        done: dict[str, float] = {}
        for node in graph.nodes:  # dependencies first
            done[node.id] = max((done[d] for d in node.after), default=0.0) + cost(
                node.id, node.kind)
        return max(done.values())

    return round(max(path(skipped) for skipped in BRANCH), 3)


def workflow_world_ensure(world: World, edge_url: str) -> None:
    """The two tools and the two workflows (a changed definition becomes a new,
    current version)."""
    with transaction.atomic():
        Tool.objects.update_or_create(tenant_id=world.tenant_id, name=HTTP_TOOL, defaults={
            "kind": "http", "url": f"{edge_url}/tool/{HTTP_TOOL}", "target": "",
            "args_schema": {"type": "object"}, "side_effect": "read", "timeout_s": 10.0,
            "max_retries": 2, "description": "Benchmark: an HTTP call that takes 0.2 s."})
        Tool.objects.update_or_create(tenant_id=world.tenant_id, name=INSTANT_TOOL, defaults={
            "kind": "python", "url": "", "target": "benchmarks.tools.bench_echo",
            "args_schema": {"type": "object"}, "side_effect": "read", "timeout_s": 5.0,
            "max_retries": 3, "description": "Benchmark: an instant read."})
    for name, tool in ((HTTP_WORKFLOW, HTTP_TOOL), (INSTANT_WORKFLOW, INSTANT_TOOL)):
        _workflow_ensure(world, name, definition(tool))


def _workflow_ensure(world: World, name: str, raw: dict[str, Any]) -> None:
    found = Workflow.objects.filter(tenant_id=world.tenant_id, name=name).first()
    if found is None:
        workflow_create(tenant_id=world.tenant_id, name=name, definition=raw, actor=SYSTEM)
        return
    workflow_update(tenant_id=world.tenant_id, name=name, definition=raw, actor=SYSTEM)
    latest = WorkflowVersion.objects.filter(workflow=found).order_by("-number").first()
    if latest is not None and latest.number != found.current_version:
        workflow_promote(tenant_id=world.tenant_id, name=name, version=latest.number,
                         actor=SYSTEM)


def _submit(world: World, workflow: str, runs: int) -> list[int]:
    """`runs` runs in one transaction (admission starts them after it commits)."""
    with transaction.atomic():
        return [submit_run(tenant_id=world.tenant_id, requester_id=world.user_id,
                           workflow=workflow, input={"n": i}, actor=SYSTEM,
                           goal=f"bench workflow {i}").task.pk for i in range(runs)]


def _outcome(ids: list[int]) -> dict[str, Any]:
    """What the runs did, from the database: the window from the first run's
    start to the last one's end, steps, node steps by node, run durations."""
    agg = Task.objects.filter(pk__in=ids).aggregate(
        first=Min("started_at"), last=Max("finished_at"), steps=Sum("steps_count"))
    window = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else None
    by_node = {row["node"]: row["n"] for row in Step.objects.filter(
        task_id__in=ids, kind="tool", status="SUCCEEDED").values(
        node=KT("decision__workflow__node")).annotate(n=Count("id"))}
    durations = [(f - s).total_seconds() for s, f in Task.objects.filter(
        pk__in=ids, status=TaskStatus.SUCCEEDED).values_list("started_at", "finished_at")
        if s and f]
    node_steps = sum(by_node.values())
    steps = int(agg["steps"] or 0)
    return {
        "runs": len(ids),
        "succeeded": len(durations),
        "steps": steps,
        "node_steps": node_steps,
        "node_steps_by_node": dict(sorted(by_node.items())),
        "window_s": round(window, 3) if window else None,
        "node_steps_per_s": round(node_steps / window, 1) if window and node_steps else None,
        "steps_per_s": round(steps / window, 1) if window and steps else None,
        "run_duration": summary_ms(durations),
    }


def run_http(world: World, *, runs: int, edge_url: str, edge_pid: int, workers: Workers,
             ideal_s: float, sequential_s: float) -> dict[str, Any]:
    """N runs with the 0.2 s tool: wall time against the critical paths."""
    vacuum()
    httpx.post(f"{edge_url}/reset")
    ids = _submit(world, HTTP_WORKFLOW, runs)
    before = cpu_now(workers, edge_pid)  # admission hands them to the worker
    admit_all()
    rss = watch_until_ended(ids, workers)
    spent = cpu_since(before, workers, edge_pid)
    cancel_open(world, ids)
    edge = httpx.get(f"{edge_url}/stats").json()
    out = _outcome(ids)
    wall = out.pop("window_s")
    return {
        **out,
        "wall_s": wall,
        "ideal_critical_path_s": ideal_s,
        "sequential_critical_path_s": sequential_s,
        "ratio_to_ideal": round(wall / ideal_s, 2) if wall else None,
        "ratio_to_sequential": round(wall / sequential_s, 2) if wall else None,
        "peak_tool_calls_in_flight": edge["tool_peak"],
        "tool_calls": edge["tool_calls"],
        "cpu_ms_per_node_step": per_step_ms(spent, out["node_steps"]),
        "worker_rss_mb_max": rss,
    }


def run_instant(world: World, *, runs: int, edge_pid: int, workers: Workers) -> dict[str, Any]:
    """N runs with the instant tool: node steps/s and CPU per node step."""
    vacuum()
    ids = _submit(world, INSTANT_WORKFLOW, runs)
    before = cpu_now(workers, edge_pid)  # admission hands them to the worker
    admit_all()
    wait_terminal(ids, timeout=max(300.0, runs * 0.5))
    spent = cpu_since(before, workers, edge_pid)
    cancel_open(world, ids)
    out = _outcome(ids)
    return {**out, "cpu_ms_per_node_step": per_step_ms(spent, out["node_steps"])}


def compare(world: World, *, runs: int, rounds: int, edge_pid: int,
            workers: Workers) -> dict[str, Any]:
    """The instant-tool workflow and the scripted-instant workload of the same
    shape, alternated `rounds` times: medians and their ratio."""
    instant, scripted = [], []
    for _ in range(max(1, rounds)):
        instant.append(run_instant(world, runs=runs, edge_pid=edge_pid, workers=workers))
        scripted.append(run_scripted(world, tasks=runs, edge_pid=edge_pid, workers=workers,
                                     steps=STEPS_PER_RUN))
    node_rate = median([r.get("node_steps_per_s") for r in instant])
    scripted_rate = median([r.get("steps_per_s") for r in scripted])
    return {
        "runs": runs, "steps_per_run": STEPS_PER_RUN, "node_steps_per_run": CALLS_PER_RUN,
        "rounds": rounds,
        "succeeded": [r["succeeded"] for r in instant],
        "node_steps": [r["node_steps"] for r in instant],
        "workflow_node_steps_per_s": [r.get("node_steps_per_s") for r in instant],
        "workflow_steps_per_s": [r.get("steps_per_s") for r in instant],
        "scripted_steps_per_s": [r.get("steps_per_s") for r in scripted],
        "scripted_steps": [r["steps"] for r in scripted],
        "workflow_median_node_steps_per_s": node_rate,
        "scripted_median_steps_per_s": scripted_rate,
        "workflow_cpu_ms_per_node_step": instant[-1]["cpu_ms_per_node_step"],
        "scripted_cpu_ms_per_step": scripted[-1]["cpu_ms_per_step"],
        "ratio": round(node_rate / scripted_rate, 2) if node_rate and scripted_rate else None,
    }


def workflow_anatomy(world: World) -> dict[str, Any]:
    """`anatomy.run_anatomy` of an instant-tool run's node steps and of a
    scripted task's tool steps, as many, in this process before the worker
    starts (so no worker takes them)."""
    try:
        (run_id,) = _submit(world, INSTANT_WORKFLOW, 1)
        admit_all()
        return {"workflow": run_anatomy(world, steps=CALLS_PER_RUN, task_id=run_id),
                "scripted": run_anatomy(world, steps=CALLS_PER_RUN)}
    finally:
        purge_queue()  # their admission enqueued them; no worker is there to take them


def run_workflow_phase(world: World, env: dict[str, str], *, runs: int, rounds: int,
                       log_dir: Any, say: Any) -> dict[str, Any]:
    graph = load(definition(HTTP_TOOL))
    ideal = critical_path_s(graph, latency_s=TOOL_LATENCY_S, concurrent=True)
    sequential = critical_path_s(graph, latency_s=TOOL_LATENCY_S, concurrent=False)
    doc: dict[str, Any] = {
        "worker": README_WORKER,
        "graph": "lookup -> (check | enrich: map of 5) -> decide -> (accept | refer: one runs)",
        "tool_latency_s": TOOL_LATENCY_S, "calls_per_run": CALLS_PER_RUN,
        "ideal_critical_path_s": ideal, "sequential_critical_path_s": sequential,
    }
    say(f"  critical path of a run ({CALLS_PER_RUN} calls of {TOOL_LATENCY_S} s): ideal "
        f"{ideal} s, sequential {sequential} s")
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, edge_pid):
        workflow_world_ensure(world, edge_url)
        doc["anatomy"] = a = workflow_anatomy(world)
        say(f"  a node step: {dig(a, ('workflow', 'statements_per_step'))} statements, "
            f"{dig(a, ('workflow', 'in_process_step_ms'))} ms in this process; a scripted "
            f"step: {dig(a, ('scripted', 'statements_per_step'))} statements, "
            f"{dig(a, ('scripted', 'in_process_step_ms'))} ms")
        with readme_worker({**env, **roomy}, log_dir=log_dir) as workers:
            run_http(world, runs=min(WARM_RUNS, runs), edge_url=edge_url, edge_pid=edge_pid,
                     workers=workers, ideal_s=ideal, sequential_s=sequential)  # warm-up
            say(f"  workflow, {runs} runs with the {TOOL_LATENCY_S} s tool ...")
            doc["http"] = h = run_http(world, runs=runs, edge_url=edge_url, edge_pid=edge_pid,
                                       workers=workers, ideal_s=ideal, sequential_s=sequential)
            say(f"    wall {h['wall_s']} s: {h['ratio_to_ideal']} x the ideal {ideal} s, "
                f"{h['ratio_to_sequential']} x the sequential {sequential} s; "
                f"{h['node_steps_per_s']} node steps/s; peak {h['peak_tool_calls_in_flight']} "
                f"tool calls in flight; {h['succeeded']} of {runs} succeeded")
            say(f"  workflow with instant tools vs scripted-instant, {runs} runs of "
                f"{STEPS_PER_RUN} steps, alternated {rounds} times ...")
            doc["compare"] = c = compare(world, runs=runs, rounds=rounds, edge_pid=edge_pid,
                                         workers=workers)
            say(f"    workflow {c['workflow_node_steps_per_s']} node steps/s, scripted "
                f"{c['scripted_steps_per_s']} steps/s: medians' ratio {c['ratio']}")
    doc["wall_to_ideal"] = h.get("ratio_to_ideal")
    doc["instant_to_scripted_steps_ratio"] = c.get("ratio")
    return doc
