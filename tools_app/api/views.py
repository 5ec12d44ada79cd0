"""Tool registration endpoints (admins): list, register, read, update, enable/disable.

Input serializers check types and bounds; what a registration may contain
(URLs, dotted paths, schemas that are valid JSON Schema, secrets only by the
name of one of the tenant's secrets) is `tools_app.services`'. Reads are
tenant-scoped: another tenant's tool is a 404 and never listed.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import not_found

from ..models import Risk, SideEffect, Tool, ToolKind
from ..selectors import tool_of_tenant, tools_of_tenant
from ..services import tool_create, tool_update
from .breakers import BreakerStateSerializer, tool_breaker_states

TAGS = ["tools"]


class ToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    kind = serializers.ChoiceField(choices=ToolKind.choices)
    target = serializers.CharField(
        allow_blank=True, help_text="Python tools: the function's dotted path."
    )
    url = serializers.CharField(
        allow_blank=True, help_text="HTTP tools: POSTed with the arguments."
    )
    status_url = serializers.CharField(allow_blank=True, help_text="GET with {key} substituted.")
    status_tool = serializers.CharField(allow_blank=True)
    compensation_tool = serializers.CharField(allow_blank=True)
    resource = serializers.CharField(
        allow_blank=True, help_text='What a call touches, e.g. "order:{order_id}": calls on '
        'one resource never run at the same time.')
    secret_headers = serializers.DictField(
        child=serializers.CharField(),
        help_text='{header: template naming secrets of the tenant, e.g. '
        '"Bearer {secret:payments}"}',
    )
    args_schema = serializers.DictField(child=serializers.JSONField())
    result_schema = serializers.DictField(child=serializers.JSONField())
    side_effect = serializers.ChoiceField(choices=SideEffect.choices)
    risk = serializers.ChoiceField(choices=Risk.choices)
    requires_approval = serializers.BooleanField()
    timeout_s = serializers.FloatField()
    max_retries = serializers.IntegerField()
    retry_delays_s = serializers.ListField(child=serializers.FloatField())
    breaker = serializers.DictField(child=serializers.JSONField(),
                                    help_text="The breaker's thresholds ({} for the defaults).")
    breaker_state = serializers.SerializerMethodField()
    rate_limit = serializers.DictField(child=serializers.IntegerField(),
                                       help_text="{requests_per_minute} ({} for no limit).")
    enabled = serializers.BooleanField()
    mcp_server = serializers.CharField(source="mcp_server.name", read_only=True, allow_null=True,
                                       default=None,
                                       help_text="mcp tools: the server they come from.")
    mcp_hints = serializers.DictField(child=serializers.BooleanField(),
                                      help_text="mcp tools: the server's annotations, as hints.")
    review = serializers.CharField(
        help_text='mcp tools: "" once an admin saved the settings; "new", "schema_changed" or '
        '"gone" until then (a new tool is a plain write that needs approval; saving confirms).')
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(BreakerStateSerializer(allow_null=True))
    def get_breaker_state(self, tool: Tool) -> dict[str, Any] | None:
        """The state of an http tool's breaker (null for other tools)."""
        states = self.context.get("breaker_states")
        if states is None:
            states = tool_breaker_states([tool])
        return states.get(tool.name)


class ToolWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=5000, allow_blank=True, required=False)
    kind = serializers.ChoiceField(choices=ToolKind.choices, required=False)
    target = serializers.CharField(max_length=255, allow_blank=True, required=False)
    url = serializers.CharField(max_length=500, allow_blank=True, required=False)
    status_url = serializers.CharField(max_length=500, allow_blank=True, required=False)
    status_tool = serializers.CharField(max_length=100, allow_blank=True, required=False)
    compensation_tool = serializers.CharField(max_length=100, allow_blank=True, required=False)
    resource = serializers.CharField(
        max_length=200, allow_blank=True, required=False, trim_whitespace=False,
        help_text='A template over the arguments, e.g. "order:{order_id}"; each placeholder a '
        "required argument.")
    secret_headers = serializers.DictField(
        child=serializers.CharField(max_length=1024),
        required=False,
        help_text='{header: template naming secrets of the tenant, e.g. '
        '"Bearer {secret:payments}"}; each secret must exist.',
    )
    args_schema = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text='JSON Schema of the arguments (default {"type": "object"}).',
    )
    result_schema = serializers.DictField(child=serializers.JSONField(), required=False)
    side_effect = serializers.ChoiceField(choices=SideEffect.choices, required=False)
    risk = serializers.ChoiceField(choices=Risk.choices, required=False)
    requires_approval = serializers.BooleanField(required=False)
    timeout_s = serializers.FloatField(min_value=0.001, max_value=600, required=False)
    max_retries = serializers.IntegerField(min_value=0, max_value=20, required=False)
    retry_delays_s = serializers.JSONField(
        required=False, help_text="Seconds before each retry in turn, the last repeated up to "
        "max_retries: [0, 30] retries at once, then every 30 s. [] for exponential backoff.")
    breaker = serializers.JSONField(
        required=False, help_text='Circuit breaker thresholds: {"failures": 5, "cooldown_s": '
        '10, "max_cooldown_s": 300, "enabled": true}; missing keys take the defaults.')
    rate_limit = serializers.JSONField(
        required=False, help_text='http and mcp tools: {"requests_per_minute": 60}, applied '
        'before each call and shared by every worker; {} for no limit.')
    enabled = serializers.BooleanField(required=False)


class ToolListView(TenantAPIView):
    """The tenant's tools (admins): list and register."""

    policy = {"GET": "tool.read", "POST": "tool.write"}

    @extend_schema(
        operation_id="tools_list",
        tags=TAGS,
        summary="List tools",
        responses={200: ToolSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        tools = list(tools_of_tenant(self.access.tenant_id))
        context = {"breaker_states": tool_breaker_states(tools)}
        return Response(ToolSerializer(tools, many=True, context=context).data)

    @extend_schema(
        operation_id="tools_create",
        tags=TAGS,
        summary="Register a tool",
        request=ToolWriteSerializer,
        responses={201: ToolSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = self.validated(ToolWriteSerializer)
        name = data.pop("name")
        tool = tool_create(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor,
                           **data)
        return Response(ToolSerializer(tool).data, status=status.HTTP_201_CREATED)


class ToolDetailView(TenantAPIView):
    """One tool (admins): read, change, enable or disable."""

    policy = {"GET": "tool.read", "PATCH": "tool.write"}

    @extend_schema(
        operation_id="tools_retrieve",
        tags=TAGS,
        summary="A tool",
        responses={200: ToolSerializer, **error_responses()},
    )
    def get(self, request: Request, name: str) -> Response:
        tool = tool_of_tenant(self.access.tenant_id, name)
        if tool is None:
            raise not_found("Tool")
        return Response(ToolSerializer(tool).data)

    @extend_schema(
        operation_id="tools_update",
        tags=TAGS,
        summary="Change a tool (`enabled: false` disables it)",
        request=ToolWriteSerializer,
        responses={200: ToolSerializer, **error_responses(409)},
    )
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(ToolWriteSerializer, partial=True)
        tool = tool_update(tenant_id=self.access.tenant_id, name=name, changes=data,
                           actor=self.access.actor)
        return Response(ToolSerializer(tool).data)
