"""The chaos test's hands inside the database it points at (its own cluster):
run as a process, `python -m tests.system.chaos_driver setup|report`, with
DATABASE_URL and CELERY_BROKER_URL in the environment.

- `setup BASE`: migrate, make the `chaos` tenant, three HTTP tools on the
  test's fake downstream at BASE (a read, an idempotent write, a plain write
  with a status query) and an agent;
- `submit COUNT`: submit COUNT scripted tasks; prints their ids (JSON).
- `report`: each task's status and whether its history is whole (no step
  lost, event versions contiguous, the log replays to its status); JSON. On
  stderr, figures of the recovery sweeps (how many, by how many sweepers, the
  longest gaps between two).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import django


def kind_of(i: int) -> str:
    return ("read", "idempotent", "plain")[i % 3]


def script_for(i: int) -> list[dict[str, Any]]:
    ref = f"ref-{i}"
    second = {
        "read": {"tool": "chaos_read", "args": {"ref": ref, "again": True}},
        "idempotent": {"tool": "chaos_refund", "args": {"ref": ref, "cents": 100 + i}},
        "plain": {"tool": "chaos_notify", "args": {"ref": ref, "text": "shipped"}},
    }[kind_of(i)]
    return [{"tool": "chaos_read", "args": {"ref": ref}}, second, {"final": {"ref": ref}}]


def setup(base: str) -> None:
    from django.core.management import call_command

    from tests.factories import TenantFactory
    from tests.fakes.runtime import add_agent, add_tool

    call_command("migrate", verbosity=0)
    tenant = TenantFactory(name="chaos")
    common = {"kind": "http", "args_schema": {"type": "object"}, "timeout_s": 4.0}
    add_tool(tenant, "chaos_read", url=f"{base}/orders", side_effect="read", max_retries=5,
             **common)
    add_tool(tenant, "chaos_refund", url=f"{base}/refunds", side_effect="idempotent_write",
             max_retries=5, **common)
    add_tool(tenant, "chaos_notify", url=f"{base}/notes", side_effect="write", max_retries=0,
             status_url=f"{base}/note-status/{{key}}", **common)
    add_agent(tenant, "chaos", ["chaos_read", "chaos_refund", "chaos_notify"],
              model={"backend": "scripted", "name": "scripted"})


def submit(count: int) -> list[int]:
    from accounts_app.models import Tenant
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    tenant = Tenant.objects.get(name="chaos")
    return [
        task_submit(tenant_id=tenant.pk, requester_id=None, agent="chaos", goal=f"chaos {i}",
                    input={}, script=script_for(i), actor=SYSTEM).task.pk
        for i in range(count)
    ]


def report() -> list[dict[str, Any]]:
    from tasks_app.models import SweepRun, Task
    from tests.system.history import assert_history_intact

    runs = list(SweepRun.objects.order_by("started_at").values_list("started_at", "owner"))
    print(f"sweeps: {len(runs)}, owners {len({o for _, o in runs})}, "
          f"from {runs[0][0] if runs else None} to {runs[-1][0] if runs else None}",
          file=sys.stderr)
    gaps = sorted(((b[0] - a[0]).total_seconds(), str(a[0]))
                  for a, b in zip(runs, runs[1:], strict=False))
    print(f"longest gaps between sweeps: {gaps[-3:]}", file=sys.stderr)
    rows = []
    for task in Task.objects.filter(tenant__name="chaos").order_by("id"):
        try:
            assert_history_intact(task)
            history = ""
        except AssertionError as exc:
            history = str(exc) or "history broken"
        rows.append({"id": task.pk, "goal": task.goal, "status": task.status,
                     "history": history,
                     "keys": dict(task.steps.values_list("step_no", "idempotency_key"))})
    return rows


def main(argv: list[str]) -> None:
    django.setup()
    if argv[0] == "setup":
        setup(argv[1])
        print("null")
    elif argv[0] == "submit":
        print(json.dumps(submit(int(argv[1]))))
    elif argv[0] == "report":
        print(json.dumps(report()))
    else:
        raise SystemExit(f"unknown command {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
