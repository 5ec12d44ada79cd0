"""Forms of the inbox cards. JSON fields are parsed here (a parse error is a
field error, nothing is sent to the service); what the JSON must look like is
the service's business (it re-validates against the tool's schemas)."""

from __future__ import annotations

import json
from typing import Any

from django import forms

MAX_JSON_CHARS = 100_000


class JSONTextField(forms.CharField):
    """A textarea holding JSON; cleans to the parsed value."""

    def __init__(self, *, require_object: bool = False, **kwargs: Any) -> None:
        self.require_object = require_object
        kwargs.setdefault("max_length", MAX_JSON_CHARS)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}))
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if text in (None, ""):
            return None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            )
        if self.require_object and not isinstance(parsed, dict):
            raise forms.ValidationError('must be a JSON object, like {"key": "value"}')
        return parsed


class DecisionForm(forms.Form):
    expected_version = forms.IntegerField(min_value=0)
    comment = forms.CharField(required=False, max_length=2000)


class ApproveForm(DecisionForm):
    args = JSONTextField(required=False, require_object=True)
    always_allow = forms.BooleanField(required=False)


class RejectForm(DecisionForm):
    comment = forms.CharField(
        max_length=2000, error_messages={"required": "Say why, so the agent can do better."}
    )


class RespondForm(DecisionForm):
    output = JSONTextField(
        error_messages={"required": "Give the result the tool would have returned."}
    )


class PreviewForm(forms.Form):
    args = JSONTextField(
        require_object=True, error_messages={"required": "Give the arguments as JSON."}
    )


class AnswerForm(forms.Form):
    expected_version = forms.IntegerField(min_value=0)
    answer = forms.CharField(
        max_length=10_000, strip=True, error_messages={"required": "Write an answer for the agent."}
    )


class ResolveForm(DecisionForm):
    outcome = forms.ChoiceField(
        choices=[("succeeded", "succeeded"), ("failed", "failed"), ("retry", "retry")]
    )
    output = JSONTextField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if (
            data.get("outcome") == "succeeded"
            and data.get("output") is None
            and "output" not in self.errors
        ):
            self.add_error("output", "Give the result the call produced (the evidence you found).")
        if data.get("outcome") == "failed" and not (data.get("comment") or "").strip():
            self.add_error("comment", "Say how you know the call did not happen.")
        return data


class ReassignForm(forms.Form):
    """To a person (a username) or a group (a name); the service checks who may take it."""

    to_user = forms.CharField(max_length=150, required=False)
    to_group = forms.CharField(max_length=64, required=False)
    comment = forms.CharField(max_length=2000, required=False)
