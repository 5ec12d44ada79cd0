"""Who decides on tool calls: the tenant's approval rules (an ordered list),
its reviewer groups and its requesters' scopes. Reads: operators, reviewers,
admins; changes: admins, each one audited (`approvals_app.services.rules`)."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts_app.models import Role
from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from foundations.errors import not_found
from tools_app.models import Risk

from ..models import ApprovalRule, OnExpiry, RequesterScope, ReviewerGroup, RuleAction
from ..services.rules import (
    group_audited,
    group_delete,
    group_of,
    group_save,
    rule_audited,
    rule_create,
    rule_delete,
    rule_of,
    rule_update,
    scope_audited,
    scope_set,
)

TAGS = ["approval rules"]
_names = serializers.ListField(child=serializers.CharField(max_length=100), max_length=100,
                               required=False)


class RuleSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    position = serializers.IntegerField(min_value=0, max_value=10_000, required=False,
                                        help_text="Rules apply in this order; the first "
                                                  "that matches decides.")
    enabled = serializers.BooleanField(required=False)
    action = serializers.ChoiceField(choices=RuleAction.choices)
    approvals = serializers.IntegerField(min_value=1, max_value=2, required=False,
                                         help_text="2: two different reviewers, neither the "
                                                   "requester.")
    group = serializers.CharField(max_length=64, allow_null=True, required=False,
                                  help_text="The reviewer group the request goes to "
                                            "(require_role: only its members decide).")
    tools = _names
    risks = serializers.ListField(child=serializers.ChoiceField(choices=Risk.values),
                                  max_length=10, required=False)
    agents = serializers.ListField(child=serializers.CharField(max_length=100), max_length=100,
                                   required=False)
    requester_roles = serializers.ListField(child=serializers.ChoiceField(choices=Role.values),
                                            max_length=10, required=False)
    requester_groups = serializers.ListField(child=serializers.CharField(max_length=100),
                                             max_length=100, required=False)
    condition = serializers.CharField(max_length=2000, allow_blank=True, required=False,
                                      help_text="CEL over args, tool, agent, risk, requester "
                                                "(e.g. args.amount_cents > 50000).")
    message = serializers.CharField(max_length=300, allow_blank=True, required=False,
                                    help_text="What a deny tells the model.")
    sla_s = serializers.IntegerField(min_value=0, max_value=90 * 24 * 3600, required=False)
    on_expiry = serializers.ChoiceField(choices=["", *OnExpiry.values], required=False)
    escalate_to = serializers.CharField(max_length=64, allow_null=True, required=False)


class RuleOutSerializer(RuleSerializer):
    enabled = serializers.BooleanField()
    version = serializers.IntegerField()


class RuleUpdateSerializer(RuleSerializer):
    name = serializers.CharField(max_length=64, required=False)
    action = serializers.ChoiceField(choices=RuleAction.choices, required=False)
    expected_version = serializers.IntegerField(min_value=1, required=False)


def _out(rule: ApprovalRule) -> dict[str, Any]:
    return rule_audited(rule)


class RuleListView(TenantAPIView):
    """The tenant's approval rules, in the order they apply."""

    policy = {"GET": "policy.read", "POST": "policy.write"}

    @extend_schema(operation_id="approval_rules_list", tags=TAGS, summary="List rules, in order",
                   responses={200: RuleOutSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        rules = ApprovalRule.objects.filter(tenant_id=self.access.tenant_id).select_related(
            "group", "escalate_to")
        return Response([_out(r) for r in rules])

    @extend_schema(operation_id="approval_rules_create", tags=TAGS, summary="Add a rule",
                   request=RuleSerializer,
                   responses={201: RuleOutSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = self.validated(RuleSerializer)
        rule = rule_create(tenant_id=self.access.tenant_id, data=data, actor=self.access.actor)
        return Response(_out(rule_of(self.access.tenant_id, rule.name)),
                        status=status.HTTP_201_CREATED)


class RuleDetailView(TenantAPIView):
    """One rule: read, change (its version grows), delete."""

    policy = {"GET": "policy.read", "PATCH": "policy.write", "DELETE": "policy.write"}

    @extend_schema(operation_id="approval_rules_retrieve", tags=TAGS, summary="A rule",
                   responses={200: RuleOutSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        return Response(_out(rule_of(self.access.tenant_id, name)))

    @extend_schema(operation_id="approval_rules_update", tags=TAGS, summary="Change a rule",
                   request=RuleUpdateSerializer,
                   responses={200: RuleOutSerializer, **error_responses(409)})
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(RuleUpdateSerializer)
        expected = data.pop("expected_version", None)
        rule_update(tenant_id=self.access.tenant_id, name=name, data=data,
                    actor=self.access.actor, expected_version=expected)
        return Response(_out(rule_of(self.access.tenant_id, name)))

    @extend_schema(operation_id="approval_rules_destroy", tags=TAGS, summary="Delete a rule",
                   responses={204: None, **error_responses()})
    def delete(self, request: Request, name: str) -> Response:
        rule_delete(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class GroupSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    members = serializers.ListField(child=serializers.CharField(max_length=150),
                                    max_length=500, required=False,
                                    help_text="Usernames of reviewers and admins.")
    agents = serializers.ListField(child=serializers.CharField(max_length=100), max_length=100,
                                   required=False,
                                   help_text="Agents whose requests route here by default.")


class GroupUpdateSerializer(GroupSerializer):
    name = serializers.CharField(max_length=64, required=False)


class GroupListView(TenantAPIView):
    """The tenant's reviewer groups."""

    policy = {"GET": "policy.read", "POST": "policy.write"}

    @extend_schema(operation_id="reviewer_groups_list", tags=TAGS, summary="List groups",
                   responses={200: GroupSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        groups = ReviewerGroup.objects.filter(tenant_id=self.access.tenant_id)
        return Response([group_audited(g) for g in groups])

    @extend_schema(operation_id="reviewer_groups_create", tags=TAGS, summary="Add a group",
                   request=GroupSerializer,
                   responses={201: GroupSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        data = self.validated(GroupSerializer)
        group = group_save(tenant_id=self.access.tenant_id, name=data.pop("name"), data=data,
                           actor=self.access.actor, create=True)
        return Response(group_audited(group), status=status.HTTP_201_CREATED)


class GroupDetailView(TenantAPIView):
    """One group: read, replace its members or agents, delete."""

    policy = {"GET": "policy.read", "PATCH": "policy.write", "DELETE": "policy.write"}

    @extend_schema(operation_id="reviewer_groups_retrieve", tags=TAGS, summary="A group",
                   responses={200: GroupSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        return Response(group_audited(group_of(self.access.tenant_id, name)))

    @extend_schema(operation_id="reviewer_groups_update", tags=TAGS,
                   summary="Replace a group's members or agents", request=GroupUpdateSerializer,
                   responses={200: GroupSerializer, **error_responses()})
    def patch(self, request: Request, name: str) -> Response:
        data = self.validated(GroupUpdateSerializer)
        data.pop("name", None)
        group = group_save(tenant_id=self.access.tenant_id, name=name, data=data,
                           actor=self.access.actor, create=False)
        return Response(group_audited(group))

    @extend_schema(operation_id="reviewer_groups_destroy", tags=TAGS, summary="Delete a group",
                   responses={204: None, **error_responses(409)})
    def delete(self, request: Request, name: str) -> Response:
        group_delete(tenant_id=self.access.tenant_id, name=name, actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScopeSerializer(serializers.Serializer):
    user = serializers.CharField(read_only=True)
    agents = serializers.ListField(child=serializers.CharField(max_length=100), max_length=100,
                                   required=False, help_text="Agents they may run (empty: any).")
    tools = serializers.ListField(child=serializers.CharField(max_length=100), max_length=100,
                                  required=False,
                                  help_text="Tools their tasks may call without an "
                                            "authorization (empty: any).")
    authorizers = serializers.CharField(max_length=64, allow_null=True, required=False,
                                        help_text="The group that grants authorizations "
                                                  "(null: the admins).")


class ScopeView(TenantAPIView):
    """A user's scope (their API keys act as them)."""

    policy = {"GET": "policy.read", "PUT": "policy.write"}

    @extend_schema(operation_id="scopes_retrieve", tags=TAGS, summary="A user's scope",
                   responses={200: ScopeSerializer, **error_responses()})
    def get(self, request: Request, name: str) -> Response:
        scope = (RequesterScope.objects.select_related("user", "authorizers")
                 .filter(tenant_id=self.access.tenant_id, user__username=name).first())
        if scope is None:
            raise not_found("Scope")
        return Response(scope_audited(scope))

    @extend_schema(operation_id="scopes_set", tags=TAGS, summary="Set a user's scope",
                   request=ScopeSerializer, responses={200: ScopeSerializer, **error_responses()})
    def put(self, request: Request, name: str) -> Response:
        data = self.validated(ScopeSerializer)
        scope = scope_set(tenant_id=self.access.tenant_id, username=name, data=data,
                          actor=self.access.actor)
        return Response(scope_audited(scope))
