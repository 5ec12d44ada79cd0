"""Memory endpoints, `/api/v1/memory`: list (filters: scope, subject, agent,
kind, tag, text search `q`; cursor pages), write, read, change, delete; erase
a subject's memory (`DELETE /memory?subject=S`); an item's versions; the
proposed writes and their review. Every lookup is by the caller's tenant, so
another tenant's item is a 404. The serializers check types and bounds; what
an item may hold is the service's (`services.content_errors`)."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tasks_app.api.serializers import subject_field

from .models import Kind, MemoryItem, MemoryProposal, MemoryVersion, Scope
from .selectors import (
    item_of_tenant,
    items_matching,
    open_proposals,
    version_of,
    versions_of,
)
from .services import (
    MAX_TAG,
    MAX_TAGS,
    MAX_URI,
    item_create,
    item_delete,
    item_update,
    proposal_accept,
    proposal_reject,
    subject_erase,
)

TAGS = ["memory"]
# The most `TETHER_MEMORY_MAX_TEXT_CHARS` may allow; the setting's own limit is the service's.
# (At 12 bytes a character, JSON-escaped, a text one past it is still within the body limit.)
MAX_TEXT_INPUT = 20_000


# --- output -----------------------------------------------------------------------------


class MemorySourceSerializer(serializers.Serializer):
    task = serializers.IntegerField(source="source_task_id")
    step_no = serializers.IntegerField(source="source_step_no", allow_null=True)
    event = serializers.IntegerField(source="source_event_id", allow_null=True)


class _Sourced(serializers.Serializer):
    source = serializers.SerializerMethodField()  # type: ignore[assignment]

    @extend_schema_field(MemorySourceSerializer(allow_null=True))
    def get_source(self, row: MemoryItem | MemoryVersion) -> dict[str, Any] | None:
        """The task step (and its event) that wrote it; null: a person wrote it."""
        if row.source_task_id is None:
            return None
        return dict(MemorySourceSerializer(row).data)


class MemoryItemSerializer(_Sourced):
    id = serializers.IntegerField()
    cite_id = serializers.CharField(help_text="How a decision cites it: mem:<id>@<version>.")
    scope = serializers.ChoiceField(choices=Scope.choices)
    subject = serializers.CharField(allow_blank=True)
    agent = serializers.SerializerMethodField()
    kind = serializers.ChoiceField(choices=Kind.choices)
    text = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    uri = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    version = serializers.IntegerField()
    expires_at = serializers.DateTimeField(allow_null=True)
    created_by = serializers.CharField()
    updated_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_agent(self, item: MemoryItem) -> str | None:
        return item.agent.name if item.agent_id and item.agent else None


class MemoryVersionSerializer(_Sourced):
    version = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Kind.choices)
    text = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    uri = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    expires_at = serializers.DateTimeField(allow_null=True)
    author = serializers.CharField(help_text="Who wrote this version.")
    author_role = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class MemoryProposalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField(source="task_id")
    step_no = serializers.IntegerField()
    scope = serializers.ChoiceField(choices=Scope.choices)
    subject = serializers.CharField(allow_blank=True)
    kind = serializers.ChoiceField(choices=Kind.choices)
    text = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    uri = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())
    status = serializers.CharField()
    created_at = serializers.DateTimeField()


class MemoryErasedSerializer(serializers.Serializer):
    items = serializers.IntegerField()
    versions = serializers.IntegerField()
    proposals = serializers.IntegerField()


# --- input ------------------------------------------------------------------------------


def _tags() -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(max_length=MAX_TAG),
                                 max_length=MAX_TAGS, required=False)


class _Closed(serializers.Serializer):
    """Fields it does not know are refused, not ignored (a misspelt field, or the
    scope of an item, which never changes)."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = self.initial_data if isinstance(self.initial_data, dict) else {}
        unknown = sorted(set(given) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["not a field here"] for name in unknown})
        return attrs


