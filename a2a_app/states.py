"""A task's status as an A2A `TaskState`: the one mapping table (the how-to shows it too).

A question waits for the client: INPUT_REQUIRED, and the client's next message
on the task answers it. An approval waits for one of the tenant's reviewers,
an authorization by a third party, out of band: AUTH_REQUIRED (the client
cannot grant it over A2A; a reviewer decides as usual). A reconciliation or an
escalation waits for the tenant's own people with nothing for the client to
do or give: WORKING, with a status message saying what it waits on.
"""
from __future__ import annotations

from a2a.types.a2a_pb2 import TaskState

from tasks_app.machine import TaskStatus

S = TaskStatus
STATE_OF: dict[str, TaskState] = {
    S.CREATED: TaskState.TASK_STATE_SUBMITTED,
    S.RUNNING: TaskState.TASK_STATE_WORKING,
    S.WAITING_FOR_INPUT: TaskState.TASK_STATE_INPUT_REQUIRED,
    S.WAITING_FOR_APPROVAL: TaskState.TASK_STATE_AUTH_REQUIRED,
    S.WAITING_FOR_RECONCILIATION: TaskState.TASK_STATE_WORKING,
    S.WAITING_FOR_HUMAN: TaskState.TASK_STATE_WORKING,
    S.SUCCEEDED: TaskState.TASK_STATE_COMPLETED,
    S.FAILED: TaskState.TASK_STATE_FAILED,
    S.CANCELED: TaskState.TASK_STATE_CANCELED,
}
# Where a stream ends (A2A's terminal and interrupted states): the client acts next.
FINAL_STATES = frozenset({
    TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED,
})
# The statuses an A2A state filter (ListTasks) stands for.
STATUSES_OF: dict[TaskState, list[str]] = {}
for _status, _state in STATE_OF.items():
    STATUSES_OF.setdefault(_state, []).append(_status)


def a2a_state(status: str) -> TaskState:
    return STATE_OF[TaskStatus(status)]
