"""What the bench runs against: its tenant, tools, agent, console user and
session, and the scripts of its tasks (the scripted model).

Everything is created idempotently, so the bench can run again and again on
the same database; every run's tasks are told apart by their ids.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import transaction

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import api_key_create, tenant_create, user_ensure
from foundations.actors import SYSTEM, Actor
from tasks_app.machine import NON_TERMINAL
from tasks_app.models import Task
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.releases import agent_seed
from tasks_app.services.tasks import task_cancel, task_submit
from tools_app.models import Tool

from .tools import BENCH_TOOLS

TENANT = "bench"
AGENT = "bench"
USERNAME = "bench-operator"
BIG_BUDGET = 1_000_000


@dataclass(frozen=True)
class World:
    tenant_id: int
    agent_id: int
    user_id: int


def world_ensure() -> World:
    with transaction.atomic():
        tenant = tenant_create(name=TENANT)
        for spec in BENCH_TOOLS:
            Tool.objects.update_or_create(
                tenant=tenant,
                name=spec["name"],
                defaults={k: v for k, v in spec.items() if k != "name"},
            )
        agent = agent_seed(
            tenant_id=tenant.pk,
            name=AGENT,
            defaults={
                "description": "Benchmark agent: scripted model, instant tools.",
                "model": {"backend": "scripted", "name": "scripted", "system_prompt": ""},
                "tools": [t["name"] for t in BENCH_TOOLS],
                "max_steps": BIG_BUDGET,
                "max_model_calls": BIG_BUDGET,
                "max_tool_calls": BIG_BUDGET,
                "max_tokens": 2_000_000_000,
                "max_duration_s": 86_400,
                "max_concurrent_tasks": BIG_BUDGET,
                "on_exhaustion": "fail",
            },
        )
        user = user_ensure(tenant=tenant, username=USERNAME, role=Role.OPERATOR)
    return World(tenant_id=tenant.pk, agent_id=agent.pk, user_id=user.pk)


def tenant_of(world: World) -> Tenant:
    return Tenant.objects.get(pk=world.tenant_id)


def session_cookie(world: World) -> str:
    """A logged-in console session for the bench user (the WebSocket and pages use it)."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(pk=world.user_id)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return store.session_key or ""


def api_key(world: World) -> str:
    from django.contrib.auth import get_user_model

    return api_key_create(user=get_user_model().objects.get(pk=world.user_id))


def step_script(steps: int, *, salt: str = "") -> list[dict[str, Any]]:
    """`steps` model decisions: tool calls alternating the read and the write, then a final."""
    script: list[dict[str, Any]] = []
    for n in range(1, steps):
        tool = "bench_read" if n % 2 else "bench_write"
        script.append({"tool": tool, "args": {"n": n, "value": f"{salt}{n}"}})
    script.append({"final": {"steps": steps}})
    return script


def submit(world: World, script: list[dict[str, Any]], *, goal: str) -> int:
    return task_submit(
        tenant_id=world.tenant_id,
        requester_id=world.user_id,
        agent=AGENT,
        goal=goal,
        input={},
        script=script,
        actor=SYSTEM,
    ).task.pk


def submit_running(world: World, script: list[dict[str, Any]], *, goal: str) -> int:
    """`submit`, then admission in this process: the task is RUNNING on return, for
    a probe that drives it here (a submission hands admission to a worker
    when a broker is configured, `services.admission`)."""
    task_id = submit(world, script, goal=goal)
    admit_created_tasks()
    return task_id


def cancel_open(world: World, task_ids: list[int]) -> None:
    """Cancel what a phase left open, so later runs do not see it waiting."""
    actor = Actor(name="bench", role="system")
    open_ids = Task.objects.filter(pk__in=task_ids, status__in=NON_TERMINAL).values_list(
        "pk", flat=True
    )
    for task_id in open_ids:
        # Best effort: the figures are already taken; a task that ended meanwhile is fine.
        with suppress(Exception):
            task_cancel(task_id=task_id, actor=actor, reason="bench cleanup")
