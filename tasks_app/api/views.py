"""Task endpoints: submit, list, detail, steps, events, context summaries (list,
roll back), cancel (one or many), input, resume, fail. One view per resource;
each method checks its input, calls one service (or selector) and renders.
Scoping: every lookup is by the caller's tenant, so another tenant's task is a
404."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from approvals_app.models import DecisionChannel
from approvals_app.selectors import open_request_of
from approvals_app.services.answers import task_provide_input
from foundations.api_access import require_own_task
from foundations.api_base import (
    CURSOR_PARAMETERS,
    AfterQuerySerializer,
    TenantAPIView,
    after_page,
    cursor_page,
)
from foundations.api_errors import error_responses
from foundations.errors import gone, invalid, not_found
from retention_app.selectors import archived_task_of_tenant
from workflows_app.services.runs import submit_run

from ..context.summaries import summary_exists, summary_list, summary_rollback
from ..machine import NON_TERMINAL
from ..models import Task
from ..selectors import events_after, steps_after, task_of_tenant, tasks_matching
from ..services.batches import BATCH_REFUSED, tasks_submit_batch
from ..services.tasks import (
    task_cancel,
    task_cancel_many,
    task_fail_by_operator,
    task_resume,
    task_submit,
)
from .serializers import (
    IDEMPOTENCY_KEY_PATTERN,
    BatchResultSerializer,
    BatchSubmitSerializer,
    BulkCancelResultSerializer,
    BulkCancelSerializer,
    CancelSerializer,
    EventSerializer,
    FailSerializer,
    InputSerializer,
    ResumeSerializer,
    StepSerializer,
    SummaryRollbackResultSerializer,
    SummaryRollbackSerializer,
    SummarySerializer,
    TaskDetailSerializer,
    TaskFilterSerializer,
    TaskSerializer,
    TaskSubmitSerializer,
)

TaskPage = cursor_page(TaskSerializer, "TaskPage")
StepPage = after_page(StepSerializer, "StepPage")
EventPage = after_page(EventSerializer, "EventPage")

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    required=False,
    description="1-200 printable ASCII characters. The same key with the same body returns the "
    "same task (200); with a different body it is a 409.",
)
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
TAGS = ["tasks"]


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ValidationError(
            {"Idempotency-Key": ["1 to 200 printable ASCII characters, no spaces"]}
        )
    return key


class TaskViewBase(TenantAPIView):
    """A task of the caller's tenant (another tenant's is a 404)."""

    def task(self, task_id: int) -> Task:
        task = task_of_tenant(self.access.tenant_id, task_id)
        if task is None:
            archived = archived_task_of_tenant(self.access.tenant_id, task_id)
            if archived is not None:
                raise gone("task_archived", f"Task {task_id} was archived: past its tenant's "
                           "retention, it is no longer online.",
                           archived_at=archived.archived_at.isoformat(),
                           archive=archived.archive.name)
            raise not_found("Task")
        return task

    def render_task(self, task_id: int, *, code: int = status.HTTP_200_OK) -> Response:
        task = self.task(task_id)
        return Response(TaskSerializer(task).data, status=code)


class TaskListView(TaskViewBase):
    """Tasks of the caller's tenant: list with filters and cursor pages; submit."""

    policy = {"GET": "task.read", "POST": "task.submit"}

    @extend_schema(
        operation_id="tasks_list",
        tags=TAGS,
        summary="List tasks, newest first",
        parameters=[TaskFilterSerializer, *CURSOR_PARAMETERS],
        responses={200: TaskPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.query(TaskFilterSerializer)
        qs = tasks_matching(
            tenant_id=self.access.tenant_id,
            statuses=sorted(f.get("status") or []),
            agent=f.get("agent"),
            created_after=f.get("created_after"),
            created_before=f.get("created_before"),
            trace_id=f.get("trace_id"),
            requester_id=self.access.user_id if f.get("mine") else None,
            agent_version=f.get("agent_version"),
            subject=f.get("subject"),
            parent=f.get("parent"),
        )
        return self.paginate(qs, lambda page: TaskSerializer(page, many=True).data)

    @extend_schema(
        operation_id="tasks_submit",
        tags=TAGS,
        summary="Submit a task",
        request=TaskSubmitSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: TaskSerializer,
            200: OpenApiResponse(
                TaskSerializer, description="Replay of an Idempotency-Key: the task it created."
            ),
            **error_responses(409),
        },
    )
    def post(self, request: Request) -> Response:
        key = _idempotency_key(request)
        data = self.validated(TaskSubmitSerializer)
        if data.get("workflow"):
            submitted = submit_run(
                tenant_id=self.access.tenant_id, requester_id=self.access.user_id,
                workflow=data["workflow"], goal=data["goal"], input=data["input"],
                idempotency_key=key, actor=self.access.actor, api_key_id=self.access.api_key_id)
        else:
            submitted = task_submit(
                tenant_id=self.access.tenant_id,
                requester_id=self.access.user_id,
                agent=data["agent"],
                goal=data["goal"],
                input=data["input"],
                script=data["script"],
                subject=data["subject"],
                idempotency_key=key,
                actor=self.access.actor,
                api_key_id=self.access.api_key_id,
            )
        task = submitted.task
        if task.requester_id == request.user.pk and isinstance(request.user, User):
            task.requester = request.user  # the caller: rendered without reading it again
        # Rendered as submitted: CREATED (admission may have started it since the commit).
        response = Response(
            TaskSerializer(task).data,
            status=status.HTTP_201_CREATED if submitted.created else status.HTTP_200_OK,
        )
        response["Location"] = f"/api/v1/tasks/{submitted.task.pk}"
        return response


class TaskBatchView(TaskViewBase):
    """Many tasks in one request, all or none (`services.batches`)."""

    policy = {"POST": "task.submit"}

    @extend_schema(
        operation_id="tasks_submit_batch",
        tags=TAGS,
        summary="Submit up to 1,000 tasks at once, all or none",
        description="Each task is checked as a single submission is, with its own "
        "`idempotency_key`. When any task is refused nothing is written, and the 400 lists "
        "each refused task's field errors by its index (`details.tasks`). Sending the same "
        "batch again returns the same tasks (`created: false`).",
        request=BatchSubmitSerializer,
        responses={201: BatchResultSerializer, 200: OpenApiResponse(
            BatchResultSerializer, description="Every task's key was used before: its tasks."),
            **error_responses()},
    )
    def post(self, request: Request) -> Response:
        serializer = BatchSubmitSerializer(data=request.data)
        if not serializer.is_valid():
            raise _batch_refused(serializer.errors)
        entries = tasks_submit_batch(
            tenant_id=self.access.tenant_id, requester_id=self.access.user_id,
            items=serializer.validated_data["tasks"], actor=self.access.actor,
            api_key_id=self.access.api_key_id)
        body = BatchResultSerializer({"tasks": entries}).data
        created = any(entry.created for entry in entries)
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


def _batch_refused(errors: Any) -> Exception:
    """A batch's field errors as the service reports its own (`services.batches`):
    `tasks`, a list of {index, errors} for the refused tasks only (DRF keys them
    by index, or lists an empty entry per valid task)."""
    per_task = errors.get("tasks") if isinstance(errors, dict) else None
    if isinstance(per_task, list) and all(isinstance(e, dict) for e in per_task):
        per_task = dict(enumerate(per_task))
    if isinstance(per_task, dict) and all(str(i).isdigit() for i in per_task):
        return invalid("invalid", BATCH_REFUSED, tasks=[
            {"index": int(i), "errors": e}
            for i, e in sorted(per_task.items(), key=lambda p: int(p[0])) if e])
    return ValidationError(errors)  # the batch itself: no list, an empty one, too long


class TaskDetailView(TaskViewBase):
    """One task, with the question, approval or reconciliation it waits on."""

    policy = {"GET": "task.read"}

    @extend_schema(
        operation_id="tasks_retrieve",
        tags=TAGS,
        summary="A task, with what it waits on",
        responses={200: TaskDetailSerializer, **error_responses()},
    )
    def get(self, request: Request, task_id: int) -> Response:
        task = self.task(task_id)
        context = {"open_request": open_request_of(task_id=task.pk) if task.is_waiting else None}
        return Response(TaskDetailSerializer(task, context=context).data)


class TaskStepsView(TaskViewBase):
    """A task's steps in order: decision, tool, arguments, key, attempt, output, error."""

    policy = {"GET": "task.read"}

    @extend_schema(
        operation_id="tasks_steps",
        tags=TAGS,
        summary="A task's steps, in order",
        parameters=[AfterQuerySerializer],
        responses={200: StepPage, **error_responses()},
    )
    def get(self, request: Request, task_id: int) -> Response:
        q = self.query(AfterQuerySerializer)
        task = self.task(task_id)
        steps = steps_after(task_id=task.pk, after_step_no=q["after"], limit=q["limit"] + 1)
        page = steps[: q["limit"]]
        return Response(
            {
                "results": StepSerializer(page, many=True).data,
                "next_after": page[-1].step_no if page else q["after"],
                "has_more": len(steps) > q["limit"],
            }
        )


class TaskEventsView(TaskViewBase):
    """A task's events after an id, in a stable order."""

    policy = {"GET": "task.read"}

    @extend_schema(
        operation_id="tasks_events",
        tags=TAGS,
        summary="A task's events after an id",
        description="Events in id order. Pass the returned `next_after` as `after` to continue: "
        "events committed while paging are neither skipped nor repeated.",
        parameters=[AfterQuerySerializer],
        responses={200: EventPage, **error_responses()},
    )
    def get(self, request: Request, task_id: int) -> Response:
        q = self.query(AfterQuerySerializer)
        task = self.task(task_id)
        events = events_after(task_id=task.pk, after_id=q["after"], limit=q["limit"] + 1)
        page = events[: q["limit"]]
        return Response(
            {
                "results": EventSerializer(page, many=True).data,
                "next_after": page[-1].pk if page else q["after"],
                "has_more": len(events) > q["limit"],
            }
        )


class TaskSummariesView(TaskViewBase):
    """A task's context summary versions, newest first, with the one in use."""

    policy = {"GET": "task.read"}

    @extend_schema(
        operation_id="tasks_summaries",
        tags=TAGS,
        summary="A task's context summary versions, newest first",
        responses={200: SummarySerializer(many=True), **error_responses()},
    )
    def get(self, request: Request, task_id: int) -> Response:
        task = self.task(task_id)
        rows = summary_list(task_id=task.pk, tenant_id=self.access.tenant_id)
        return Response(SummarySerializer(rows, many=True).data)


class TaskSummaryRollbackView(TaskViewBase):
    """Make an earlier summary version (0: none) the one the context uses again."""

    policy = {"POST": "task.summary_rollback"}

    @extend_schema(
        operation_id="tasks_summary_rollback",
        tags=TAGS,
        summary="Roll the context summary back to an earlier version",
        description="Later versions are deactivated (kept for audit) and a "
        "`summary_rolled_back` event is written; the next summary is built on this one. "
        "Version 0 drops the summary. `expected_version` is the task's version.",
        request=SummaryRollbackSerializer,
        responses={200: SummaryRollbackResultSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int, version: int) -> Response:
        data = self.validated(SummaryRollbackSerializer)
        task = self.task(task_id)
        tenant_id = self.access.tenant_id
        if version and not summary_exists(task_id=task.pk, tenant_id=tenant_id, version=version):
            raise not_found("Summary")
        done = summary_rollback(
            task_id=task.pk,
            tenant_id=tenant_id,
            version=version,
            actor=self.access.actor,
            expected_version=data.get("expected_version"),
            comment=data["comment"],
        )
        return Response(SummaryRollbackResultSerializer(done).data)


class TaskCancelView(TaskViewBase):
    """Cancel a task (a requester: only its own); a versioned transition."""

    policy = {"POST": "task.cancel"}

    @extend_schema(
        operation_id="tasks_cancel",
        tags=TAGS,
        summary="Cancel a task",
        request=CancelSerializer,
        responses={200: TaskSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(CancelSerializer)
        task = self.task(task_id)
        require_own_task(self.access, "task.cancel", requester_id=task.requester_id)
        task_cancel(
            task_id=task.pk,
            actor=self.access.actor,
            expected_version=data.get("expected_version"),
            reason=data["reason"],
        )
        return self.render_task(task.pk)


class TaskInputView(TaskViewBase):
    """Answer the open question of a task; the answer joins its context verbatim."""

    policy = {"POST": "task.input"}

    @extend_schema(
        operation_id="tasks_input",
        tags=TAGS,
        summary="Answer the agent's question",
        request=InputSerializer,
        responses={200: TaskSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(InputSerializer)
        task = self.task(task_id)
        require_own_task(self.access, "task.input", requester_id=task.requester_id)
        task_provide_input(
            task_id=task.pk,
            answer=data["answer"],
            actor=self.access.actor,
            expected_version=data.get("expected_version"),
            channel=DecisionChannel.API,
        )
        return self.render_task(task.pk)


class TaskResumeView(TaskViewBase):
    """Resume an escalated task (WAITING_FOR_HUMAN), optionally extending its budget."""

    policy = {"POST": "task.resume"}

    @extend_schema(
        operation_id="tasks_resume",
        tags=TAGS,
        summary="Resume an escalated task, optionally extending its budget",
        request=ResumeSerializer,
        responses={200: TaskSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(ResumeSerializer)
        task = self.task(task_id)
        task_resume(
            task_id=task.pk,
            actor=self.access.actor,
            expected_version=data.get("expected_version"),
            extend=dict(data.get("extend") or {}),
            comment=data["comment"],
        )
        return self.render_task(task.pk)


class TaskFailView(TaskViewBase):
    """End a waiting or escalated task as FAILED (operators)."""

    policy = {"POST": "task.fail"}

    @extend_schema(
        operation_id="tasks_fail",
        tags=TAGS,
        summary="End an escalated or waiting task as FAILED",
        request=FailSerializer,
        responses={200: TaskSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(FailSerializer)
        task = self.task(task_id)
        task_fail_by_operator(
            task_id=task.pk,
            actor=self.access.actor,
            expected_version=data.get("expected_version"),
            reason=data["reason"],
        )
        return self.render_task(task.pk)


class TaskBulkCancelView(TaskViewBase):
    """Cancel the unfinished tasks matching a filter (operators); bounded per call."""

    policy = {"POST": "task.cancel_many"}

    @extend_schema(
        operation_id="tasks_bulk_cancel",
        tags=TAGS,
        summary="Cancel unfinished tasks by filter",
        request=BulkCancelSerializer,
        responses={200: BulkCancelResultSerializer, **error_responses()},
    )
    def post(self, request: Request) -> Response:
        data = self.validated(BulkCancelSerializer)
        statuses = sorted(data.get("status") or NON_TERMINAL)
        qs = tasks_matching(
            tenant_id=self.access.tenant_id,
            statuses=statuses,
            agent=data.get("agent"),
            created_after=data.get("created_after"),
            created_before=data.get("created_before"),
            trace_id=data.get("trace_id"),
        ).order_by("id")
        ids = list(qs.values_list("id", flat=True)[: data["limit"] + 1])
        more = len(ids) > data["limit"]
        ids = ids[: data["limit"]]
        done: dict[str, Any] = task_cancel_many(
            task_ids=ids, actor=self.access.actor, reason=data["reason"]
        )
        return Response(
            {
                "matched": len(ids),
                "canceled": done["canceled"],
                "skipped": done["skipped"],
                "more": more,
            }
        )
