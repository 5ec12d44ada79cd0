"""The evaluation workload: recorded I/O tasks replayed as shadow tasks.

`tasks` tasks of the I/O workload (`io_load`: five model calls of 0.5 s and
four HTTP tool calls of 0.2 s each, on the fake edge) run live first, on the
worker started as docs/how-to/deploy.md says; they are the record. Then:

1. an evaluation of a candidate version (another system prompt, the same edge)
   replays all of them, with the evaluation cap lifted to the live limit, so
   shadow and live tasks run at the same concurrency: shadow tasks/s against
   live tasks/s (the floor: 0.8), and the tool calls the edge saw from the
   shadow tasks (none: every result comes from the ledger);
2. the same evaluation again, at the documented priority (admission after live
   work, `TETHER_EVALUATION_MAX_RUNNING` at its default), while `tasks` new
   live tasks are submitted: their tasks/s against the first live run's (the
   floor: 0.8).

Tasks/s is the tasks over the wall time from the first started to the last
finished.
"""
from __future__ import annotations

import time
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min

from evals_app.models import Evaluation
from evals_app.services.settling import evaluation_settle
from evals_app.services.starting import Selection, evaluation_start
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tasks_app.services.agents import agent_update
from tasks_app.services.tasks import task_submit

from .io_load import (
    IO_AGENT,
    admit_all,
    edge_process,
    io_world_ensure,
    readme_worker,
    roomy_admission,
    run_io,
    watch_until_ended,
)
from .procs import Workers, purge_queue
from .world import World, world_ensure

FLOOR = 0.8
DEFAULT_CAP = 20  # TETHER_EVALUATION_MAX_RUNNING's default


def _rate(ids: list[int]) -> tuple[float | None, float | None]:
    """(wall seconds, tasks per second) of `ids`, first started to last finished."""
    agg = Task.objects.filter(pk__in=ids).aggregate(first=Min("started_at"),
                                                    last=Max("finished_at"))
    if not (agg["first"] and agg["last"]):
        return None, None
    wall = (agg["last"] - agg["first"]).total_seconds()
    return round(wall, 2), round(len(ids) / wall, 2) if wall else None


def wait_settled(evaluation_id: int) -> Evaluation:
    """The first evaluation, finished (its last replays settle as their tasks end;
    the sweep catches up on any other)."""
    deadline = time.monotonic() + 60
    while True:
        evaluation = evaluation_settle(evaluation_id)
        if evaluation.status != "running" or time.monotonic() > deadline:
            return evaluation
        time.sleep(0.25)  # the bench's pace of polling, not a synchronisation


def _candidate(world: World) -> int:
    """A version of the I/O agent with another system prompt, saved, not released."""
    agent = AgentProfile.objects.get(tenant_id=world.tenant_id, name=IO_AGENT)
    model = {**agent.model, "system_prompt": f"candidate {agent.latest_version + 1}"}
    return agent_update(tenant_id=world.tenant_id, name=IO_AGENT,
                        changes={"model": model}).latest_version


def _evaluate(world: World, recorded: list[int], candidate: int) -> tuple[int, list[int]]:
    evaluation = evaluation_start(tenant_id=world.tenant_id, agent=IO_AGENT,
                                  candidate_version=candidate, selection=Selection(ids=recorded),
                                  limit=len(recorded), scorer="exact", actor=SYSTEM)
    return evaluation.pk, list(evaluation.tasks.values_list("shadow_task_id", flat=True))


def run_evaluation(*, tasks: int, env: dict[str, str], log_dir: Any,
                   say: Any) -> dict[str, Any]:
    world = world_ensure()
    purge_queue()
    doc: dict[str, Any] = {"tasks": tasks, "floor": FLOOR}
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, edge_pid):
        io_world_ensure(world, edge_url)
        # the worker's admission keeps the evaluation cap at its default; the first
        # evaluation is admitted whole by this process, with the cap lifted
        with readme_worker({**env, **roomy}, log_dir=log_dir) as workers:
            doc.update(_runs(world, tasks=tasks, edge_url=edge_url, edge_pid=edge_pid,
                             workers=workers, say=say))
    doc["target_met"] = bool(
        (doc.get("shadow_to_live") or 0) >= FLOOR
        and (doc.get("live_during_to_alone") or 0) >= FLOOR)
    return doc


