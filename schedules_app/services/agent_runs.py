"""The `agent` target kind: a scheduled run of an agent is a task, submitted as
an API client would submit it (`tasks_app.services.tasks.task_submit`)."""
from __future__ import annotations

from tasks_app.selectors import agent_of_tenant
from tasks_app.services.tasks import Submitted, task_submit

from ..starters import ScheduledStart


def agent_run_start(start: ScheduledStart) -> Submitted:
    return task_submit(tenant_id=start.tenant_id, requester_id=start.requester_id,
                       agent=start.name, goal=start.goal, input=start.input,
                       script=start.script, idempotency_key=start.idempotency_key,
                       actor=start.actor)


def agent_exists(tenant_id: int, name: str) -> bool:
    return agent_of_tenant(tenant_id, name) is not None
