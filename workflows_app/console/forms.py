"""Forms of the workflow pages. They parse and bound their input only: what a
valid definition is, and what may be released or promoted, is the services'
(`workflows_app.services.workflows`)."""
from __future__ import annotations

from typing import Any

from django import forms

from foundations.console_actions import ServiceErrorsForm

from ..definition import MAX_DEFINITION_BYTES
from ..services.workflows import NAME_MAX

MAX_INT = 2**31 - 1


class WorkflowForm(ServiceErrorsForm):
    """The editor: the definition as YAML text, checked by the service on save."""

    name = forms.CharField(
        max_length=NAME_MAX, help_text="Lowercase letters, digits, '_' or '-'; it cannot change.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))
    description = forms.CharField(required=False, max_length=2000,
                                  widget=forms.Textarea(attrs={"rows": 2}))
    enabled = forms.BooleanField(required=False, label="Enabled (new runs may start)")
    published = forms.BooleanField(
        required=False, label="Published (visible over A2A and MCP)")
    definition = forms.CharField(
        max_length=MAX_DEFINITION_BYTES, strip=False, label="Definition (YAML)",
        help_text="Tab indents by two spaces; Esc, then Tab, leaves the editor.",
        widget=forms.Textarea(attrs={"rows": 28, "class": "mono code-editor",
                                     "spellcheck": "false", "autocomplete": "off",
                                     "autocapitalize": "off", "wrap": "off",
                                     "data-code-editor": ""}))

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["name"]
        else:
            del self.fields["enabled"], self.fields["published"]

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """A definition's problems go next to the editor, each under its path
        (`definition.nodes[2].args.x: ...`); the rest as the base form does."""
        rest: dict[str, list[str]] = {}
        for key, problems in errors.items():
            if key == "definition" or key.startswith("definition."):
                for message in problems:
                    self.add_error("definition",
                                   message if key == "definition" else f"{key}: {message}")
            else:
                rest[key] = problems
        super().add_service_errors(rest)


class ReleaseForm(forms.Form):
    candidate = forms.IntegerField(min_value=1, max_value=MAX_INT)
    percent = forms.IntegerField(
        min_value=0, max_value=100, label="Share of new runs (%)",
        error_messages={"required": "Give the share of new runs, 0 to 100."})


class VersionForm(forms.Form):
    version = forms.IntegerField(min_value=1, max_value=MAX_INT,
                                 error_messages={"required": "Choose a version."})


class EndReleaseForm(forms.Form):
    """Ending a release takes no input."""
