"""Forms of the task pages: the list's filters and the operator actions.

Forms only parse and bound their input; the rules (who may, what is allowed
from which state) are in `foundations.console_access` and the services.
"""

from __future__ import annotations

from typing import Any

from django import forms

from ..machine import TaskStatus
from ..retries.services import MAX_COMMENT
from .presenters import status_label
from .selectors import STATUS_GROUPS

BUDGET_KEYS = ("max_steps", "max_model_calls", "max_tool_calls", "max_tokens", "max_duration_s")


def status_choices() -> list[tuple[str, str]]:
    groups = [
        ("", "Any status"),
        ("active", "Active (not finished)"),
        ("waiting", "Waiting (any)"),
        ("finished", "Finished"),
    ]
    return groups + [(s, status_label(s)) for s in TaskStatus.values]


class TaskFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        widget=forms.TextInput(
            attrs={
                "type": "search",
                "placeholder": "Goal, task id or trace id",
                "autocomplete": "off",
            }
        ),
    )
    status = forms.ChoiceField(required=False, choices=status_choices)
    agent = forms.ChoiceField(required=False)
    workflow = forms.ChoiceField(required=False)
    agent_version = forms.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, label="Agent version",
        widget=forms.NumberInput(attrs={"placeholder": "Any"}),
    )
    trace = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    mine = forms.BooleanField(required=False, label="Only mine")

    def __init__(self, *args: Any, agents: list[str], workflows: list[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent = self.fields["agent"]
        assert isinstance(agent, forms.ChoiceField)
        agent.choices = [("", "Any agent"), *((a, a) for a in agents)]
        workflow = self.fields["workflow"]
        assert isinstance(workflow, forms.ChoiceField)
        workflow.choices = [("", "Any workflow"), *((w, w) for w in workflows or [])]

    def filters(self) -> dict[str, Any]:
        """The cleaned filters; anything invalid is dropped rather than refused."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return {
            "q": data.get("q", ""),
            "status": data.get("status", ""),
            "agent": data.get("agent", ""),
            "workflow": data.get("workflow", ""),
            "agent_version": data.get("agent_version"),
            "trace": data.get("trace", ""),
            "mine": bool(data.get("mine")),
        }


def describe_filters(filters: dict[str, Any]) -> str:
    parts = []
    if filters.get("status"):
        s = filters["status"]
        parts.append(f"status {s}" if s in STATUS_GROUPS else f"status {status_label(s)}")
    if filters.get("agent"):
        parts.append(f"agent {filters['agent']}")
    if filters.get("workflow"):
        parts.append(f"workflow {filters['workflow']}")
    if filters.get("agent_version"):
        parts.append(f"agent version {filters['agent_version']}")
    if filters.get("q"):
        parts.append(f"search “{filters['q']}”")
    if filters.get("trace"):
        parts.append(f"trace {filters['trace']}")
    if filters.get("mine"):
        parts.append("requested by me")
    return ", ".join(parts) or "no filter"


class VersionedForm(forms.Form):
    """An action on what the page showed: the task version (and status) it saw."""

    expected_version = forms.IntegerField(min_value=0)
    shown_status = forms.ChoiceField(choices=TaskStatus.choices, required=False)


class CancelForm(VersionedForm):
    reason = forms.CharField(required=False, max_length=500)


class FailForm(VersionedForm):
    reason = forms.CharField(
        max_length=500,
        required=True,
        error_messages={"required": "Say why the task is being ended."},
    )


class ResumeForm(VersionedForm):
    comment = forms.CharField(required=False, max_length=500)
    max_steps = forms.IntegerField(
        required=False, min_value=0, max_value=100_000, label="Extra steps"
    )
    max_model_calls = forms.IntegerField(
        required=False, min_value=0, max_value=100_000, label="Extra model calls"
    )
    max_tool_calls = forms.IntegerField(
        required=False, min_value=0, max_value=100_000, label="Extra tool calls"
    )
    max_tokens = forms.IntegerField(
        required=False, min_value=0, max_value=100_000_000, label="Extra tokens"
    )
    max_duration_s = forms.IntegerField(
        required=False, min_value=0, max_value=30 * 86400, label="Extra seconds"
    )

    def extension(self) -> dict[str, int]:
        return {k: self.cleaned_data[k] for k in BUDGET_KEYS if self.cleaned_data.get(k)}


class SummaryRollbackForm(forms.Form):
    """Roll the context back to summary `version` (0: drop every summary)."""

    version = forms.IntegerField(min_value=0, max_value=2**31 - 1)
    expected_version = forms.IntegerField(min_value=0, max_value=2**31 - 1)
    comment = forms.CharField(required=False, max_length=2000)


class BulkCancelForm(TaskFilterForm):
    reason = forms.CharField(required=False, max_length=500)
    expected_count = forms.IntegerField(min_value=0)


class BulkRetryForm(TaskFilterForm):
    comment = forms.CharField(required=False, max_length=MAX_COMMENT)
    expected_count = forms.IntegerField(min_value=0)
