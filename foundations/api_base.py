"""Plumbing every REST API view shares: the tenant-scoped base view, the strict
JSON parser, cursor pagination, path converters and the page shapes.

Invariants:
- every view is authenticated, role-checked (`foundations.api_access.POLICY`) and
  throttled per token;
- request bodies are JSON only, and nothing PostgreSQL cannot store (NUL
  characters, lone surrogates, non-finite numbers, absurd nesting) gets past
  the parser: such a body is a 400, never a 500 later;
- ids in paths and cursors are bounded digit strings, so no lookup overflows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ParseError, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from .api_access import Access, HasRole, TokenRateThrottle, access_of
from .ids import ID_PATTERN, MAX_ID, parse_id

MAX_JSON_DEPTH = 64


def unstorable(data: Any) -> str | None:
    """Why `data` cannot be stored as PostgreSQL text/jsonb, or None when it can."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, str):
            if "\x00" in value:
                return "strings may not contain NUL (\\u0000) characters"
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "strings may not contain unpaired surrogates"
        elif isinstance(value, float) and not math.isfinite(value):
            return "numbers must be finite"
        elif isinstance(value, dict):
            stack.extend((k, depth + 1) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


class StrictJSONParser(JSONParser):
    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        problem = unstorable(data)
        if problem:
            raise ParseError(f"JSON parse error - {problem}")
        return data


class IdConverter:
    """A database id in a path: 1 to 18 digits (anything else is a 404)."""

    regex = ID_PATTERN

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class NameConverter:
    """A tool or agent name in a path."""

    regex = "[A-Za-z0-9_-]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class NewestFirstCursor(CursorPagination):
    """Stable pages, newest first: a cursor is a position on `id`, so rows
    inserted while a client pages never shift what it has not seen yet."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        size = parse_id(raw)
        if size is None or not 1 <= size <= self.max_page_size:
            raise ValidationError({"limit": [f"an integer from 1 to {self.max_page_size}"]})
        return size

    def decode_cursor(self, request: Any) -> Any:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": ["not a cursor this API handed out"]})
        if (
            cursor is not None
            and cursor.position is not None
            and parse_id(cursor.position) is None
        ):
            raise ValidationError({"cursor": ["not a cursor this API handed out"]})
        return cursor


CURSOR_PARAMETERS = [
    OpenApiParameter(
        "cursor", OpenApiTypes.STR, description="The `next`/`previous` cursor of a page."
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": 200},
        description="Page size, 1 to 200 (default 50).",
    ),
]


class TenantAPIView(APIView):
    """Base of every API view: authenticated, role-checked, throttled, JSON in."""

    permission_classes = [IsAuthenticated, HasRole]
    throttle_classes = [TokenRateThrottle]
    parser_classes = [StrictJSONParser]
    metadata_class = None  # no OPTIONS introspection
    # Not `pagination_class`: drf-spectacular would then wrap every list response,
    # paged or not, in a page shape. Pages are documented per view instead.
    paginator_class = NewestFirstCursor
    # HTTP method -> action of foundations.api_access.POLICY
    policy: ClassVar[dict[str, str]] = {}

    @cached_property
    def access(self) -> Access:
        return access_of(self.request)

    def validated(
        self,
        serializer_class: type[serializers.Serializer],
        *,
        data: Any = None,
        partial: bool = False,
    ) -> dict[str, Any]:
        serializer = serializer_class(
            data=self.request.data if data is None else data, partial=partial
        )
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def query(self, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
        params = self.request.query_params
        # DRF reads `?x=` as "x not given"; the schema says a given value is never blank.
        blank = {
            name: ["may not be blank"]
            for name in serializer_class().get_fields()
            if any(value == "" for value in params.getlist(name))
        }
        if blank:
            raise ValidationError(blank)
        return self.validated(serializer_class, data=params)

    def paginate(
        self, queryset: QuerySet[Any], render: Callable[[list[Any]], Iterable[dict[str, Any]]]
    ) -> Response:
        paginator = self.paginator_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        return paginator.get_paginated_response(list(render(list(page or []))))


# --- page shapes for the schema ------------------------------------------------------


def cursor_page(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """`{next, previous, results}` of `item`, named `name` in the schema."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "__module__": __name__,
            "next": serializers.URLField(
                allow_null=True, help_text="The next page (older), or null."
            ),
            "previous": serializers.URLField(
                allow_null=True, help_text="The previous page, or null."
            ),
            "results": item(many=True),
        },
    )


def after_page(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """`{results, next_after, has_more}` of `item`: paging by `after` id."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "__module__": __name__,
            "results": item(many=True),
            "next_after": serializers.IntegerField(
                help_text="Pass as `after` to get what comes next "
                "(the last id here, or the `after` given)."
            ),
            "has_more": serializers.BooleanField(help_text="More items are already available."),
        },
    )


class AfterQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False, default=100)


class ExpectedVersionMixin(serializers.Serializer):
    expected_version = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        help_text="The task version the caller saw; a stale one is refused with 409.",
    )
