"""Circuit breakers, read-only (operators and admins): `GET /api/v1/breakers`
lists the tenant's breakers whose downstream ever failed; the tool and agent
resources carry the state of their own (`breaker_state`)."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses

from ..breakers.selectors import breakers_of_tenant, model_breakers, tool_breakers
from ..models import BreakerState, Tool

TAGS = ["breakers"]


class BreakerStateSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=BreakerState.choices)
    failures = serializers.IntegerField(help_text="Transient failures in a row (closed).")
    open_until = serializers.DateTimeField(
        allow_null=True, help_text="When the breaker admits a probe (open).")
    opened_count = serializers.IntegerField()
    waiting_tasks = serializers.IntegerField(help_text="Tasks waiting for it to close.")


class BreakerSerializer(BreakerStateSerializer):
    kind = serializers.ChoiceField(choices=[("tool", "tool"), ("model", "model")])
    name = serializers.CharField(help_text="The tool's name, or the model's.")
    target = serializers.CharField(help_text="The tool's URL, or the model's base URL.")
    cooldown_s = serializers.FloatField(help_text="The current cool-down.")
    probe_until = serializers.DateTimeField(allow_null=True,
                                            help_text="The probe's lease (half-open).")
    last_error = serializers.JSONField(allow_null=True)
    changed_at = serializers.DateTimeField(allow_null=True)


class BreakerQuerySerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["tool", "model"], required=False)


class BreakerListView(TenantAPIView):
    """The tenant's circuit breakers (those whose downstream ever failed)."""

    policy = {"GET": "breaker.read"}

    @extend_schema(operation_id="breakers_list", tags=TAGS, summary="List circuit breakers",
                   parameters=[BreakerQuerySerializer],
                   responses={200: BreakerSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        query = self.query(BreakerQuerySerializer)
        rows = breakers_of_tenant(self.access.tenant_id, kind=query.get("kind", ""))
        return Response(BreakerSerializer(rows, many=True).data)


def tool_breaker_states(tools: list[Tool]) -> dict[str, dict[str, Any]]:
    """The breaker state of each http tool, by name."""
    return {name: BreakerStateSerializer(view).data
            for name, view in tool_breakers(tools).items()}


def model_breaker_states(tenant_id: int, model: dict[str, Any]) -> dict[str, Any]:
    """The breaker state of an agent's model endpoints: {"primary": .., "fallback": ..}."""
    return {role: BreakerStateSerializer(view).data
            for role, view in model_breakers(tenant_id, model).items()}
