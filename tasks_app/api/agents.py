"""Agent profile endpoints (admins): list, create, read, update, enable/disable.

Shapes (docs/how-to/real-model.md): `model {backend, name, base_url, temperature, top_p,
system_prompt, fallback}`, `tools [names]`, `budget {max_steps, ...,
per_tool, max_concurrent_tasks}`. The API nests the budget; the profile
stores it flat. Every check of what a profile may contain is the service's
(`tasks_app.services.agents`), including the model settings and that each
tool belongs to the caller's tenant.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from foundations.api_access import may
from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import forbidden, not_found
from tools_app.api.breakers import BreakerStateSerializer, model_breaker_states

from ..models import AgentProfile, MemoryPolicy, OnExhaustion
from ..pricing import MAX_BUDGET
from ..selectors import agent_of_tenant, agents_of_tenant
from ..services.agents import agent_create
from ..services.completion_checks import MAX_ATTEMPTS, MAX_CHECKS
from ..services.releases import KEEP, agent_change

MAX_INT = 2**31 - 1
MODEL_KEYS = (
    "backend",
    "name",
    "base_url",
    "api_key_env",
    "api_key_secret",
    "temperature",
    "top_p",
    "system_prompt",
    "timeout_s",
    "max_retries",
    "prices",
    "fallback",
    "breaker",
)
TAGS = ["agents"]


class PricesSerializer(serializers.Serializer):
    """Documentation only: the service checks prices (`tasks_app.pricing`)."""

    input_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=6, min_value=0)
    output_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=6, min_value=0)
    cached_input_per_mtok = serializers.DecimalField(
        max_digits=12, decimal_places=6, min_value=0, required=False,
        help_text="Input tokens served from the provider's cache (default: the input price).")


class FallbackSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    base_url = serializers.CharField(max_length=500, required=False, allow_null=True)
    api_key_env = serializers.CharField(max_length=128, required=False, allow_null=True)
    api_key_secret = serializers.CharField(max_length=64, required=False, allow_null=True)


class ModelSettingsSerializer(serializers.Serializer):
    backend = serializers.ChoiceField(choices=["scripted", "openai"])
    name = serializers.CharField(max_length=200, allow_null=True, required=False)
    base_url = serializers.CharField(
        max_length=500,
        allow_null=True,
        required=False,
        help_text="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1",
    )
    api_key_env = serializers.CharField(
        max_length=128,
        allow_null=True,
        required=False,
        help_text="An environment variable holding the key, only one the operator granted "
        "this tenant in TETHER_ENV_GRANTS (never the key).",
    )
    api_key_secret = serializers.CharField(
        max_length=64,
        allow_null=True,
        required=False,
        help_text="The name of the tenant secret holding the key (see /api/v1/secrets).",
    )
    temperature = serializers.FloatField(min_value=0, max_value=2, allow_null=True, required=False)
    top_p = serializers.FloatField(min_value=0, max_value=1, allow_null=True, required=False)
    system_prompt = serializers.CharField(allow_blank=True, allow_null=True, required=False)
    timeout_s = serializers.FloatField(
        min_value=0.1, max_value=600, allow_null=True, required=False
    )
    max_retries = serializers.IntegerField(
        min_value=0, max_value=10, allow_null=True, required=False
    )
    prices = PricesSerializer(
        allow_null=True, required=False,
        help_text="Dollars per million tokens; a model without prices costs 0. When set, "
        "the fallback needs its own.")
    fallback = FallbackSerializer(allow_null=True, required=False)
    breaker = serializers.JSONField(
        required=False, allow_null=True,
        help_text='The circuit breakers of the model endpoints: {"failures": 5, "cooldown_s": '
        '10, "max_cooldown_s": 300, "enabled": true}; missing keys take the defaults.')


@extend_schema_field(ModelSettingsSerializer)
class ModelSettingsField(serializers.DictField):
    """Taken as a JSON object and checked whole by the service (which also refuses secrets)."""

    child = serializers.JSONField()


class BudgetSerializer(serializers.Serializer):
    max_steps = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    max_model_calls = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    max_tool_calls = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    max_duration_s = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    per_tool = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_INT),
        required=False,
        help_text="{tool name: max calls per task}",
    )
    max_concurrent_tasks = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False)
    max_cost = serializers.DecimalField(
        max_digits=16, decimal_places=6, min_value=0, max_value=MAX_BUDGET, required=False,
        allow_null=True, help_text="Dollars a task may spend on model calls (null: no limit).")


class ReleaseSerializer(serializers.Serializer):
    candidate = serializers.IntegerField(
        min_value=1, max_value=MAX_INT, required=False, help_text="Default: the latest version."
    )
    percent = serializers.IntegerField(
        min_value=0, max_value=100, help_text="The share of new tasks that get the candidate."
    )


@extend_schema_field(ReleaseSerializer)
class ReleaseField(serializers.DictField):
    """Taken as a JSON object and checked by the service (`services.releases`)."""

    child = serializers.JSONField()


class CompletionCheckSerializer(serializers.Serializer):
    """Documentation only: the service checks a check whole (`services.completion_checks`)."""

    tool = serializers.CharField(max_length=100, help_text="A read-only tool of the tenant.")
    args = serializers.DictField(
        child=serializers.JSONField(), required=False,
        help_text="A template: `${ output.order_id }` (the final answer), "
                  "`${ inputs.customer }` (the task's input).")


@extend_schema_field(CompletionCheckSerializer)
class CompletionCheckField(serializers.DictField):
    """Taken as a JSON object and checked by the service (its errors name the check)."""

    child = serializers.JSONField()


class AgentWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=5000, allow_blank=True, required=False)
    model = ModelSettingsField(required=False)
    tools = serializers.ListField(
        child=serializers.CharField(max_length=100), max_length=200, required=False
    )
    budget = BudgetSerializer(required=False)
    on_exhaustion = serializers.ChoiceField(choices=OnExhaustion.choices, required=False)
    approval_sla_s = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False)
    approval_on_expiry = serializers.ChoiceField(choices=["escalate", "reject"], required=False)
    allow_self_approval = serializers.BooleanField(required=False)
    no_progress_repeats = serializers.IntegerField(min_value=1, max_value=1000, required=False)
    no_progress_window = serializers.IntegerField(min_value=1, max_value=1000, required=False)
    result_schema = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="JSON Schema the final result must satisfy.",
    )
    memory_policy = serializers.ChoiceField(
        choices=MemoryPolicy.choices, required=False,
        help_text="off, read (sees the tenant's memory), propose (its writes wait for a "
                  "reviewer) or auto (its writes are written at once).")
    completion_checks = serializers.ListField(
        child=CompletionCheckField(), max_length=MAX_CHECKS, required=False,
        help_text="Read-only tools that must all answer {\"pass\": true} before a final "
                  "answer is accepted (docs/how-to/completion-checks.md).")
    max_completion_attempts = serializers.IntegerField(
        min_value=1, max_value=MAX_ATTEMPTS, required=False,
        help_text="Final answers the checks may refuse before the task escalates or fails "
                  "(on_exhaustion). Default 3.")
    min_confidence = serializers.FloatField(
        min_value=0, max_value=1, required=False, allow_null=True,
        help_text="A tool call whose confidence is below this needs an approval; a final "
                  "answer below it goes to a reviewer. Null: off.")
    enabled = serializers.BooleanField(required=False)
    published = serializers.BooleanField(
        required=False, help_text="Visible to the open protocols (A2A, MCP). Default false.")
    release = ReleaseField(
        required=False,
        allow_null=True,
        help_text="Send a share of new tasks to a candidate version; null ends the release.",
    )
    release_gate = serializers.DictField(
        child=serializers.JSONField(), required=False,
        help_text="{min_pass_rate, max_cost_ratio}: a candidate is released or promoted only "
                  "with a finished evaluation meeting it; {} for no gate.")
    override_gate = serializers.CharField(
        max_length=2000, required=False, allow_blank=True,
        help_text="An admin's comment releasing a candidate the gate refuses (audited).")


class BudgetOutSerializer(serializers.Serializer):
    max_steps = serializers.IntegerField()
    max_model_calls = serializers.IntegerField()
    max_tool_calls = serializers.IntegerField()
    max_tokens = serializers.IntegerField()
    max_duration_s = serializers.IntegerField()
    per_tool = serializers.DictField(child=serializers.IntegerField())
    max_concurrent_tasks = serializers.IntegerField()
    max_cost = serializers.CharField(allow_null=True, help_text="Dollars, exact; null: no limit.")


class ModelOutSerializer(serializers.Serializer):
    backend = serializers.CharField()
    name = serializers.CharField(allow_null=True)
    base_url = serializers.CharField(allow_null=True)
    api_key_env = serializers.CharField(allow_null=True)
    api_key_secret = serializers.CharField(allow_null=True)
    temperature = serializers.FloatField(allow_null=True)
    top_p = serializers.FloatField(allow_null=True)
    system_prompt = serializers.CharField(allow_null=True, allow_blank=True)
    timeout_s = serializers.FloatField(allow_null=True)
    max_retries = serializers.IntegerField(allow_null=True)
    prices = serializers.DictField(child=serializers.CharField(), allow_null=True)
    fallback = serializers.DictField(child=serializers.JSONField(), allow_null=True)
    breaker = serializers.DictField(child=serializers.JSONField(), allow_null=True)


class ModelBreakersSerializer(serializers.Serializer):
    primary = BreakerStateSerializer(required=False)
    fallback = BreakerStateSerializer(required=False)


class AgentSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    model = serializers.SerializerMethodField()
    tools = serializers.ListField(child=serializers.CharField())
    budget = serializers.SerializerMethodField()
    on_exhaustion = serializers.ChoiceField(choices=OnExhaustion.choices)
    approval_sla_s = serializers.IntegerField()
    approval_on_expiry = serializers.CharField()
    allow_self_approval = serializers.BooleanField()
    no_progress_repeats = serializers.IntegerField()
    no_progress_window = serializers.IntegerField()
    result_schema = serializers.DictField(child=serializers.JSONField())
    memory_policy = serializers.ChoiceField(choices=MemoryPolicy.choices)
    completion_checks = serializers.ListField(child=CompletionCheckField())
    max_completion_attempts = serializers.IntegerField()
    min_confidence = serializers.FloatField(allow_null=True)
    enabled = serializers.BooleanField()
    published = serializers.BooleanField()
    release_gate = serializers.DictField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    version = serializers.IntegerField(
        source="current_version", help_text="The version new tasks get (outside a release)."
    )
    latest_version = serializers.IntegerField(help_text="The last saved version.")
    release = serializers.SerializerMethodField()
    breaker_state = serializers.SerializerMethodField()

    @extend_schema_field(ModelBreakersSerializer)
    def get_breaker_state(self, agent: AgentProfile) -> dict[str, Any]:
        """The circuit breakers of the model's endpoints ({} for a scripted model)."""
        return model_breaker_states(agent.tenant_id, dict(agent.model or {}))

    @extend_schema_field(ReleaseSerializer(allow_null=True))
    def get_release(self, agent: AgentProfile) -> dict[str, Any] | None:
        if agent.release_candidate is None:
            return None
        return {"candidate": agent.release_candidate, "percent": agent.release_percent}

    @extend_schema_field(ModelOutSerializer)
    def get_model(self, agent: AgentProfile) -> dict[str, Any]:
        model = dict(agent.model or {})
        out = {key: model.get(key) for key in MODEL_KEYS}
        out["backend"] = out["backend"] or "scripted"
        return out

    @extend_schema_field(BudgetOutSerializer)
    def get_budget(self, agent: AgentProfile) -> dict[str, Any]:
        return {"max_cost": None, **agent.budget()}


