"""Agent profile versions and their release: list and read versions and the
release log (operators and admins), promote and roll back (admins). Starting
or changing a release is a PATCH of the agent (`agents.py`). Every lookup is
by the caller's tenant, so another tenant's agent is a 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found

from ..models import AgentProfile, AgentVersion, ReleaseAction, VersionKind
from ..selectors import agent_of_tenant, agent_version_of, agent_versions_of, release_log_of
from ..services.releases import agent_promote, agent_rollback
from .agents import AgentSerializer

TAGS = ["agents"]


class DiffEntrySerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Dotted: `model.temperature`, `tools.1`.")
    change = serializers.ChoiceField(choices=["changed", "added", "removed"])
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class AgentVersionSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=VersionKind.choices)
    source_version = serializers.IntegerField(
        allow_null=True, help_text="A rollback: the version whose configuration it copies."
    )
    config = serializers.DictField(
        child=serializers.JSONField(), help_text="What a task of this version runs with."
    )
    diff = DiffEntrySerializer(many=True, help_text="From the previous version.")
    actor = serializers.CharField()
    actor_role = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class ReleaseEntrySerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=ReleaseAction.choices)
    current_before = serializers.IntegerField(help_text="The current version before.")
    current_after = serializers.IntegerField(help_text="The current version after.")
    candidate = serializers.IntegerField(allow_null=True)
    percent = serializers.IntegerField(allow_null=True)
    actor = serializers.CharField()
    actor_role = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class PromoteSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False,
        help_text="Default: the candidate of the release in progress.",
    )
    override_gate = serializers.CharField(
        max_length=2000, required=False, allow_blank=True,
        help_text="An admin's comment promoting a version the release gate refuses (audited).")


class RollbackSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False,
        help_text="Go back to this version (recorded as a new, current version); "
        "without it, only the release ends.",
    )


AgentVersionPage = cursor_page(AgentVersionSerializer, "AgentVersionPage")
ReleaseEntryPage = cursor_page(ReleaseEntrySerializer, "ReleaseEntryPage")


class AgentViewBase(TenantAPIView):
    def agent(self, name: str) -> AgentProfile:
        agent = agent_of_tenant(self.access.tenant_id, name)
        if agent is None:
            raise not_found("Agent")
        return agent


class AgentVersionListView(AgentViewBase):
    policy = {"GET": "agent.versions"}

    @extend_schema(
        operation_id="agents_versions", tags=TAGS, summary="An agent's versions, newest first",
        parameters=CURSOR_PARAMETERS, responses={200: AgentVersionPage, **error_responses()},
    )
    def get(self, request: Request, name: str) -> Response:
        agent = self.agent(name)
        return self.paginate(
            agent_versions_of(agent.pk),
            lambda page: AgentVersionSerializer(page, many=True).data,
        )


class AgentVersionDetailView(AgentViewBase):
    policy = {"GET": "agent.versions"}

    @extend_schema(
        operation_id="agents_version", tags=TAGS, summary="One version of an agent",
        responses={200: AgentVersionSerializer, **error_responses()},
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        version: AgentVersion | None = agent_version_of(self.agent(name).pk, number)
        if version is None:
            raise not_found("Version")
        return Response(AgentVersionSerializer(version).data)


class AgentReleaseLogView(AgentViewBase):
    policy = {"GET": "agent.versions"}

    @extend_schema(
        operation_id="agents_release_log", tags=TAGS,
        summary="An agent's release changes, newest first: who, when, what",
        parameters=CURSOR_PARAMETERS, responses={200: ReleaseEntryPage, **error_responses()},
    )
    def get(self, request: Request, name: str) -> Response:
        agent = self.agent(name)
        return self.paginate(
            release_log_of(agent.pk), lambda page: ReleaseEntrySerializer(page, many=True).data
        )


class AgentPromoteView(AgentViewBase):
    policy = {"POST": "agent.release"}

    @extend_schema(
        operation_id="agents_promote", tags=TAGS,
        summary="Make a version current (default: the release's candidate); the release ends",
        request=PromoteSerializer, responses={200: AgentSerializer, **error_responses()},
    )
    def post(self, request: Request, name: str) -> Response:
        data = self.validated(PromoteSerializer)
        agent = agent_promote(tenant_id=self.access.tenant_id, name=self.agent(name).name,
                              version=data.get("version"), actor=self.access.actor,
                              override_gate=data.get("override_gate", ""))
        return Response(AgentSerializer(agent).data)


class AgentRollbackView(AgentViewBase):
    policy = {"POST": "agent.release"}

    @extend_schema(
        operation_id="agents_rollback", tags=TAGS,
        summary="End the release, or go back to an earlier version",
        request=RollbackSerializer, responses={200: AgentSerializer, **error_responses()},
    )
    def post(self, request: Request, name: str) -> Response:
        data = self.validated(RollbackSerializer)
        agent = agent_rollback(tenant_id=self.access.tenant_id, name=self.agent(name).name,
                               version=data.get("version"), actor=self.access.actor)
        return Response(AgentSerializer(agent).data)