def _runs(world: World, *, tasks: int, edge_url: str, edge_pid: int, workers: Workers,
          say: Any) -> dict[str, Any]:
    saved = settings.TETHER["EVALUATION_MAX_RUNNING"]
    run_io(world, tasks=10, edge_url=edge_url, edge_pid=edge_pid, workers=workers)  # warm
    say(f"evaluation: {tasks} live I/O tasks (the record) ...")
    run_io(world, tasks=tasks, edge_url=edge_url, edge_pid=edge_pid, workers=workers)
    recorded = list(Task.objects.filter(tenant_id=world.tenant_id, agent__name=IO_AGENT,
                                        shadow_of__isnull=True, status=TaskStatus.SUCCEEDED)
                    .order_by("-id").values_list("id", flat=True)[:tasks])
    live_wall, live_rate = _rate(recorded)
    say(f"  live: {live_wall} s, {live_rate} tasks/s")
    candidate = _candidate(world)

    say(f"  an evaluation of version {candidate} replaying them, at the live concurrency ...")
    settings.TETHER["EVALUATION_MAX_RUNNING"] = settings.TETHER["MAX_RUNNING_TASKS"]
    try:
        httpx.post(f"{edge_url}/reset")
        first, shadows = _evaluate(world, recorded, candidate)
        admit_all()
        watch_until_ended(shadows, workers)
        edge = httpx.get(f"{edge_url}/stats").json()
    finally:
        settings.TETHER["EVALUATION_MAX_RUNNING"] = saved
    shadow_wall, shadow_rate = _rate(shadows)
    succeeded = Task.objects.filter(pk__in=shadows, status=TaskStatus.SUCCEEDED).count()
    say(f"  shadow: {shadow_wall} s, {shadow_rate} tasks/s ({succeeded} succeeded); the edge "
        f"saw {edge['tool_calls']} tool calls and {edge['model_calls']} model calls")

    say(f"  the evaluation again at its priority (at most {saved} at once), with {tasks} "
        "live tasks submitted meanwhile ...")
    _, shadows_again = _evaluate(world, recorded, candidate)
    admit_all()
    with transaction.atomic():
        live = [task_submit(tenant_id=world.tenant_id, requester_id=world.user_id,
                            agent=IO_AGENT, goal=f"bench io during evaluation {i}", input={},
                            script=None, actor=SYSTEM).task.pk for i in range(tasks)]
    admit_all()
    watch_until_ended(live, workers)
    during_wall, during_rate = _rate(live)
    say(f"  live during the evaluation: {during_wall} s, {during_rate} tasks/s")
    watch_until_ended(shadows_again, workers)
    settled = wait_settled(first)
    return {
        "live_wall_s": live_wall, "live_tasks_per_s": live_rate,
        "shadow_wall_s": shadow_wall, "shadow_tasks_per_s": shadow_rate,
        "shadow_succeeded": succeeded,
        "shadow_tool_calls_at_the_edge": edge["tool_calls"],
        "shadow_model_calls": edge["model_calls"],
        "shadow_to_live": round(shadow_rate / live_rate, 2)
        if shadow_rate and live_rate else None,
        "evaluation_cap": saved,
        "live_during_wall_s": during_wall, "live_during_tasks_per_s": during_rate,
        "live_during_to_alone": round(during_rate / live_rate, 2)
        if during_rate and live_rate else None,
        "evaluation_pass_rate": (settled.summary or {}).get("pass_rate"),
    }


def evaluation_table(doc: dict[str, Any]) -> str:
    rows = [
        ("recorded I/O tasks", doc["tasks"]),
        ("live tasks/s", doc.get("live_tasks_per_s")),
        ("shadow tasks/s (same concurrency)", doc.get("shadow_tasks_per_s")),
        ("shadow / live (floor 0.8)", doc.get("shadow_to_live")),
        ("tool calls the edge got from shadow tasks", doc.get("shadow_tool_calls_at_the_edge")),
        (f"live tasks/s during an evaluation (cap {doc.get('evaluation_cap')})",
         doc.get("live_during_tasks_per_s")),
        ("live during / alone (floor 0.8)", doc.get("live_during_to_alone")),
        ("pass rate of the evaluation", doc.get("evaluation_pass_rate")),
        ("targets met", doc.get("target_met")),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