def _profile_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The API's nested budget, flattened onto the profile's fields."""
    fields = {k: v for k, v in data.items()
              if k not in ("name", "budget", "release", "override_gate")}
    fields.update(dict(data.get("budget") or {}))
    return fields


class AgentListView(TenantAPIView):
    """The tenant's agent profiles (admins): list and create."""

    policy = {"GET": "agent.read", "POST": "agent.write"}

    @extend_schema(
        operation_id="agents_list",
        tags=TAGS,
        summary="List agent profiles",
        responses={200: AgentSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        return Response(AgentSerializer(agents_of_tenant(self.access.tenant_id), many=True).data)

    @extend_schema(
        operation_id="agents_create",
        tags=TAGS,
        summary="Create an agent profile",
        request=AgentWriteSerializer,
        responses={201: AgentSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        data = self.validated(AgentWriteSerializer)
        agent = agent_create(
            tenant_id=self.access.tenant_id,
            name=data["name"],
            actor=self.access.actor,
            **_profile_fields(data),
        )
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentDetailView(TenantAPIView):
    """One agent profile (admins): read, change, enable or disable."""

    policy = {"GET": "agent.read", "PATCH": "agent.write"}

    @extend_schema(
        operation_id="agents_retrieve",
        tags=TAGS,
        summary="An agent profile",
        responses={200: AgentSerializer, **error_responses()},
    )
    def get(self, request: Request, name: str) -> Response:
        agent = agent_of_tenant(self.access.tenant_id, name)
        if agent is None:
            raise not_found("Agent")
        return Response(AgentSerializer(agent).data)

    @extend_schema(
        operation_id="agents_update",
        tags=TAGS,
        summary="Change an agent profile (`enabled: false` disables it), or its release",
        description="A changed configuration is saved as the next version; new tasks get it "
        "once it is released (`release: {candidate, percent}`) or promoted. "
        "`release: null` ends a release. Edit and release apply together or not at all.",
        request=AgentWriteSerializer,
        responses={200: AgentSerializer, **error_responses(409)},
    )
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(AgentWriteSerializer, partial=True)
        fields = _profile_fields(data)
        if "name" in data:
            fields["name"] = data["name"]  # the service refuses a rename with a field error
        release = data.get("release", KEEP)
        if release is not KEEP and not may(self.access.role, "agent.release"):
            raise forbidden("role_required", f"the {self.access.role} role may not release")
        agent = agent_change(
            tenant_id=self.access.tenant_id,
            name=name,
            changes=fields,
            release=dict(release) if isinstance(release, dict) else release,
            actor=self.access.actor,
            override_gate=data.get("override_gate", ""),
        )
        return Response(AgentSerializer(agent).data)