class MemoryContentSerializer(_Closed):
    text = serializers.CharField(max_length=MAX_TEXT_INPUT, trim_whitespace=False)
    kind = serializers.ChoiceField(choices=Kind.choices)
    value = serializers.JSONField(required=False, allow_null=True)
    uri = serializers.CharField(max_length=MAX_URI, required=False, allow_blank=True)
    tags = _tags()
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class MemoryWriteSerializer(MemoryContentSerializer):
    scope = serializers.ChoiceField(choices=Scope.choices)
    subject = subject_field(required=False)
    agent = serializers.CharField(max_length=64, required=False,
                                  help_text="For the agent scope: the agent's name.")


class MemoryChangeSerializer(MemoryContentSerializer):
    expected_version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False,
        help_text="The version you read: a changed item is then a 409.")


class MemoryAcceptSerializer(_Closed):
    text = serializers.CharField(max_length=MAX_TEXT_INPUT, trim_whitespace=False, required=False)
    kind = serializers.ChoiceField(choices=Kind.choices, required=False)
    value = serializers.JSONField(required=False, allow_null=True)
    uri = serializers.CharField(max_length=MAX_URI, required=False, allow_blank=True)
    tags = _tags()


class MemoryRejectSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class MemoryFilterSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=Scope.choices, required=False)
    subject = subject_field(required=False)
    agent = serializers.CharField(max_length=64, required=False)
    kind = serializers.ChoiceField(choices=Kind.choices, required=False)
    tag = serializers.CharField(max_length=MAX_TAG, required=False)
    q = serializers.CharField(max_length=500, required=False,
                              help_text="Text search (every word; quoted phrases, or, -word).")


class MemoryEraseSerializer(serializers.Serializer):
    subject = subject_field(help_text="The subject whose memory is erased.")


ItemPage = cursor_page(MemoryItemSerializer, "MemoryItemPage")
ProposalPage = cursor_page(MemoryProposalSerializer, "MemoryProposalPage")


# --- views ------------------------------------------------------------------------------


class MemoryView(TenantAPIView):
    def item(self, item_id: int) -> MemoryItem:
        item = item_of_tenant(self.access.tenant_id, item_id)
        if item is None:
            raise not_found("Memory item")
        return item


