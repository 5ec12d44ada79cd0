"""The A2A methods, each a call of Tether's task services (`a2a.server`'s
`RequestHandler`, behind the SDK's JSON-RPC dispatcher).

- SendMessage / SendStreamingMessage: a message on a task (its `taskId`, or a
  `contextId` that is one) answers the task's open question
  (`task_provide_input`); any other message starts a task of the agent
  (`task_submit`) or a run of the workflow (`submit_run`), its `messageId` the
  idempotency key (prefixed `a2a:`, apart from the REST API's keys), so a
  resend is the same task. SendMessage waits
  until the task ends or waits for someone, unless `returnImmediately`.
- GetTask, ListTasks: the tasks of the addressed agent (the runs of the
  addressed workflow) in the caller's tenant (every role may read the
  tenant's tasks), newest first.
- CancelTask: `task_cancel`. SubscribeToTask: the stream of a task not ended.
- Push notifications and the extended card: not offered (the card says so).
The role policy (`foundations.api_access`) applies as on the REST API; a task of
another tenant or agent is not found.
"""
from __future__ import annotations

import math
import re
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from datetime import UTC
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event as A2AEvent
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from channels.db import database_sync_to_async
from django.db.models import QuerySet

from approvals_app.models import DecisionChannel
from approvals_app.services.answers import task_provide_input
from foundations.api_access import may, require_own_task
from foundations.errors import DomainError, ErrorKind
from tasks_app.api.serializers import IDEMPOTENCY_KEY_PATTERN
from tasks_app.live.stream import End, Recorded, task_stream
from tasks_app.machine import TERMINAL
from tasks_app.models import Event
from tasks_app.models import Task as TetherTask
from tasks_app.selectors import tasks_of_tenant
from tasks_app.services.tasks import task_cancel, task_submit
from workflows_app.models import Workflow
from workflows_app.services.runs import submit_run

from .caller import Door
from .convert import a2a_task, answer_of, goal_and_input, result_artifact_of, status_of
from .states import FINAL_STATES, STATUSES_OF, a2a_state

KEY_PREFIX = "a2a:"
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
T = TypeVar("T")


def _door(context: ServerCallContext) -> Door:
    return context.state["door"]


# A refusal's kind as A2A's error; any other (forbidden, conflict, gone, quota
# exceeded) is an InvalidRequest. Tether's own code, details and whether a
# retry may succeed go along in `data`.
ERROR_OF_KIND: dict[ErrorKind, type[A2AError]] = {
    ErrorKind.NOT_FOUND: TaskNotFoundError,
    ErrorKind.INVALID: InvalidParamsError,
    ErrorKind.UNAVAILABLE: InternalError,
}


def a2a_error(exc: DomainError) -> A2AError:
    """A service's refusal as the protocol's error (nothing was changed)."""
    data = {"code": exc.code, "retryable": exc.retryable,
            **({"details": exc.details} if exc.details else {})}
    return ERROR_OF_KIND.get(exc.kind, InvalidRequestError)(message=exc.message, data=data)


async def _db(fn: Callable[..., T], *args: Any) -> T:
    """`fn` in a thread with a database connection, a service's refusal as A2A's error."""
    try:
        return await database_sync_to_async(fn)(*args)
    except DomainError as exc:
        raise a2a_error(exc) from None


def _allowed(door: Door, action: str) -> None:
    if not may(door.access.role, action):
        raise DomainError("role_required", f"the {door.access.role} role may not do {action}",
                          kind=ErrorKind.FORBIDDEN)


def _tasks(door: Door) -> QuerySet[TetherTask]:
    """The tasks A2A shows this caller: of its tenant, and of the addressed
    agent (or the runs of the addressed workflow)."""
    tasks = tasks_of_tenant(door.access.tenant_id)
    if isinstance(door.target, Workflow):
        return tasks.filter(workflow_run__workflow_id=door.target.pk)
    return tasks.filter(agent_id=door.target.pk)


def _visible(door: Door, task_id: str) -> TetherTask | None:
    return _tasks(door).filter(pk=int(task_id)).first() if task_id.isdigit() else None


def _task(door: Door, task_id: str) -> TetherTask:
    task = _visible(door, task_id)
    if task is None:
        raise TaskNotFoundError(message=f"task {task_id!r} not found")
    return task


