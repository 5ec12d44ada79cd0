"""Tenant members (admins): who they are, their role, and their e-mail address
(where notification e-mails go, and how a Slack user is recognised as a
reviewer). Another tenant's member is a 404 and never listed."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses

from ..selectors import members_of_tenant
from ..services.accounts import member_email_set

TAGS = ["members"]


class MemberSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="user_id")
    username = serializers.CharField(source="user.username")
    role = serializers.CharField()
    email = serializers.CharField(source="user.email", allow_blank=True)
    active = serializers.BooleanField(source="user.is_active")


class MemberUpdateSerializer(serializers.Serializer):
    email = serializers.CharField(max_length=254, allow_blank=True,
                                  help_text="The member's e-mail address; empty clears it.")


class MemberListView(TenantAPIView):
    policy = {"GET": "member.read"}

    @extend_schema(operation_id="members_list", tags=TAGS, summary="The tenant's members",
                   responses={200: MemberSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(MemberSerializer(members_of_tenant(self.access.tenant_id),
                                         many=True).data)


class MemberDetailView(TenantAPIView):
    policy = {"PATCH": "member.write"}

    @extend_schema(operation_id="members_update", tags=TAGS,
                   summary="Set a member's e-mail address", request=MemberUpdateSerializer,
                   responses={200: MemberSerializer, **error_responses()})
    def patch(self, request: Request, user_id: int) -> Response:
        data = self.validated(MemberUpdateSerializer)
        membership = member_email_set(tenant_id=self.access.tenant_id, user_id=user_id,
                                      email=data["email"], actor=self.access.actor)
        return Response(MemberSerializer(membership).data)
