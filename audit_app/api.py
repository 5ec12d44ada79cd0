"""`GET /api/v1/audit` (admins): the tenant's audit log, newest first, paged by
cursor, filtered by kind, object name, actor and time."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses

from .models import AuditKind
from .selectors import audit_entries


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(help_text="Who: a user name, `system`, or a worker.")
    actor_role = serializers.CharField(allow_blank=True)
    kind = serializers.CharField(help_text=f"One of {', '.join(AuditKind.values)} (and more).")
    name = serializers.CharField(help_text="The object's name in its kind.")
    object_id = serializers.CharField(allow_blank=True)
    action = serializers.CharField(help_text="created, updated, deleted, rotated, revoked, "
                                             "release_started, promoted, rolled_back, ...")
    diff = serializers.ListField(child=serializers.DictField(), help_text="[{path, change, old, "
                                 "new}], change one of changed, added, removed.")
    request_id = serializers.CharField(allow_blank=True,
                                       help_text="The X-Request-Id of the request that did it.")


class AuditQuerySerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=32, required=False)
    name = serializers.CharField(max_length=200, required=False)
    actor = serializers.CharField(max_length=150, required=False)
    since = serializers.DateTimeField(required=False, help_text="Entries at or after this time.")


AuditPage = cursor_page(AuditEntrySerializer, "AuditPage")


class AuditListView(TenantAPIView):
    """The tenant's audit log of configuration changes (admins)."""

    policy = {"GET": "audit.read"}

    @extend_schema(
        operation_id="audit_list",
        tags=["audit"],
        summary="The audit log of configuration changes (newest first)",
        parameters=[AuditQuerySerializer, *CURSOR_PARAMETERS],
        responses={200: AuditPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.query(AuditQuerySerializer)
        qs = audit_entries(self.access.tenant_id, kind=f.get("kind", ""), name=f.get("name", ""),
                           actor=f.get("actor", ""), since=f.get("since"))
        return self.paginate(qs, lambda page: AuditEntrySerializer(page, many=True).data)
