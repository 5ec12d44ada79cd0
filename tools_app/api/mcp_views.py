"""MCP server endpoints (admins): list, register, read, change, delete, refresh.

Registering and refreshing answer with what the server's listing did to the
tenant's tools (`new`, `changed`, `gone`, `unchanged`, `skipped` with reasons).
Secret headers are shown as their templates, never as values. Another
tenant's server is a 404.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import invalid, not_found

from ..mcp.services import (
    mcp_server_create,
    mcp_server_delete,
    mcp_server_refresh,
    mcp_server_update,
)
from ..models import McpServer
from ..selectors import mcp_server_of_tenant, mcp_servers_of_tenant

TAGS = ["mcp-servers"]
HEADERS_HELP = ('{header: template naming secrets of the tenant, e.g. "Bearer {secret:github}"}; '
                "each secret must exist.")


class McpToolSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The tool's name in Tether: {server}__{tool}.")
    tool = serializers.CharField(source="target", help_text="Its name on the server.")
    enabled = serializers.BooleanField()
    review = serializers.CharField(help_text='"" once an admin saved it; new, schema_changed, '
                                             "gone until then.")


class McpServerSerializer(serializers.Serializer):
    name = serializers.CharField()
    url = serializers.CharField(allow_blank=True)
    stdio = serializers.CharField(allow_blank=True)
    headers = serializers.DictField(source="secret_headers", child=serializers.CharField(),
                                    help_text=HEADERS_HELP)
    enabled = serializers.BooleanField()
    tools = serializers.SerializerMethodField()
    refreshed_at = serializers.DateTimeField(allow_null=True)
    last_changes = serializers.DictField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(McpToolSerializer(many=True))
    def get_tools(self, server: McpServer) -> Any:
        return McpToolSerializer(server.tools.order_by("name"), many=True).data


class McpChangesSerializer(serializers.Serializer):
    server = McpServerSerializer()
    changes = serializers.DictField(child=serializers.JSONField(),
                                    help_text="new, changed, gone, unchanged, skipped")


class McpServerWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=30)
    url = serializers.CharField(max_length=500, allow_blank=True, required=False,
                                help_text="A Streamable HTTP endpoint.")
    stdio = serializers.CharField(max_length=64, allow_blank=True, required=False,
                                  help_text="A stdio server of TETHER_MCP_STDIO_SERVERS, by name.")
    headers = serializers.DictField(child=serializers.CharField(max_length=1024), required=False,
                                    help_text=HEADERS_HELP)
    enabled = serializers.BooleanField(required=False)


def _changes(data: dict) -> dict:  # type: ignore[type-arg]
    if "headers" in data:
        data["secret_headers"] = data.pop("headers")
    return data


class McpServerListView(TenantAPIView):
    """The tenant's MCP servers (admins): list and register."""

    policy = {"GET": "tool.read", "POST": "tool.write"}

    @extend_schema(operation_id="mcp_servers_list", tags=TAGS, summary="List MCP servers",
                   responses={200: McpServerSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        servers = mcp_servers_of_tenant(self.access.tenant_id)
        return Response(McpServerSerializer(servers, many=True).data)

    @extend_schema(operation_id="mcp_servers_create", tags=TAGS,
                   summary="Register an MCP server and its tools",
                   request=McpServerWriteSerializer,
                   responses={201: McpChangesSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = _changes(self.validated(McpServerWriteSerializer))
        data.pop("enabled", None)
        server, changes = mcp_server_create(
            tenant_id=self.access.tenant_id, actor=self.access.actor, **data)
        return Response({"server": McpServerSerializer(server).data, "changes": changes},
                        status=status.HTTP_201_CREATED)


class McpServerDetailView(TenantAPIView):
    """One MCP server (admins): read, change, delete."""

    policy = {"GET": "tool.read", "PATCH": "tool.write", "DELETE": "tool.write"}

    @extend_schema(operation_id="mcp_servers_retrieve", tags=TAGS, summary="An MCP server",
                   responses={200: McpServerSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        server = mcp_server_of_tenant(self.access.tenant_id, name)
        if server is None:
            raise not_found("MCP server")
        return Response(McpServerSerializer(server).data)

    @extend_schema(operation_id="mcp_servers_update", tags=TAGS,
                   summary="Change an MCP server (its tools follow at the next refresh)",
                   request=McpServerWriteSerializer,
                   responses={200: McpServerSerializer, **error_responses()})
    def patch(self, request: Request, name: str) -> Response:
        data = _changes(self.validated(McpServerWriteSerializer, partial=True))
        if data.pop("name", name) != name:
            raise invalid("invalid", "The request is not valid.",
                          name=["a server cannot be renamed: register a new one instead"])
        server = mcp_server_update(tenant_id=self.access.tenant_id, name=name, changes=data,
                                   actor=self.access.actor)
        return Response(McpServerSerializer(server).data)

    @extend_schema(operation_id="mcp_servers_delete", tags=TAGS,
                   summary="Delete an MCP server and its tools",
                   responses={204: None, **error_responses()})
    def delete(self, request: Request, name: str) -> Response:
        mcp_server_delete(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class McpServerRefreshView(TenantAPIView):
    """List the server's tools again and say what changed (admins)."""

    policy = {"POST": "tool.write"}

    @extend_schema(operation_id="mcp_servers_refresh", tags=TAGS,
                   summary="Refresh an MCP server's tools", request=None,
                   responses={200: McpChangesSerializer, **error_responses()})
    def post(self, request: Request, name: str) -> Response:
        server, changes = mcp_server_refresh(tenant_id=self.access.tenant_id, name=name,
                                             actor=self.access.actor)
        return Response({"server": McpServerSerializer(server).data, "changes": changes})
