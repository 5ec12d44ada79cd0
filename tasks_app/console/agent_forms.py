"""The agent profile form: model settings, allowed tools, budgets, prompts.

The form parses input into the profile's shape; `tasks_app.services.agents`
checks it as a whole and its field errors are mapped back onto these fields.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from foundations.console_actions import ServiceErrorsForm
from tools_app.console.forms import JSONObjectField as ToolsJSONObjectField

from ..models import AgentProfile
from ..services.agents import BUDGET_FIELDS as BUDGET

SERVICE_FIELD = {
    "model": "backend",
    "model.backend": "backend",
    "model.name": "model_name",
    "model.base_url": "base_url",
    "model.api_key_env": "api_key_env",
    "model.api_key_secret": "api_key_secret",
    "model.temperature": "temperature",
    "model.top_p": "top_p",
    "model.system_prompt": "system_prompt",
    "model.timeout_s": "timeout_s",
    "model.fallback": "fallback_name",
    "model.fallback.name": "fallback_name",
    "model.fallback.base_url": "fallback_base_url",
    "model.fallback.api_key_env": "fallback_api_key_env",
    "model.fallback.api_key_secret": "fallback_api_key_secret",
    "budget.per_tool": "per_tool",
    "model.prices": "input_price",
    "model.prices.input_per_mtok": "input_price",
    "model.prices.output_per_mtok": "output_price",
    "model.prices.cached_input_per_mtok": "cached_input_price",
    "model.fallback.prices": "fallback_input_price",
    "model.fallback.prices.input_per_mtok": "fallback_input_price",
    "model.fallback.prices.output_per_mtok": "fallback_output_price",
    "model.fallback.prices.cached_input_per_mtok": "fallback_cached_input_price",
}
# form field prefix -> price key (dollars per million tokens; checked by the service)
PRICE_FIELDS = (
    ("input_price", "input_per_mtok"),
    ("output_price", "output_per_mtok"),
    ("cached_input_price", "cached_input_per_mtok"),
)


def form_field_of(service_field: str) -> str:
    if service_field in SERVICE_FIELD:
        return SERVICE_FIELD[service_field]
    if service_field.startswith("completion_checks"):  # completion_checks[0].tool
        return "completion_checks"
    if service_field.startswith("budget."):
        return service_field.split(".", 1)[1]
    if service_field.startswith("model."):
        return "backend"
    return service_field


class JSONObjectField(ToolsJSONObjectField):
    """The tools console's JSON object field: optional here, and shorter."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(rows=4, **kwargs)


