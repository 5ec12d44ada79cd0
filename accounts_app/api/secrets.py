"""Tenant secret endpoints (admins): list, create, read, rotate, delete.

A secret is write-only: requests carry a value, answers never do (names, who
created and rotated it, when). Another tenant's secret is a 404 and is never
listed. What a name and a value may be, and when a secret may be deleted, is
`accounts_app.services.secrets`'.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import not_found

from ..selectors import secrets_of_tenant
from ..services.secrets import MAX_VALUE_CHARS, secret_create, secret_delete, secret_rotate

TAGS = ["secrets"]


class SecretSerializer(serializers.Serializer):
    name = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(help_text="Who stored it.")
    rotated_at = serializers.DateTimeField(
        allow_null=True, help_text="When its value was last replaced, or null."
    )
    rotated_by = serializers.CharField(allow_blank=True, help_text="Who replaced it last.")


class SecretCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=64,
        help_text="Lower-case letters, digits, _ and -, starting with a letter. "
        "Tools and agents refer to the secret by it; it cannot change.",
    )
    value = serializers.CharField(
        max_length=MAX_VALUE_CHARS,
        trim_whitespace=False,
        write_only=True,
        help_text="The secret itself. Encrypted at rest, never returned.",
    )


class SecretRotateSerializer(serializers.Serializer):
    value = serializers.CharField(
        max_length=MAX_VALUE_CHARS,
        trim_whitespace=False,
        write_only=True,
        help_text="The new value. Encrypted at rest, never returned.",
    )


class SecretListView(TenantAPIView):
    """The tenant's secrets (admins): list names, store a new one."""

    policy = {"GET": "secret.read", "POST": "secret.write"}

    @extend_schema(
        operation_id="secrets_list",
        tags=TAGS,
        summary="List secrets (names only, never values)",
        responses={200: SecretSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        return Response(SecretSerializer(secrets_of_tenant(self.access.tenant_id), many=True).data)

    @extend_schema(
        operation_id="secrets_create",
        tags=TAGS,
        summary="Store a secret",
        request=SecretCreateSerializer,
        responses={201: SecretSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = self.validated(SecretCreateSerializer)
        secret = secret_create(
            tenant_id=self.access.tenant_id,
            name=data["name"],
            value=data["value"],
            actor=self.access.actor,
        )
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(TenantAPIView):
    """One secret (admins): read its metadata, replace its value, delete it."""

    policy = {"GET": "secret.read", "PUT": "secret.write", "DELETE": "secret.write"}

    @extend_schema(
        operation_id="secrets_retrieve",
        tags=TAGS,
        summary="A secret's metadata (never its value)",
        responses={200: SecretSerializer, **error_responses()},
    )
    def get(self, request: Request, name: str) -> Response:
        secret = secrets_of_tenant(self.access.tenant_id).filter(name=name).first()
        if secret is None:
            raise not_found("Secret")
        return Response(SecretSerializer(secret).data)

    @extend_schema(
        operation_id="secrets_rotate",
        tags=TAGS,
        summary="Replace a secret's value",
        request=SecretRotateSerializer,
        responses={200: SecretSerializer, **error_responses()},
    )
    def put(self, request: Request, name: str) -> Response:
        data = self.validated(SecretRotateSerializer)
        secret = secret_rotate(
            tenant_id=self.access.tenant_id, name=name, value=data["value"], actor=self.access.actor
        )
        return Response(SecretSerializer(secret).data)

    @extend_schema(
        operation_id="secrets_destroy",
        tags=TAGS,
        summary="Delete a secret (refused while a tool or agent refers to it)",
        responses={204: None, **error_responses(409)},
    )
    def delete(self, request: Request, name: str) -> Response:
        secret_delete(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)
