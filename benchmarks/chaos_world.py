"""The chaos benchmark's hands inside its private database: run as a process,
`python -m benchmarks.chaos_world setup|submit|report ...`, with
DATABASE_URL and CELERY_BROKER_URL pointing at the bench's own cluster and
Redis (the bench process itself stays on the bench database).

- `setup BASE TENANT...`: migrate; for each tenant, three HTTP tools on the
  downstream at BASE (a read, an idempotent write, a plain write with a status
  query) and the `chaos` agent (scripted model);
- `submit TENANT COUNT`: COUNT scripted tasks, task i a read then a read, an
  idempotent write or a plain write (i mod 3), its `ref` `TENANT-i`; prints
  their ids (JSON);
- `report TENANT`: statuses, tasks whose history is not whole (event versions
  going back, a transition lost or recorded twice, a step number skipped), JSON.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import django

AGENT = "chaos"
KINDS = ("read", "idempotent", "plain")


def script_for(tenant: str, i: int) -> list[dict[str, Any]]:
    ref = f"{tenant}-{i}"
    second = {
        "read": {"tool": "chaos_read", "args": {"ref": ref, "again": True}},
        "idempotent": {"tool": "chaos_refund", "args": {"ref": ref, "cents": 100 + i}},
        "plain": {"tool": "chaos_notify", "args": {"ref": ref, "text": "shipped"}},
    }[KINDS[i % 3]]
    return [{"tool": "chaos_read", "args": {"ref": ref}}, second, {"final": {"ref": ref}}]


def setup(base: str, tenants: list[str]) -> None:
    from django.core.management import call_command

    from accounts_app.models import Tenant
    from tasks_app.services.releases import agent_seed
    from tools_app.models import Tool

    from .world import BIG_BUDGET

    call_command("migrate", verbosity=0, skip_checks=True)
    common = {"kind": "http", "args_schema": {"type": "object"}, "timeout_s": 4.0}
    for name in tenants:
        tenant, _ = Tenant.objects.get_or_create(name=name)
        for tool, path, side_effect, retries, extra in (
            ("chaos_read", "/read", "read", 5, {}),
            ("chaos_refund", "/write", "idempotent_write", 5, {}),
            ("chaos_notify", "/note", "write", 0,
             {"status_url": f"{base}/note-status/{{key}}"}),
        ):
            Tool.objects.update_or_create(tenant=tenant, name=tool, defaults={
                "url": f"{base}{path}", "side_effect": side_effect, "max_retries": retries,
                **common, **extra})
        agent_seed(tenant_id=tenant.pk, name=AGENT, defaults={
            "tools": ["chaos_read", "chaos_refund", "chaos_notify"], "on_exhaustion": "fail",
            "max_duration_s": 86_400, "max_concurrent_tasks": BIG_BUDGET,
            "model": {"backend": "scripted", "name": "scripted"}})


def submit(tenant_name: str, count: int) -> list[int]:
    from accounts_app.models import Tenant
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    tenant = Tenant.objects.get(name=tenant_name)
    return [task_submit(tenant_id=tenant.pk, requester_id=None, agent=AGENT,
                        goal=f"chaos {tenant_name}-{i}", input={},
                        script=script_for(tenant_name, i), actor=SYSTEM).task.pk
            for i in range(count)]


def report(tenant_name: str) -> dict[str, Any]:
    from collections import defaultdict

    from django.db.models import Count

    from tasks_app.models import Event, Step, Task

    statuses = dict(Task.objects.filter(tenant__name=tenant_name).values_list("status")
                    .annotate(n=Count("id")))
    tasks = dict(Task.objects.filter(tenant__name=tenant_name).values_list("id", "version"))
    events: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for task_id, version, payload in (Event.objects.filter(task_id__in=tasks).order_by("id")
                                      .values_list("task_id", "task_version", "payload")):
        events[task_id].append((version, "from" in payload))
    steps: dict[int, list[int]] = defaultdict(list)
    for task_id, step_no in (Step.objects.filter(task_id__in=tasks).order_by("step_no")
                             .values_list("task_id", "step_no")):
        steps[task_id].append(step_no)
    # Whole: versions never go back, the transitions are versions 1..N (none
    # lost, none twice), the steps are numbered 1..n.
    gaps = [task_id for task_id, version in tasks.items()
            if [v for v, _ in events[task_id]] != sorted(v for v, _ in events[task_id])
            or [v for v, moved in events[task_id] if moved] != list(range(1, version + 1))
            or steps[task_id] != list(range(1, len(steps[task_id]) + 1))]
    return {"statuses": statuses, "history_gaps": gaps, "ids": list(tasks)}


def main(argv: list[str]) -> None:
    django.setup()
    if argv[0] == "setup":
        setup(argv[1], argv[2:])
        print("null")
    elif argv[0] == "submit":
        print(json.dumps(submit(argv[1], int(argv[2]))))
    elif argv[0] == "report":
        print(json.dumps(report(argv[1])))
    else:
        raise SystemExit(f"unknown command {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