class JSONListField(ToolsJSONObjectField):
    """A JSON list typed in a textarea (blank means [])."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(rows=5, **kwargs)

    def clean(self, value: Any) -> Any:
        if isinstance(value, list):  # a disabled field: its initial value
            return value
        text = (forms.CharField.clean(self, value) or "").strip()
        if not text:
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc.msg} (line {exc.lineno})")
        if not isinstance(parsed, list):
            raise forms.ValidationError("a JSON list")
        return parsed


def _price_field(label: str) -> forms.CharField:
    return forms.CharField(required=False, max_length=40, label=label)


def _prices(d: dict[str, Any], prefix: str) -> dict[str, str] | None:
    """The prices typed in (None: none at all)."""
    given = {key: str(d.get(prefix + field) or "").strip() for field, key in PRICE_FIELDS}
    given = {k: v for k, v in given.items() if v}
    return given or None


def _price_initial(model: dict[str, Any], prefix: str) -> dict[str, Any]:
    raw = model.get("prices")
    prices: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {prefix + field: prices.get(key, "") for field, key in PRICE_FIELDS}


class AgentForm(ServiceErrorsForm):
    name = forms.SlugField(
        max_length=64, help_text="Letters, digits, _ and -. Cannot change later."
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    enabled = forms.BooleanField(required=False, initial=True)
    published = forms.BooleanField(
        required=False, initial=False,
        help_text="Visible to other agents and assistants over A2A and MCP.")
    # model
    backend = forms.ChoiceField(
        choices=[
            ("scripted", "scripted (demos, tests)"),
            ("openai", "openai-compatible"),
        ]
    )
    model_name = forms.CharField(required=False, max_length=200, label="Model name")
    base_url = forms.CharField(required=False, max_length=500, label="Base URL")
    api_key_secret = forms.CharField(
        required=False,
        max_length=64,
        label="API key secret",
        help_text="The name of the tenant secret holding the key (see Secrets).",
    )
    api_key_env = forms.CharField(
        required=False,
        max_length=128,
        label="API key variable",
        help_text="Or a server environment variable the operator granted this tenant.",
    )
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)
    top_p = forms.FloatField(required=False, min_value=0, max_value=1, label="Top p")
    timeout_s = forms.FloatField(required=False, min_value=1, max_value=600, label="Timeout (s)")
    system_prompt = forms.CharField(
        required=False,
        max_length=50_000,
        label="System prompt",
        widget=forms.Textarea(attrs={"rows": 8}),
    )
    fallback_name = forms.CharField(required=False, max_length=200, label="Fallback model")
    fallback_base_url = forms.CharField(required=False, max_length=500, label="Fallback base URL")
    fallback_api_key_secret = forms.CharField(
        required=False, max_length=64, label="Fallback API key secret"
    )
    fallback_api_key_env = forms.CharField(
        required=False, max_length=128, label="Fallback API key variable"
    )
    # prices, dollars per million tokens (text: money is never a float)
    input_price = _price_field("Input $ / M tokens")
    output_price = _price_field("Output $ / M tokens")
    cached_input_price = _price_field("Cached input $ / M tokens")
    fallback_input_price = _price_field("Fallback input $ / M tokens")
    fallback_output_price = _price_field("Fallback output $ / M tokens")
    fallback_cached_input_price = _price_field("Fallback cached input $ / M tokens")
    # tools and budget
    tools = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    max_steps = forms.IntegerField(min_value=1, label="Steps")
    max_model_calls = forms.IntegerField(min_value=1, label="Model calls")
    max_tool_calls = forms.IntegerField(min_value=1, label="Tool calls")
    max_tokens = forms.IntegerField(min_value=1, label="Tokens")
    max_duration_s = forms.IntegerField(min_value=1, label="Duration (s)")
    max_concurrent_tasks = forms.IntegerField(min_value=1, label="Concurrent tasks")
    max_cost = forms.CharField(
        required=False, max_length=40, label="Cost ($)",
        help_text="Dollars a task may spend on model calls; empty: no limit.")
    per_tool = JSONObjectField(label="Per-tool limits", help_text='{"tool name": max calls}')
    on_exhaustion = forms.ChoiceField(
        choices=[("fail", "fail the task"), ("escalate", "escalate to an operator")],
        label="When a budget runs out",
    )
    no_progress_repeats = forms.IntegerField(
        min_value=1, max_value=1000, label="Same call repeated"
    )
    no_progress_window = forms.IntegerField(min_value=1, max_value=1000, label="Steps without news")
    approval_sla_s = forms.IntegerField(
        min_value=0, label="Approval SLA (s)", help_text="0: never expires."
    )
    approval_on_expiry = forms.ChoiceField(
        choices=[("escalate", "escalate"), ("reject", "reject")], label="When an approval expires"
    )
    allow_self_approval = forms.BooleanField(
        required=False, label="Requesters may approve their own tasks"
    )
    result_schema = JSONObjectField(
        label="Result schema", help_text="JSON Schema the final result must match."
    )
    memory_policy = forms.ChoiceField(
        choices=[("off", "off"), ("read", "read: sees memory"),
                 ("propose", "propose: sees memory, its writes wait for a reviewer"),
                 ("auto", "auto: sees memory, its writes are saved at once")],
        label="Memory", initial="off", required=False,
    )

    completion_checks = JSONListField(
        label="Completion checks",
        help_text='Read-only tools that must all answer {"pass": true} before a final answer '
                  'is accepted: [{"tool": "order_refunded", "args": {"order_id": '
                  '"${ output.order_id }", "customer": "${ inputs.customer }"}}]')
    max_completion_attempts = forms.IntegerField(
        min_value=1, max_value=20, required=False, label="Answers the checks may refuse",
        help_text="Then the task escalates or fails, as for a budget. Default 3.")
    min_confidence = forms.FloatField(
        min_value=0, max_value=1, required=False, label="Minimum confidence",
        help_text="0 to 1. A tool call the model is less sure of needs an approval; a final "
                  "answer goes to a reviewer. Empty: off.")

    def __init__(
        self, *args: Any, tool_names: list[str], editing: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        tools = self.fields["tools"]
        assert isinstance(tools, forms.MultipleChoiceField)
        tools.choices = [(t, t) for t in tool_names]
        if editing:
            self.fields["name"].disabled = True
            self.fields["name"].required = False

    @staticmethod
    def initial_of(agent: AgentProfile | None) -> dict[str, Any]:
        if agent is None:
            blank = AgentProfile()
            model: dict[str, Any] = {"backend": "scripted", "name": "scripted"}
            return {
                **{
                    k: getattr(blank, k)
                    for k in (
                        *BUDGET,
                        "on_exhaustion",
                        "no_progress_repeats",
                        "no_progress_window",
                        "approval_sla_s",
                        "approval_on_expiry",
                        "memory_policy",
                        "max_completion_attempts",
                    )
                },
                "enabled": True,
                "backend": model["backend"],
                "model_name": model["name"],
            }
        model = dict(agent.model or {})
        fallback = model.get("fallback") or {}
        return {
            "name": agent.name,
            "description": agent.description,
            "enabled": agent.enabled,
            "published": agent.published,
            "backend": model.get("backend", "scripted"),
            "model_name": model.get("name", ""),
            "base_url": model.get("base_url", ""),
            "api_key_env": model.get("api_key_env", ""),
            "api_key_secret": model.get("api_key_secret", ""),
            "temperature": model.get("temperature"),
            "top_p": model.get("top_p"),
            "timeout_s": model.get("timeout_s"),
            "system_prompt": model.get("system_prompt", ""),
            "fallback_name": fallback.get("name", ""),
            "fallback_base_url": fallback.get("base_url", ""),
            "fallback_api_key_env": fallback.get("api_key_env", ""),
            "fallback_api_key_secret": fallback.get("api_key_secret", ""),
            **_price_initial(model, ""),
            **_price_initial(fallback, "fallback_"),
            "tools": list(agent.tools or []),
            **{k: getattr(agent, k) for k in BUDGET},
            "max_cost": agent.budget().get("max_cost", ""),
            "per_tool": agent.per_tool or {},
            "on_exhaustion": agent.on_exhaustion,
            "no_progress_repeats": agent.no_progress_repeats,
            "no_progress_window": agent.no_progress_window,
            "approval_sla_s": agent.approval_sla_s,
            "approval_on_expiry": agent.approval_on_expiry,
            "allow_self_approval": agent.allow_self_approval,
            "result_schema": agent.result_schema or {},
            "memory_policy": agent.memory_policy,
            "completion_checks": agent.completion_checks or [],
            "max_completion_attempts": agent.max_completion_attempts,
            "min_confidence": agent.min_confidence,
        }

    def profile_fields(self, existing_model: dict[str, Any] | None = None) -> dict[str, Any]:
        """The cleaned form as the service's keyword arguments (model keys the
        form does not show are kept from the existing profile)."""
        d = self.cleaned_data
        model: dict[str, Any] = dict(existing_model or {})
        model.update(
            backend=d["backend"], name=d["model_name"] or "", system_prompt=d["system_prompt"] or ""
        )
        for key, field in (
            ("base_url", "base_url"),
            ("api_key_env", "api_key_env"),
            ("api_key_secret", "api_key_secret"),
            ("temperature", "temperature"),
            ("top_p", "top_p"),
            ("timeout_s", "timeout_s"),
        ):
            value = d.get(field)
            if value in (None, ""):
                model.pop(key, None)
            else:
                model[key] = value
        if d.get("fallback_name"):
            model["fallback"] = {
                k: v
                for k, v in {
                    "name": d["fallback_name"],
                    "base_url": d.get("fallback_base_url") or "",
                    "api_key_env": d.get("fallback_api_key_env") or "",
                    "api_key_secret": d.get("fallback_api_key_secret") or "",
                    "prices": _prices(d, "fallback_"),
                }.items()
                if v
            }
        else:
            model.pop("fallback", None)
        prices = _prices(d, "")
        if prices:
            model["prices"] = prices
        else:
            model.pop("prices", None)
        return {
            "description": d.get("description") or "",
            "enabled": bool(d.get("enabled")),
            "published": bool(d.get("published")),
            "model": model,
            "tools": list(d.get("tools") or []),
            **{k: d[k] for k in BUDGET},
            "max_cost": (d.get("max_cost") or "").strip() or None,
            "per_tool": d.get("per_tool") or {},
            "on_exhaustion": d["on_exhaustion"],
            "no_progress_repeats": d["no_progress_repeats"],
            "no_progress_window": d["no_progress_window"],
            "approval_sla_s": d["approval_sla_s"],
            "approval_on_expiry": d["approval_on_expiry"],
            "allow_self_approval": bool(d.get("allow_self_approval")),
            "result_schema": d.get("result_schema") or {},
            # not given (a form posted without it): the profile keeps its own
            **({"memory_policy": d["memory_policy"]} if d.get("memory_policy") else {}),
            "completion_checks": d.get("completion_checks") or [],
            **({"max_completion_attempts": d["max_completion_attempts"]}
               if d.get("max_completion_attempts") is not None else {}),
            "min_confidence": d.get("min_confidence"),
        }

    def field_of(self, service_field: str) -> str:
        return form_field_of(service_field)
