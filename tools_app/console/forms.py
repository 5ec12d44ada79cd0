"""The tool registration form. It parses input into the registration's shape;
`tools_app.services` checks it as a whole (schemas against the metaschema,
URLs, python paths) and its field errors are put back on these fields."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from foundations.console_actions import ServiceErrorsForm

from ..models import Risk, SideEffect, Tool, ToolKind
from ..services import EDITABLE, MCP_SERVER_OWNED

FIELDS = EDITABLE  # the fields the tool services accept, in form order


class JSONObjectField(forms.CharField):
    """A JSON object typed in a textarea (blank means {}); the console's agent
    forms use it too."""

    def __init__(self, *, rows: int = 8, **kwargs: Any) -> None:
        kwargs.setdefault(
            "widget", forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "mono"})
        )
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict | list):
            return json.dumps(value, indent=2)
        return value

    def clean(self, value: Any) -> Any:
        if isinstance(value, dict):  # a disabled field: its initial value
            return value
        text = (super().clean(value) or "").strip()
        if not text:
            return {}
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc.msg} (line {exc.lineno})")
        if not isinstance(parsed, dict):
            raise forms.ValidationError("a JSON object")
        return parsed


class DelaysField(forms.CharField):
    """Seconds separated by commas ("0, 30"); blank means none. The service checks
    the bounds (`tools_app.breakers.policy`)."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ", ".join(f"{d:g}" if isinstance(d, int | float) else str(d) for d in value)
        return value

    def clean(self, value: Any) -> Any:
        text = (super().clean(value) or "").strip()
        if not text:
            return []
        try:
            return [float(part) for part in text.split(",")]
        except ValueError:
            raise forms.ValidationError("seconds separated by commas, e.g. 0, 30")


class ToolForm(ServiceErrorsForm):
    name = forms.CharField(
        max_length=64, help_text="Letters, digits, _ and -. Cannot change later."
    )
    description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the model reads to decide when to call it.",
    )
    kind = forms.ChoiceField(choices=ToolKind.choices)
    target = forms.CharField(
        required=False,
        max_length=255,
        label="Python function",
        help_text="Dotted path, for python tools.",
    )
    url = forms.CharField(
        required=False, max_length=500, label="URL", help_text="POSTed to, for http tools."
    )
    status_url = forms.CharField(
        required=False,
        max_length=500,
        label="Status URL",
        help_text="GET with {key}: did the call with this key happen?",
    )
    status_tool = forms.CharField(required=False, max_length=100, label="Status query (python)")
    compensation_tool = forms.CharField(required=False, max_length=100, label="Compensation tool")
    resource = forms.CharField(
        required=False, max_length=200, label="Resource",
        help_text="What a call touches, e.g. order:{order_id}: calls on one resource never "
        "run at the same time.")
    secret_headers = JSONObjectField(
        required=False,
        label="Secret headers",
        help_text=(
            '{"Authorization": "Bearer {secret:shipping}"}: each header is a template '
            "naming secrets of this tenant (see Secrets), filled in on the server when the "
            "tool is called. Never the secret itself."
        ),
    )
    args_schema = JSONObjectField(
        label="Arguments schema", help_text="JSON Schema 2020-12, an object."
    )
    result_schema = JSONObjectField(required=False, label="Result schema")
    side_effect = forms.ChoiceField(choices=SideEffect.choices, label="Side effect")
    risk = forms.ChoiceField(choices=Risk.choices)
    requires_approval = forms.BooleanField(
        required=False, label="Every call needs a reviewer's approval"
    )
    timeout_s = forms.FloatField(min_value=0.1, max_value=600, label="Timeout (s)")
    max_retries = forms.IntegerField(min_value=0, max_value=20, label="Max retries")
    retry_delays_s = DelaysField(
        required=False, max_length=400, label="Retry delays (s)",
        help_text="Before each retry in turn, the last repeated: 0, 30 retries at once, then "
        "every 30 s. Blank: exponential backoff.")
    breaker = JSONObjectField(
        required=False, rows=3, label="Circuit breaker",
        help_text='{"failures": 5, "cooldown_s": 10, "max_cooldown_s": 300}: any key left out '
        "takes the deployment's default; {} for all defaults (http tools only).")
    rate_limit = JSONObjectField(
        required=False, rows=2, label="Rate limit",
        help_text='{"requests_per_minute": 60}: applied before each call, shared by every '
        "worker; {} for none (http and mcp tools only).")
    enabled = forms.BooleanField(required=False)

    def __init__(self, *args: Any, editing: bool = False, mcp: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["name"].disabled = True
            self.fields["name"].required = False
        if mcp:  # what the MCP server decides is shown, not edited
            for name in MCP_SERVER_OWNED:
                self.fields[name].disabled = True
                self.fields[name].required = False

    @staticmethod
    def initial_of(tool: Tool | None) -> dict[str, Any]:
        tool = tool or Tool(
            args_schema={"type": "object", "properties": {}, "additionalProperties": False}
        )
        return {"name": tool.name, **{f: getattr(tool, f) for f in FIELDS}}

    def registration(self) -> dict[str, Any]:
        d = self.cleaned_data
        out = {f: d.get(f) for f in FIELDS}
        for text in (
            "description",
            "target",
            "url",
            "status_url",
            "status_tool",
            "compensation_tool",
            "resource",
        ):
            out[text] = (out[text] or "").strip()
        out["secret_headers"] = out["secret_headers"] or {}
        out["result_schema"] = out["result_schema"] or {}
        out["retry_delays_s"] = out["retry_delays_s"] or []
        out["breaker"] = out["breaker"] or {}
        out["rate_limit"] = out["rate_limit"] or {}
        out["requires_approval"] = bool(out["requires_approval"])
        out["enabled"] = bool(out["enabled"])
        return out
