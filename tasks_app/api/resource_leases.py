"""`GET /api/v1/leases`: the tenant's resource leases (held, or waited for)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses

from ..leases.selectors import leases_of_tenant


class LeaseQuerySerializer(serializers.Serializer):
    resource = serializers.CharField(max_length=200, required=False,
                                     help_text="Only this resource, e.g. order:7.")


class HolderSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    step_no = serializers.IntegerField()
    idempotency_key = serializers.CharField()


class WaiterSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    step_no = serializers.IntegerField()
    since = serializers.DateTimeField()


class LeaseSerializer(serializers.Serializer):
    resource = serializers.CharField()
    fencing_token = serializers.IntegerField(help_text="Grows with every acquisition.")
    holder = HolderSerializer(allow_null=True)
    acquired_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    expired = serializers.BooleanField(help_text="Its holder is presumed dead: the next "
                                       "caller settles its call through the ledger.")
    waiters = WaiterSerializer(many=True)


class LeaseListView(TenantAPIView):
    """Resource leases of the caller's tenant that are held or waited for."""

    policy = {"GET": "lease.read"}

    @extend_schema(operation_id="leases_list", tags=["leases"],
                   summary="Resource leases held or waited for",
                   parameters=[LeaseQuerySerializer],
                   responses={200: LeaseSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        q = self.query(LeaseQuerySerializer)
        rows = leases_of_tenant(self.access.tenant_id, resource=q.get("resource"))
        return Response(LeaseSerializer(rows, many=True).data)