def _last_event_id(task_id: int) -> int:
    return Event.objects.filter(task_id=task_id).order_by("-id").values_list("id", flat=True) \
        .first() or 0


def _send(door: Door, message: Message) -> tuple[int, int]:
    """Answer or submit; the task and the id of its last event before that."""
    target = _visible(door, message.task_id or message.context_id) \
        if (message.task_id or message.context_id) else None
    if message.task_id and target is None:
        raise TaskNotFoundError(message=f"task {message.task_id!r} not found")
    access = door.access
    if target is not None:
        _allowed(door, "task.input")
        require_own_task(access, "task.input", requester_id=target.requester_id)
        answer = answer_of(message)
        after = _last_event_id(target.pk)
        task_provide_input(task_id=target.pk, answer=answer, actor=access.actor,
                           channel=DecisionChannel.API)
        return target.pk, after
    _allowed(door, "task.submit")
    key = KEY_PREFIX + message.message_id
    if not message.message_id or not _KEY.fullmatch(key):
        raise InvalidParamsError(message="messageId: 1 to 196 printable ASCII characters, "
                                 "no spaces (it is the task's idempotency key)")
    is_workflow = isinstance(door.target, Workflow)
    # A workflow's goal is optional (its run is named for it); its input is what matters.
    goal, input = goal_and_input(message, goal_required=not is_workflow)
    if is_workflow:
        submitted = submit_run(tenant_id=access.tenant_id, requester_id=access.user_id,
                               workflow=door.target.name, goal=goal, input=input,
                               idempotency_key=key, actor=access.actor,
                               api_key_id=access.api_key_id)
    else:
        submitted = task_submit(tenant_id=access.tenant_id, requester_id=access.user_id,
                                agent=door.target.name, goal=goal, input=input,
                                idempotency_key=key, actor=access.actor,
                                api_key_id=access.api_key_id)
    return submitted.task.pk, 0


def _view(task_id: int, history_length: int | None = None) -> Task:
    return a2a_task(TetherTask.objects.get(pk=task_id), history_length=history_length)


def _moved(task_id: int) -> tuple[TaskStatusUpdateEvent, TaskArtifactUpdateEvent | None]:
    """What a stream says when the task's status moved: the status, and the
    result when it succeeded (sent first)."""
    task = TetherTask.objects.get(pk=task_id)
    ref = str(task.pk)  # the task's id, and its context's
    artifact = result_artifact_of(task)
    return (TaskStatusUpdateEvent(task_id=ref, context_id=ref, status=status_of(task)),
            None if artifact is None else TaskArtifactUpdateEvent(
                task_id=ref, context_id=ref, artifact=artifact, last_chunk=True))


async def follow(task_id: int, *, after: int, first: Task,
                 until_first_final: bool) -> AsyncGenerator[A2AEvent]:
    """The task, then an update each time its A2A state changes, until it ends
    or waits for someone (A2A's terminal and interrupted states).
    `until_first_final`: stop at once when the task already is in one (a send;
    a subscriber to a task waiting on a reviewer waits on with it)."""
    yield first
    shown = first.status.state
    if until_first_final and shown in FINAL_STATES:
        return
    # the shared event source (`tasks_app.live.stream`), for as long as the
    # subscriber stays: a task waiting on a reviewer may wait for days
    async with aclosing(task_stream(task_id, after=after, idle_s=math.inf)) as items:
        async for item in items:
            ended = isinstance(item, End)
            if not ended:
                if not isinstance(item, Recorded):
                    continue  # tokens and keep-alives: A2A streams states, not previews
                payload = item.event["payload"] or {}
                moved_to, came_from = payload.get("to"), payload.get("from")
                if not moved_to or a2a_state(moved_to) == shown:
                    continue
                if (came_from and a2a_state(came_from) == shown
                        and a2a_state(moved_to) not in FINAL_STATES):
                    # the next state from the one shown, passed through (working):
                    # said as the event says it, though the task may be further on
                    # by now (an event replayed from before what was shown is not
                    # taken at its word: the task is read instead, below)
                    shown = a2a_state(moved_to)
                    ref = str(task_id)
                    yield TaskStatusUpdateEvent(task_id=ref, context_id=ref,
                                                status=TaskStatus(state=shown))
                    continue
            status, result = await _db(_moved, task_id)  # as it is now: it may have moved on
            if status.status.state != shown:
                shown = status.status.state
                if result is not None:
                    yield result
                yield status
            if ended or shown in FINAL_STATES:
                return


