"""The chaos benchmark's hands inside its private database: run as a process,
`python -m tasks_app.bench.chaos_world setup|submit|report ...`, with
DATABASE_URL and CELERY_BROKER_URL pointing at the bench's own cluster and
Redis (the bench process itself stays on the bench database).

- `setup BASE TENANT...`: migrate; for each tenant, three HTTP tools on the
  downstream at BASE (a read, an idempotent write, a plain write with a status
  query) and the `chaos` agent (scripted model);
- `submit TENANT COUNT`: COUNT scripted tasks, task i a read then a read, an
  idempotent write or a plain write (i mod 3), its `ref` `TENANT-i`; prints
  their ids (JSON);
- `report TENANT`: statuses, tasks whose event versions are not contiguous
  (a lost or doubled step), JSON.
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

    from tasks_app.models import Tenant
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
    from tasks_app.models import Tenant
    from tasks_app.services.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    tenant = Tenant.objects.get(name=tenant_name)
    return [task_submit(tenant_id=tenant.pk, requester_id=None, agent=AGENT,
                        goal=f"chaos {tenant_name}-{i}", input={},
                        script=script_for(tenant_name, i), actor=SYSTEM).task.pk
            for i in range(count)]


def report(tenant_name: str) -> dict[str, Any]:
    from django.db.models import Count, Max, Min

    from tasks_app.models import Event, Task

    statuses: dict[str, int] = {}
    for status, n in (Task.objects.filter(tenant__name=tenant_name).values_list("status")
                      .annotate(n=Count("id"))):
        statuses[status] = n
    # Versions 1..N with no gap and no repeat: no step lost, none recorded twice.
    gaps = [row["task_id"] for row in Event.objects.filter(tenant__name=tenant_name)
            .values("task_id").annotate(n=Count("id"), lo=Min("task_version"),
                                        hi=Max("task_version"),
                                        distinct=Count("task_version", distinct=True))
            if not (row["n"] == row["distinct"] == row["hi"] - row["lo"] + 1)]
    return {"statuses": statuses, "history_gaps": gaps,
            "ids": list(Task.objects.filter(tenant__name=tenant_name)
                        .values_list("id", flat=True))}


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
