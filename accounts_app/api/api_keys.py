"""API keys and their scopes: a member sees and scopes their own keys, an admin
the tenant's (`services.accounts.api_key_scope_set`). A key's scope narrows
its user's: the agents its requests may run, the tools their tasks may call."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses

from ..models import Role
from ..selectors import api_keys_visible
from ..services.accounts import api_key_scope_set

TAGS = ["api-keys"]


class ApiKeySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    prefix = serializers.CharField()
    user = serializers.CharField(source="user.username")
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked = serializers.BooleanField()
    agents = serializers.ListField(child=serializers.CharField())
    tools = serializers.ListField(child=serializers.CharField())


class ApiKeyScopeSerializer(serializers.Serializer):
    agents = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=500, required=False, default=list,
        help_text="The agents the key may run (within its user's scope); empty: its user's.")
    tools = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=500, required=False, default=list,
        help_text="The tools its tasks may call without an authorization (within its "
                  "user's scope); empty: its user's.")


class ApiKeyListView(TenantAPIView):
    policy = {"GET": "api_key.read"}

    @extend_schema(operation_id="api_keys_list", tags=TAGS,
                   summary="Your API keys (an admin: the tenant's), with their scopes",
                   responses={200: ApiKeySerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        keys = api_keys_visible(tenant_id=self.access.tenant_id, user_id=self.access.user_id,
                                admin=self.access.role == Role.ADMIN)
        return Response(ApiKeySerializer(keys, many=True).data)


class ApiKeyDetailView(TenantAPIView):
    policy = {"PATCH": "api_key.write"}

    @extend_schema(operation_id="api_keys_update", tags=TAGS,
                   summary="Set an API key's scope (narrower than its user's, never wider)",
                   request=ApiKeyScopeSerializer,
                   responses={200: ApiKeySerializer, **error_responses()})
    def patch(self, request: Request, key_id: int) -> Response:
        data = self.validated(ApiKeyScopeSerializer)
        key = api_key_scope_set(tenant_id=self.access.tenant_id, key_id=key_id,
                                agents=data["agents"], tools=data["tools"],
                                actor=self.access.actor, via_key_id=self.access.api_key_id)
        return Response(ApiKeySerializer(key).data)
