"""Workflow endpoints: register, read, change, version history, release.

`definition` is the parsed object or a YAML (or JSON) string; every check is
the service's (`workflows_app.services.workflows`), and a definition's
problems come back as field errors under `definition.<path>`
(`definition.nodes[2].args.order_id`).
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_access import may
from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import forbidden, not_found

from ..models import Workflow, WorkflowVersion
from ..selectors import versions_of, workflow_named, workflows_of
from ..services.workflows import (
    workflow_create,
    workflow_promote,
    workflow_release,
    workflow_update,
)

TAGS = ["workflows"]


class WorkflowReleaseSerializer(serializers.Serializer):
    candidate = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    percent = serializers.IntegerField(min_value=0, max_value=100)


class WorkflowSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    published = serializers.BooleanField()
    current_version = serializers.IntegerField()
    latest_version = serializers.SerializerMethodField()
    release = serializers.SerializerMethodField()
    definition = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_latest_version(self, workflow: Workflow) -> int:
        return int(versions_of(workflow).values_list("number", flat=True).first() or 0)

    def get_release(self, workflow: Workflow) -> dict[str, Any] | None:
        if workflow.release_candidate is None:
            return None
        return {"candidate": workflow.release_candidate, "percent": workflow.release_percent}

    def get_definition(self, workflow: Workflow) -> Any:
        """The current version's definition."""
        return (versions_of(workflow).filter(number=workflow.current_version)
                .values_list("definition", flat=True).first())


class WorkflowWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    definition = serializers.JSONField(
        help_text="The definition: an object, or its YAML or JSON text.")
    enabled = serializers.BooleanField(required=False)
    published = serializers.BooleanField(
        required=False, help_text="Visible to the open protocols (A2A, MCP). Default false.")
    release = WorkflowReleaseSerializer(required=False, allow_null=True)
    promote = serializers.IntegerField(
        min_value=1, required=False,
        help_text="Make this version current (a promotion, or a rollback to an earlier one).")


class VersionSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    definition = serializers.JSONField()
    source = serializers.CharField()  # type: ignore[assignment]
    diff = serializers.JSONField()
    actor = serializers.CharField()
    actor_role = serializers.CharField()
    created_at = serializers.DateTimeField()
    current = serializers.SerializerMethodField()

    def get_current(self, version: WorkflowVersion) -> bool:
        return version.number == version.workflow.current_version


class WorkflowListView(TenantAPIView):
    """The tenant's workflows: list (everyone) and register (admins)."""

    policy = {"GET": "workflow.read", "POST": "workflow.write"}

    @extend_schema(operation_id="workflows_list", tags=TAGS, summary="List workflows",
                   responses={200: WorkflowSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(WorkflowSerializer(workflows_of(self.access.tenant_id), many=True).data)

    @extend_schema(operation_id="workflows_create", tags=TAGS, summary="Register a workflow",
                   request=WorkflowWriteSerializer,
                   responses={201: WorkflowSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = self.validated(WorkflowWriteSerializer)
        workflow = workflow_create(tenant_id=self.access.tenant_id, name=data["name"],
                                   definition=data["definition"],
                                   description=data.get("description", ""),
                                   published=data.get("published", False),
                                   actor=self.access.actor)
        return Response(WorkflowSerializer(workflow).data, status=status.HTTP_201_CREATED)


class WorkflowDetailView(TenantAPIView):
    """One workflow: read; change its definition (a new version), description,
    `enabled`, its release or its current version."""

    policy = {"GET": "workflow.read", "PATCH": "workflow.write"}

    def _workflow(self, name: str) -> Workflow:
        workflow = workflow_named(self.access.tenant_id, name)
        if workflow is None:
            raise not_found("Workflow")
        return workflow

    @extend_schema(operation_id="workflows_retrieve", tags=TAGS, summary="A workflow",
                   responses={200: WorkflowSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        return Response(WorkflowSerializer(self._workflow(name)).data)

    @extend_schema(
        operation_id="workflows_update", tags=TAGS, summary="Change a workflow",
        description="A changed `definition` is recorded as the next version; new runs get it "
        "once it is promoted (`promote: N`) or released to a share of them (`release: "
        "{candidate, percent}`; `percent: 0` ends a release). The first version is current "
        "from the start. Runs keep the version they started with.",
        request=WorkflowWriteSerializer,
        responses={200: WorkflowSerializer, **error_responses(409)})
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(WorkflowWriteSerializer, partial=True)
        self._workflow(name)
        if ("release" in data or "promote" in data) and not may(self.access.role,
                                                                 "workflow.release"):
            raise forbidden("role_required", f"the {self.access.role} role may not release")
        tenant_id, actor = self.access.tenant_id, self.access.actor
        workflow = workflow_update(tenant_id=tenant_id, name=name, actor=actor,
                                   definition=data.get("definition"),
                                   description=data.get("description"),
                                   enabled=data.get("enabled"),
                                   published=data.get("published"))
        if "promote" in data:
            workflow = workflow_promote(tenant_id=tenant_id, name=name, version=data["promote"],
                                        actor=actor)
        if "release" in data:
            release = data["release"] or {}
            workflow = workflow_release(tenant_id=tenant_id, name=name,
                                        candidate=release.get("candidate"),
                                        percent=release.get("percent", 0), actor=actor)
        return Response(WorkflowSerializer(workflow).data)


class WorkflowVersionsView(TenantAPIView):
    """A workflow's versions, newest first, each with its diff from the one before."""

    policy = {"GET": "workflow.read"}

    @extend_schema(operation_id="workflows_versions", tags=TAGS, summary="A workflow's versions",
                   responses={200: VersionSerializer(many=True), **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        workflow = workflow_named(self.access.tenant_id, name)
        if workflow is None:
            raise not_found("Workflow")
        return Response(VersionSerializer(versions_of(workflow).select_related("workflow"),
                                          many=True).data)
