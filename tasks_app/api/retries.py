"""Retry endpoints (operators): retry one FAILED or CANCELED task from a step,
or many by filter (bounded per call, like bulk cancel). The rules are
`tasks_app.retries.services`'."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_errors import error_responses
from foundations.errors import invalid
from workflows_app.services.runs import retry_step_of_node

from ..retries.services import (
    MAX_COMMENT,
    RETRYABLE,
    not_yet_retried,
    task_retry,
    task_retry_many,
)
from ..selectors import tasks_matching
from .serializers import BudgetExtensionSerializer, TaskSerializer
from .views import TAGS, TaskViewBase


class RetrySerializer(serializers.Serializer):
    from_step = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False,
        help_text="Default: the first step the task did not get past. Steps before it are "
        "inherited, not run again.")
    from_node = serializers.CharField(
        max_length=64, required=False,
        help_text="A workflow run: retry from this node's first step (instead of `from_step`).")
    budget = BudgetExtensionSerializer(
        required=False, help_text="Budget to add to the original's (usage starts from the "
        "inherited steps).")
    comment = serializers.CharField(max_length=MAX_COMMENT, required=False, allow_blank=True,
                                    default="")


class BulkRetrySerializer(serializers.Serializer):
    status = serializers.MultipleChoiceField(choices=[(s, s) for s in RETRYABLE], required=False,
                                             help_text="Default: FAILED and CANCELED.")
    agent = serializers.CharField(max_length=64, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    trace_id = serializers.CharField(max_length=64, required=False)
    failure_reason = serializers.CharField(max_length=64, required=False)
    budget = BudgetExtensionSerializer(required=False)
    comment = serializers.CharField(max_length=MAX_COMMENT, required=False, allow_blank=True,
                                    default="")
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False, default=100)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        filters = ("agent", "created_after", "created_before", "trace_id", "failure_reason")
        if not any(attrs.get(k) for k in filters):
            raise serializers.ValidationError({"non_field_errors": [
                "give at least one filter (agent, created range, trace_id, failure_reason)"]})
        return attrs


class RetriedSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    retry = serializers.IntegerField()
    from_step = serializers.IntegerField()


class SkippedSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    code = serializers.CharField()


class BulkRetryResultSerializer(serializers.Serializer):
    matched = serializers.IntegerField()
    retried = RetriedSerializer(many=True)
    skipped = SkippedSerializer(many=True)
    more = serializers.BooleanField(help_text="More tasks match: call again (a retried task "
                                    "is matched again; filter by created range to page).")


class TaskRetryView(TaskViewBase):
    """Retry a FAILED or CANCELED task from a step: a new task linked to it."""

    policy = {"POST": "task.retry"}

    @extend_schema(
        operation_id="tasks_retry", tags=TAGS,
        summary="Retry a FAILED or CANCELED task from a step (a new task)",
        request=RetrySerializer, responses={201: TaskSerializer, **error_responses(409)},
    )
    def post(self, request: Request, task_id: int) -> Response:
        data = self.validated(RetrySerializer)
        from_step = data.get("from_step")
        if data.get("from_node"):
            if from_step is not None:
                raise invalid("invalid", "The request is not valid.",
                              from_node=["give from_node or from_step, not both"])
            from_step = retry_step_of_node(self.task(task_id), data["from_node"])
        done = task_retry(tenant_id=self.access.tenant_id, task_id=task_id,
                          actor=self.access.actor, from_step=from_step,
                          budget=dict(data.get("budget") or {}), comment=data["comment"])
        response = self.render_task(done.task.pk, code=status.HTTP_201_CREATED)
        response["Location"] = f"/api/v1/tasks/{done.task.pk}"
        return response


class TaskBulkRetryView(TaskViewBase):
    """Retry the FAILED or CANCELED tasks matching a filter, each from its default step."""

    policy = {"POST": "task.retry"}

    @extend_schema(
        operation_id="tasks_bulk_retry", tags=TAGS, summary="Retry ended tasks by filter",
        request=BulkRetrySerializer, responses={200: BulkRetryResultSerializer,
                                                **error_responses()},
    )
    def post(self, request: Request) -> Response:
        data = self.validated(BulkRetrySerializer)
        qs = not_yet_retried(tasks_matching(
            tenant_id=self.access.tenant_id, statuses=sorted(data.get("status") or RETRYABLE),
            agent=data.get("agent"), created_after=data.get("created_after"),
            created_before=data.get("created_before"), trace_id=data.get("trace_id"),
        ))
        if data.get("failure_reason"):
            qs = qs.filter(failure_reason=data["failure_reason"])
        ids = list(qs.order_by("id").values_list("id", flat=True)[: data["limit"] + 1])
        more = len(ids) > data["limit"]
        ids = ids[: data["limit"]]
        done = task_retry_many(tenant_id=self.access.tenant_id, task_ids=ids,
                               actor=self.access.actor, budget=dict(data.get("budget") or {}),
                               comment=data["comment"])
        return Response({"matched": len(ids), **done, "more": more})
