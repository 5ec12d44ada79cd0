"""Retention endpoints: the tenant's retention period (`/api/v1/retention`:
read; set or drop a shorter one, admins), its archive files
(`/api/v1/archives`, newest first), the erasure of a subject
(`/api/v1/erasures`, admins), and exports of the tenant or of a subject
(`/api/v1/exports`: ask, follow, download; admins)."""
from __future__ import annotations

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts_app.models import Tenant
from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tasks_app.api.serializers import subject_field

from .models import ArchiveFile, Export, ExportScope, ExportStatus
from .selectors import archive_files_of_tenant, export_of_tenant, exports_of_tenant
from .services.erasure import subject_erasure
from .services.export import export_download, export_progress, export_start
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
        return string_subject(self, value)


def string_subject(serializer: serializers.Serializer, value: str) -> str:
    """A number is not a subject (DRF would read 42 as "42": another subject's
    erasure or export)."""
    data = serializer.initial_data
    if not isinstance(data.get("subject") if isinstance(data, dict) else None, str):
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
    exports = serializers.IntegerField(
        help_text="Export files deleted: the subject's, and every export of the whole tenant.")


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


class ExportRequestSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=ExportScope.choices,
                                    help_text="The whole tenant, or one subject.")
    subject = subject_field(required=False, help_text="With scope `subject`: whom to export.")

    def validate_subject(self, value: str) -> str:
        return string_subject(self, value)

    def validate(self, attrs: dict) -> dict:
        if attrs["scope"] == ExportScope.SUBJECT and not attrs.get("subject"):
            raise serializers.ValidationError({"subject": ["Required with scope \"subject\"."]})
        if attrs["scope"] == ExportScope.TENANT and attrs.get("subject"):
            raise serializers.ValidationError({"subject": ["Only with scope \"subject\"."]})
        return attrs


class ExportSerializer(serializers.ModelSerializer):
    subject = serializers.CharField(source="subject_ref", read_only=True,
                                    help_text="The subject, by a digest (never its name).")
    requested_by = serializers.CharField(source="actor", read_only=True)
    progress = serializers.SerializerMethodField(help_text="0..1: tasks written of tasks_total.")
    download = serializers.SerializerMethodField(help_text="Where to get the file, once done.")

    class Meta:
        model = Export
        fields = ["id", "scope", "subject", "status", "progress", "tasks_total", "tasks_done",
                  "counts", "size_bytes", "sha256", "error", "requested_by", "created_at",
                  "started_at", "finished_at", "expires_at", "download"]

    def get_progress(self, export: Export) -> float:
        return round(export_progress(export), 4)

    def get_download(self, export: Export) -> str | None:
        if export.status != ExportStatus.DONE:
            return None
        return f"/api/v1/exports/{export.pk}/download"


ExportPage = cursor_page(ExportSerializer, "ExportPage")


class ExportListView(TenantAPIView):
    policy = {"GET": "retention.export", "POST": "retention.export"}

    @extend_schema(operation_id="exports_list", tags=TAGS, summary="The tenant's exports",
                   parameters=[*CURSOR_PARAMETERS],
                   responses={200: ExportPage, **error_responses()})
    def get(self, request: Request) -> Response:
        return self.paginate(exports_of_tenant(self.access.tenant_id),
                             lambda page: ExportSerializer(page, many=True).data)

    @extend_schema(operation_id="exports_create", tags=TAGS,
                   summary="Export the tenant, or a subject: a background job",
                   request=ExportRequestSerializer,
                   responses={202: ExportSerializer, **error_responses()})
    def post(self, request: Request) -> Response:
        data = self.validated(ExportRequestSerializer)
        export = export_start(tenant_id=self.access.tenant_id, scope=data["scope"],
                              subject=data.get("subject", ""), actor=self.access.actor)
        return Response(ExportSerializer(export).data, status=202)


class ExportDetailView(TenantAPIView):
    policy = {"GET": "retention.export"}

    @extend_schema(operation_id="exports_retrieve", tags=TAGS,
                   summary="An export: its status, progress and counts",
                   responses={200: ExportSerializer, **error_responses()})
    def get(self, request: Request, export_id: int) -> Response:
        export = export_of_tenant(self.access.tenant_id, export_id)
        if export is None:
            raise not_found("Export")
        return Response(ExportSerializer(export).data)


class ExportDownloadView(TenantAPIView):
    policy = {"GET": "retention.export"}

    @extend_schema(operation_id="exports_download", tags=TAGS,
                   summary="Download a finished export (a zip of JSON Lines), streamed",
                   responses={(200, "application/zip"): OpenApiResponse(
                       OpenApiTypes.BINARY, description="The export's zip file."),
                       **error_responses(409, 410)})
    def get(self, request: Request, export_id: int) -> FileResponse:
        export, handle = export_download(tenant_id=self.access.tenant_id, export_id=export_id,
                                         actor=self.access.actor)
        return FileResponse(handle, as_attachment=True, content_type="application/zip",
                            filename=f"tether-export-{export.pk}.zip")
