"""Shapes of approvals, reconciliations and questions, and of the decisions taken on them.

Input serializers check types and bounds only; `approvals_app.services.decisions`
decides what is allowed (roles, separation of duties, stale versions, double
decisions, edited arguments against the tool's schema and policy).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from foundations.api_base import ExpectedVersionMixin

from ..models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)
from ..selectors import INBOX_FILTERS

MAX_TEXT = 10_000


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


class ApprovalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField(source="task_id")
    step = serializers.IntegerField(source="step_id")
    step_no = serializers.IntegerField(source="step.step_no")
    status = serializers.ChoiceField(choices=Decision.choices)
    tool = serializers.CharField()
    args = serializers.DictField(
        child=serializers.JSONField(), help_text="The arguments as proposed."
    )
    preview = serializers.DictField(
        child=serializers.JSONField(),
        help_text="What the reviewer is shown: tool, args, risk, reason, cites.",
    )
    task_version = serializers.IntegerField(
        help_text="The task version the approval was opened at."
    )
    expires_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.SerializerMethodField()
    decided_role = serializers.CharField(allow_blank=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    channel = serializers.CharField(
        allow_blank=True, help_text="Where it was decided: console, api, email or slack.")
    comment = serializers.CharField(allow_blank=True)
    edited_args = serializers.JSONField(allow_null=True)
    args_diff = serializers.JSONField(allow_null=True, help_text="{arg: {from, to}} when edited.")
    response_output = serializers.JSONField(allow_null=True)
    always_allow = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    kind = serializers.CharField(help_text="tool, or authorization (outside the requester's "
                                           "scope: an admin or the named group grants it)")
    rule = serializers.JSONField(allow_null=True,
                                 help_text="The approval rule that applied (null: the tool's "
                                           "own requires_approval).")
    approvals_required = serializers.IntegerField()
    approvals_given = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()),
        help_text="The approvals recorded before the last one needed.")
    group = serializers.SerializerMethodField()
    group_required = serializers.BooleanField(help_text="Only the group's members decide.")
    assignee = serializers.SerializerMethodField()
    on_expiry = serializers.CharField(allow_blank=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decided_by(self, approval: Approval) -> str | None:
        return _username(approval.decided_by)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_group(self, approval: Approval) -> str | None:
        return approval.group.name if approval.group is not None else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_assignee(self, approval: Approval) -> str | None:
        return _username(approval.assignee)


class ReconciliationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField(source="task_id")
    step = serializers.IntegerField(source="step_id")
    step_no = serializers.IntegerField(source="step.step_no")
    status = serializers.ChoiceField(choices=ReconciliationStatus.values)
    tool = serializers.CharField()
    args = serializers.DictField(child=serializers.JSONField())
    idempotency_key = serializers.CharField()
    attempts = serializers.SerializerMethodField()
    status_answer = serializers.JSONField(
        allow_null=True, help_text="The latest status-query answer."
    )
    reason = serializers.CharField(allow_blank=True)
    outcome = serializers.CharField(allow_blank=True)
    output = serializers.JSONField(allow_null=True)
    comment = serializers.CharField(allow_blank=True)
    resolved_by = serializers.SerializerMethodField()
    resolved_role = serializers.CharField(allow_blank=True)
    resolved_at = serializers.DateTimeField(allow_null=True)
    channel = serializers.CharField(
        allow_blank=True, help_text="Where it was decided: console, api, email or slack.")
    task_version = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(
        serializers.ListField(child=serializers.DictField(child=serializers.JSONField()))
    )
    def get_attempts(self, rec: Reconciliation) -> list[dict[str, Any]]:
        return list(self.context.get("attempts", {}).get(rec.idempotency_key, []))

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_resolved_by(self, rec: Reconciliation) -> str | None:
        return _username(rec.resolved_by)


class QuestionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField(source="task_id")
    step = serializers.IntegerField(source="step_id")
    question = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=QuestionStatus.values)
    answer = serializers.CharField(allow_blank=True)
    answered_by = serializers.SerializerMethodField()
    answered_role = serializers.CharField(allow_blank=True)
    answered_at = serializers.DateTimeField(allow_null=True)
    channel = serializers.CharField(
        allow_blank=True, help_text="Where it was decided: console, api, email or slack.")
    task_version = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_answered_by(self, q: Question) -> str | None:
        return _username(q.answered_by)


# --- filters and decisions --------------------------------------------------------------


class ApprovalFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Decision.choices, required=False)
    task = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
    assigned = serializers.ChoiceField(
        choices=INBOX_FILTERS, required=False,
        help_text="mine: assigned to me; groups: routed to a group of mine (or to me); all.")


class ReassignSerializer(serializers.Serializer):
    to_user = serializers.CharField(max_length=150, required=False)
    to_group = serializers.CharField(max_length=64, required=False)
    comment = serializers.CharField(max_length=MAX_TEXT, allow_blank=True, required=False,
                                    default="")


class ReconciliationFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ReconciliationStatus.values, required=False)
    task = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)


class QuestionFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=QuestionStatus.values, required=False)
    task = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)


class ApproveSerializer(ExpectedVersionMixin):
    comment = serializers.CharField(
        max_length=MAX_TEXT, allow_blank=True, required=False, default=""
    )
    args = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="Edited arguments: re-validated against the tool's schema and policy; "
        "the diff is stored.",
    )
    always_allow = serializers.BooleanField(
        required=False, default=False, help_text="Always allow this tool for the rest of this task."
    )


class RejectSerializer(ExpectedVersionMixin):
    comment = serializers.CharField(max_length=MAX_TEXT, help_text="Why: the agent receives it.")


class DecideAllSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    comment = serializers.CharField(
        max_length=MAX_TEXT, allow_blank=True, required=False, default="",
        help_text="Required to reject: the agent receives it with each rejected call.")


class DecidedAllSerializer(serializers.Serializer):
    decided = ApprovalSerializer(many=True)


class RespondSerializer(ExpectedVersionMixin):
    output = serializers.JSONField(help_text="The tool's result, supplied instead of running it.")
    comment = serializers.CharField(
        max_length=MAX_TEXT, allow_blank=True, required=False, default=""
    )


class ResolveSerializer(ExpectedVersionMixin):
    outcome = serializers.ChoiceField(choices=["succeeded", "failed", "retry"])
    output = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="For `succeeded`: what the call returned (the evidence).",
    )
    comment = serializers.CharField(
        max_length=MAX_TEXT, help_text="The evidence or reason, recorded."
    )