def _listed(door: Door, params: ListTasksRequest) -> ListTasksResponse:
    tasks = _tasks(door)
    if params.context_id:
        tasks = tasks.filter(pk=int(params.context_id)) if params.context_id.isdigit() \
            else tasks.none()
    if params.status != TaskState.TASK_STATE_UNSPECIFIED:
        tasks = tasks.filter(status__in=STATUSES_OF.get(params.status, []))
    if params.HasField("status_timestamp_after"):
        tasks = tasks.filter(
            updated_at__gt=params.status_timestamp_after.ToDatetime(tzinfo=UTC))
    total = tasks.count()
    if params.page_token:
        if not params.page_token.isdigit():
            raise InvalidParamsError(message="pageToken: a token from an earlier page")
        tasks = tasks.filter(pk__lt=int(params.page_token))
    if params.page_size < 0:
        raise InvalidParamsError(message=f"pageSize: 1 to {MAX_LIST_TASKS_PAGE_SIZE}")
    size = min(params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE)
    page = list(tasks.order_by("-id")[:size + 1])
    more = len(page) > size
    page = page[:size]
    history = params.history_length if params.HasField("history_length") else None
    return ListTasksResponse(
        tasks=[a2a_task(t, history_length=history) for t in page],
        next_page_token=str(page[-1].pk) if more else "", page_size=size, total_size=total)


def _canceled(door: Door, task_id: str) -> Task:
    _allowed(door, "task.cancel")
    task = _task(door, task_id)
    require_own_task(door.access, "task.cancel", requester_id=task.requester_id)
    if task.status in TERMINAL:
        raise TaskNotCancelableError(message=f"the task is {task.status}")
    try:
        task_cancel(task_id=task.pk, actor=door.access.actor, reason="canceled over A2A")
    except DomainError as exc:
        if exc.kind != ErrorKind.CONFLICT:
            raise
        raise TaskNotCancelableError(message=exc.message) from None  # it ended meanwhile
    return _view(task.pk)


class TetherRequestHandler(RequestHandler):
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        door = _door(context)
        task = await _db(_task, door, params.id)
        history = params.history_length if params.HasField("history_length") else None
        return await _db(_view, task.pk, history)

    async def on_list_tasks(self, params: ListTasksRequest,
                            context: ServerCallContext) -> ListTasksResponse:
        return await _db(_listed, _door(context), params)

    async def on_cancel_task(self, params: CancelTaskRequest,
                             context: ServerCallContext) -> Task:
        return await _db(_canceled, _door(context), params.id)

    async def on_message_send(self, params: SendMessageRequest,
                              context: ServerCallContext) -> Task:
        task_id, after = await _db(_send, _door(context), params.message)
        first = await _db(_view, task_id)
        if params.configuration.return_immediately:
            return first
        async for _update in follow(task_id, after=after, first=first, until_first_final=True):
            pass  # until the task ends or waits for someone
        return await _db(_view, task_id)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[A2AEvent]:
        task_id, after = await _db(_send, _door(context), params.message)
        first = await _db(_view, task_id)
        async for update in follow(task_id, after=after, first=first, until_first_final=True):
            yield update

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[A2AEvent]:
        task = await _db(_task, _door(context), params.id)
        if task.status in TERMINAL:
            raise UnsupportedOperationError(message=f"the task has ended ({task.status})")
        after = await _db(_last_event_id, task.pk)
        first = await _db(_view, task.pk)
        async for update in follow(task.pk, after=after, first=first, until_first_final=False):
            yield update

    async def _no_push_notifications(self, params: Any, context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError

    # Not offered (the card says `pushNotifications: false`): the four methods refuse.
    on_create_task_push_notification_config = _no_push_notifications
    on_get_task_push_notification_config = _no_push_notifications
    on_list_task_push_notification_configs = _no_push_notifications
    on_delete_task_push_notification_config = _no_push_notifications

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError
