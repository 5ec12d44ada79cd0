"""Retention endpoints: the tenant's retention period (`/api/v1/retention`:
read; set or drop a shorter one, admins), its archive files
(`/api/v1/archives`, newest first), and the erasure of a subject
(`/api/v1/erasures`, admins)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from config.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from config.api_errors import error_responses
from tasks_app.api.serializers import subject_field
from tasks_app.models import Tenant

from .models import ArchiveFile
from .selectors import archive_files_of_tenant
from .services.erasure import subject_erasure
from .services.policy import retention_of, retention_set

TAGS = ["retention"]


class RetentionSerializer(serializers.Serializer):
    days = serializers.IntegerField(help_text="Days a finished task stays online.")
    own = serializers.BooleanField(help_text="Whether the tenant set its own period.")
    default_days = serializers.IntegerField(help_text="The operator's default.")
    max_days = serializers.IntegerField(help_text="The longest period a tenant may set.")


class RetentionChangeSerializer(serializers.Serializer):
    days = serializers.IntegerField(
        min_value=1, allow_null=True,
        help_text="A period up to the operator's maximum; null returns to the default.")


class ArchiveFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = ArchiveFile
        fields = ["id", "period", "name", "tasks", "rows", "size_bytes", "sha256", "created_at"]




ArchivePage = cursor_page(ArchiveFileSerializer, "ArchiveFilePage")


class RetentionView(TenantAPIView):
    policy = {"GET": "retention.read", "PUT": "retention.write"}

    @extend_schema(operation_id="retention_retrieve", tags=TAGS,
                   summary="The tenant's retention period",
                   responses={200: RetentionSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(retention_of(Tenant.objects.get(pk=self.access.tenant_id)))

    @extend_schema(operation_id="retention_update", tags=TAGS,
                   summary="Set a shorter retention period, or return to the default",
                   request=RetentionChangeSerializer,
                   responses={200: RetentionSerializer, **error_responses()})
    def put(self, request: Request) -> Response:
        days = self.validated(RetentionChangeSerializer)["days"]
        tenant = Tenant.objects.get(pk=self.access.tenant_id)
        return Response(retention_set(tenant=tenant, days=days, actor=self.access.actor))


class ArchiveListView(TenantAPIView):
    policy = {"GET": "retention.read"}

    @extend_schema(operation_id="archives_list", tags=TAGS,
                   summary="The tenant's archive files, newest first",
                   parameters=[*CURSOR_PARAMETERS],
                   responses={200: ArchivePage, **error_responses()})
    def get(self, request: Request) -> Response:
        return self.paginate(archive_files_of_tenant(self.access.tenant_id),
                             lambda page: ArchiveFileSerializer(page, many=True).data)


class ErasureSerializer(serializers.Serializer):
    subject = subject_field(help_text="The subject to erase, as tasks name it.")

    def validate_subject(self, value: str) -> str:
        # A number is not a subject (DRF would read 42 as "42": another subject's erasure).
        given = self.initial_data.get("subject") if isinstance(self.initial_data, dict) else None
        if not isinstance(given, str):
            raise serializers.ValidationError("A string.")
        return value


class ErasedSerializer(serializers.Serializer):
    canceled = serializers.IntegerField(help_text="Tasks in flight canceled first.")
    tasks = serializers.IntegerField(help_text="Tasks deleted online.")
    rows = serializers.IntegerField(help_text="Rows deleted online, the tasks' included.")
    ledger_rows = serializers.IntegerField()
    archived_tasks = serializers.IntegerField(help_text="Tasks removed from archive files.")
    audit_entries_redacted = serializers.IntegerField(
        help_text="Audit entries that named the subject, their diffs blanked.")
    memory = serializers.DictField(child=serializers.IntegerField(), required=False)


class ErasureView(TenantAPIView):
    policy = {"POST": "retention.erase"}

    @extend_schema(operation_id="erasures_create", tags=TAGS,
                   summary="Erase everything held about a subject, online and in the archive",
                   request=ErasureSerializer,
                   responses={200: ErasedSerializer, **error_responses()})
    def post(self, request: Request) -> Response:
        subject = self.validated(ErasureSerializer)["subject"]
        return Response(subject_erasure(tenant_id=self.access.tenant_id, subject=subject,
                                        actor=self.access.actor))