class MemoryListView(MemoryView):
    policy = {"GET": "memory.read", "POST": "memory.write", "DELETE": "memory.erase"}

    @extend_schema(operation_id="memory_list", tags=TAGS, summary="List memory items, newest first",
                   parameters=[MemoryFilterSerializer, *CURSOR_PARAMETERS],
                   responses={200: ItemPage, **error_responses()})
    def get(self, request: Request) -> Response:
        f = self.query(MemoryFilterSerializer)
        qs = items_matching(tenant_id=self.access.tenant_id, **f)
        return self.paginate(qs, lambda page: MemoryItemSerializer(page, many=True).data)

    @extend_schema(operation_id="memory_create", tags=TAGS, summary="Write a memory item",
                   request=MemoryWriteSerializer,
                   responses={201: MemoryItemSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = self.validated(MemoryWriteSerializer)
        item = item_create(tenant_id=self.access.tenant_id, fields=data, actor=self.access.actor)
        response = Response(MemoryItemSerializer(self.item(item.pk)).data,
                            status=status.HTTP_201_CREATED)
        response["Location"] = f"/api/v1/memory/{item.pk}"
        return response

    @extend_schema(operation_id="memory_erase_subject", tags=TAGS,
                   summary="Erase a subject's memory: its items, their versions, its proposals",
                   parameters=[MemoryEraseSerializer],
                   responses={200: MemoryErasedSerializer, **error_responses()})
    def delete(self, request: Request) -> Response:
        subject = self.query(MemoryEraseSerializer)["subject"]
        erased = subject_erase(tenant_id=self.access.tenant_id, subject=subject,
                               actor=self.access.actor)
        return Response(erased)


class MemoryDetailView(MemoryView):
    policy = {"GET": "memory.read", "PATCH": "memory.write", "DELETE": "memory.write"}

    @extend_schema(operation_id="memory_retrieve", tags=TAGS, summary="A memory item",
                   responses={200: MemoryItemSerializer, **error_responses()})
    def get(self, request: Request, item_id: int) -> Response:
        return Response(MemoryItemSerializer(self.item(item_id)).data)

    @extend_schema(operation_id="memory_update", tags=TAGS,
                   summary="Change a memory item (its next version; the old one is kept)",
                   request=MemoryChangeSerializer,
                   responses={200: MemoryItemSerializer, **error_responses(409)})
    def patch(self, request: Request, item_id: int) -> Response:
        self.item(item_id)
        data = self.validated(MemoryChangeSerializer, partial=True)
        expected = data.pop("expected_version", None)
        item_update(tenant_id=self.access.tenant_id, item_id=item_id, changes=data,
                    actor=self.access.actor, expected_version=expected)
        return Response(MemoryItemSerializer(self.item(item_id)).data)

    @extend_schema(operation_id="memory_delete", tags=TAGS,
                   summary="Delete a memory item with its versions",
                   responses={204: OpenApiResponse(description="Deleted."), **error_responses()})
    def delete(self, request: Request, item_id: int) -> Response:
        item_delete(tenant_id=self.access.tenant_id, item_id=item_id, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryVersionsView(MemoryView):
    policy = {"GET": "memory.read"}

    @extend_schema(operation_id="memory_versions", tags=TAGS,
                   summary="A memory item's versions, newest first",
                   responses={200: MemoryVersionSerializer(many=True), **error_responses()})
    def get(self, request: Request, item_id: int) -> Response:
        self.item(item_id)
        return Response(MemoryVersionSerializer(versions_of(item_id), many=True).data)


class MemoryVersionView(MemoryView):
    policy = {"GET": "memory.read"}

    @extend_schema(operation_id="memory_version", tags=TAGS, summary="One version of an item",
                   responses={200: MemoryVersionSerializer, **error_responses()})
    def get(self, request: Request, item_id: int, version: int) -> Response:
        self.item(item_id)
        row = version_of(item_id, version)
        if row is None:
            raise not_found("Memory version")
        return Response(MemoryVersionSerializer(row).data)


class ProposalListView(MemoryView):
    policy = {"GET": "memory.read"}

    @extend_schema(operation_id="memory_proposals", tags=TAGS,
                   summary="Writes models proposed, waiting for a reviewer, newest first",
                   parameters=CURSOR_PARAMETERS,
                   responses={200: ProposalPage, **error_responses()})
    def get(self, request: Request) -> Response:
        qs = open_proposals(self.access.tenant_id).order_by("-id")
        return self.paginate(qs, lambda page: MemoryProposalSerializer(page, many=True).data)


class ProposalAcceptView(MemoryView):
    policy = {"POST": "memory.review"}

    @extend_schema(operation_id="memory_proposal_accept", tags=TAGS,
                   summary="Accept a proposed write, as it is or edited: the item is written",
                   request=MemoryAcceptSerializer,
                   responses={201: MemoryItemSerializer, **error_responses(409)})
    def post(self, request: Request, proposal_id: int) -> Response:
        edits = self.validated(MemoryAcceptSerializer)
        item = proposal_accept(tenant_id=self.access.tenant_id, proposal_id=proposal_id,
                               actor=self.access.actor, edits=edits)
        return Response(MemoryItemSerializer(self.item(item.pk)).data,
                        status=status.HTTP_201_CREATED)


class ProposalRejectView(MemoryView):
    policy = {"POST": "memory.review"}

    @extend_schema(operation_id="memory_proposal_reject", tags=TAGS,
                   summary="Reject a proposed write: nothing is written",
                   request=MemoryRejectSerializer,
                   responses={200: MemoryProposalSerializer, **error_responses(409)})
    def post(self, request: Request, proposal_id: int) -> Response:
        note = self.validated(MemoryRejectSerializer)["note"]
        proposal: MemoryProposal = proposal_reject(
            tenant_id=self.access.tenant_id, proposal_id=proposal_id, actor=self.access.actor,
            note=note)
        return Response(MemoryProposalSerializer(proposal).data)
