"""Schedule endpoints: everyone in the tenant reads; operators and admins create,
change, pause, resume and delete (`schedule.read`, `schedule.write`). Every
check of what a schedule may hold is the service's (`services.schedules`):
the serializers check types and bounds only."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tasks_app.services.tasks import MAX_SCRIPT_ENTRIES

from ..models import CatchUp, Overlap, RunOutcome, Schedule, ScheduleRun
from ..selectors import runs_of_schedule, schedule_of_tenant, schedules_of_tenant
from ..services.schedules import (
    MAX_GOAL_CHARS,
    MAX_TARGET_NAME,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_update,
)

TAGS = ["schedules"]


class TargetSerializer(serializers.Serializer):
    """Documentation only: one of the two, checked by the service."""

    agent = serializers.CharField(max_length=MAX_TARGET_NAME, required=False)
    workflow = serializers.CharField(max_length=MAX_TARGET_NAME, required=False)


class ScheduleWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    target = serializers.DictField(
        child=serializers.CharField(max_length=MAX_TARGET_NAME),
        help_text='What runs: {"agent": name} or {"workflow": name}, of this tenant.')
    input = serializers.DictField(child=serializers.JSONField(), required=False)
    goal = serializers.CharField(
        max_length=MAX_GOAL_CHARS, allow_blank=True, required=False,
        help_text='An agent run\'s goal (default: "Scheduled run of <agent>").')
    script = serializers.ListField(
        child=serializers.JSONField(), allow_null=True, required=False,
        max_length=MAX_SCRIPT_ENTRIES, help_text="A scripted agent's decisions, as for a task.")
    cron = serializers.CharField(
        max_length=100, help_text="Five fields: minute hour day-of-month month day-of-week.")
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="The IANA zone the cron reads in (default UTC).")
    overlap = serializers.ChoiceField(
        choices=Overlap.choices, required=False,
        help_text="While the previous run goes on: skip the due time (default), queue it "
        "until that run ends, or allow both.")
    catch_up = serializers.ChoiceField(
        choices=CatchUp.choices, required=False,
        help_text="Due times missed while no worker swept: run none (default), the latest "
        "one, or all (the latest 10 at most).")


class ScheduleSerializer(serializers.Serializer):
    name = serializers.CharField()
    target = serializers.DictField(child=serializers.CharField())
    input = serializers.DictField(child=serializers.JSONField())
    goal = serializers.CharField(allow_blank=True)
    script = serializers.ListField(child=serializers.JSONField(), allow_null=True)
    cron = serializers.CharField()
    timezone = serializers.CharField()
    overlap = serializers.ChoiceField(choices=Overlap.choices)
    catch_up = serializers.ChoiceField(choices=CatchUp.choices)
    paused = serializers.BooleanField()
    next_due_at = serializers.DateTimeField(help_text="The next due time (UTC).")
    last_due_at = serializers.DateTimeField(
        allow_null=True, help_text="The last due time handled (run or skipped).")
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, default=None,
        help_text="Whose runs these are: the runs' requester.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ScheduleRunSerializer(serializers.Serializer):
    due_at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=RunOutcome.choices)
    task_id = serializers.IntegerField(allow_null=True, help_text="The run's task, if started.")
    task_status = serializers.CharField(source="task.status", allow_null=True, default=None)
    error = serializers.CharField(allow_blank=True, help_text="Why a failed run did not start.")
    created_at = serializers.DateTimeField()


ScheduleRunPage = cursor_page(ScheduleRunSerializer, "ScheduleRunPage")


def _found(tenant_id: int, name: str) -> Schedule:
    schedule = schedule_of_tenant(tenant_id, name)
    if schedule is None:
        raise not_found("Schedule")
    return schedule


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "name"}


class ScheduleListView(TenantAPIView):
    """The tenant's schedules: list (everyone), create (operators, admins)."""

    policy = {"GET": "schedule.read", "POST": "schedule.write"}

    @extend_schema(operation_id="schedules_list", tags=TAGS, summary="List schedules",
                   responses={200: ScheduleSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        schedules = schedules_of_tenant(self.access.tenant_id).select_related("created_by")
        return Response(ScheduleSerializer(schedules, many=True).data)

    @extend_schema(operation_id="schedules_create", tags=TAGS, summary="Create a schedule",
                   request=ScheduleWriteSerializer,
                   responses={201: ScheduleSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = self.validated(ScheduleWriteSerializer)
        schedule = schedule_create(tenant_id=self.access.tenant_id, name=data["name"],
                                   actor=self.access.actor, **_fields(data))
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)


class ScheduleDetailView(TenantAPIView):
    """One schedule: read (everyone), change or delete (operators, admins)."""

    policy = {"GET": "schedule.read", "PATCH": "schedule.write", "DELETE": "schedule.write"}

    @extend_schema(operation_id="schedules_retrieve", tags=TAGS, summary="A schedule",
                   responses={200: ScheduleSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        return Response(ScheduleSerializer(_found(self.access.tenant_id, name)).data)

    @extend_schema(operation_id="schedules_update", tags=TAGS, summary="Change a schedule",
                   description="A changed cron or time zone gives a new next due time.",
                   request=ScheduleWriteSerializer,
                   responses={200: ScheduleSerializer, **error_responses()})
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(ScheduleWriteSerializer, partial=True)
        schedule = schedule_update(tenant_id=self.access.tenant_id, name=name, changes=data,
                                   actor=self.access.actor)
        return Response(ScheduleSerializer(schedule).data)

    @extend_schema(operation_id="schedules_destroy", tags=TAGS,
                   summary="Delete a schedule (the tasks it started stay)",
                   responses={204: None, **error_responses()})
    def delete(self, request: Request, name: str) -> Response:
        schedule_delete(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SchedulePauseView(TenantAPIView):
    policy = {"POST": "schedule.write"}

    @extend_schema(operation_id="schedules_pause", tags=TAGS, request=None,
                   summary="Pause a schedule (no due time fires until it resumes)",
                   responses={200: ScheduleSerializer, **error_responses()})
    def post(self, request: Request, name: str) -> Response:
        schedule = schedule_pause(tenant_id=self.access.tenant_id, name=name,
                                  actor=self.access.actor)
        return Response(ScheduleSerializer(schedule).data)


class ScheduleResumeView(TenantAPIView):
    policy = {"POST": "schedule.write"}

    @extend_schema(operation_id="schedules_resume", tags=TAGS, request=None,
                   summary="Resume a schedule from its next due time after now "
                   "(the due times passed while paused do not run)",
                   responses={200: ScheduleSerializer, **error_responses()})
    def post(self, request: Request, name: str) -> Response:
        schedule = schedule_resume(tenant_id=self.access.tenant_id, name=name,
                                   actor=self.access.actor)
        return Response(ScheduleSerializer(schedule).data)


class ScheduleRunsView(TenantAPIView):
    """A schedule's due times and what each did, newest first."""

    policy = {"GET": "schedule.read"}

    @extend_schema(operation_id="schedules_runs", tags=TAGS, summary="A schedule's runs",
                   parameters=CURSOR_PARAMETERS,
                   responses={200: ScheduleRunPage, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        schedule = _found(self.access.tenant_id, name)
        runs = runs_of_schedule(schedule.pk).select_related("task")

        def render(page: list[ScheduleRun]) -> list[dict[str, Any]]:
            return list(ScheduleRunSerializer(page, many=True).data)

        return self.paginate(runs, render)
