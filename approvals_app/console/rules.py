"""The console's Approval rules page: the tenant's rules in the order they
apply, its reviewer groups and its requesters' scopes. Everyone who reviews or
operates reads it; admins change it, through `approvals_app.services.rules`
(each change audited; the service's field errors come back on the form)."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from accounts_app.models import Role
from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import ServiceErrorsForm, form_action, save_form, succeeded
from foundations.console_errors import error_message, error_status
from foundations.errors import DomainError
from tools_app.models import Risk

from ..models import ApprovalRule, OnExpiry, RequesterScope, ReviewerGroup, RuleAction
from ..services.rules import group_delete, group_save, rule_create, rule_delete, scope_set

READERS = frozenset({Role.OPERATOR, Role.REVIEWER, Role.ADMIN})


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _names(value: str) -> list[str]:
    """A comma-separated list as the service takes it."""
    return [part.strip() for part in value.split(",") if part.strip()]


def _list_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(label=label, required=False, max_length=4000, help_text=help_text)


class RuleForm(ServiceErrorsForm):
    name = forms.CharField(max_length=64, help_text="Lower-case letters, digits, _ and -.")
    position = forms.IntegerField(required=False, min_value=0, max_value=10_000,
                                  help_text="Rules apply in this order (empty: last).")
    action = forms.ChoiceField(choices=RuleAction.choices)
    approvals = forms.TypedChoiceField(choices=[(1, "1"), (2, "2: two different reviewers")],
                                       coerce=int, initial=1)
    group = forms.CharField(max_length=64, required=False,
                            help_text="The reviewer group it goes to (require_role: only "
                                      "its members decide).")
    tools = _list_field("Tools", "Comma-separated; empty: any tool.")
    risks = _list_field("Risks", f"Of {', '.join(Risk.values)}; empty: any.")
    agents = _list_field("Agents", "Empty: any agent.")
    requester_roles = _list_field("Requester roles", "Empty: anyone.")
    requester_groups = _list_field("Requester groups", "Empty: anyone.")
    condition = forms.CharField(required=False, max_length=2000,
                                help_text="CEL over args, tool, agent, risk, requester, "
                                          "e.g. args.amount_cents > 50000")
    message = forms.CharField(required=False, max_length=300,
                              help_text="What a deny tells the model.")
    sla_s = forms.IntegerField(required=False, min_value=0, label="SLA (seconds)",
                               help_text="Empty or 0: the agent's approval SLA.")
    on_expiry = forms.ChoiceField(choices=[("", "the agent's"), *OnExpiry.choices],
                                  required=False)
    escalate_to = forms.CharField(max_length=64, required=False,
                                  help_text="A second group, for on_expiry: escalate.")

    def as_rule(self) -> dict[str, Any]:
        d = self.cleaned_data
        data: dict[str, Any] = {
            "name": d["name"], "action": d["action"], "approvals": d["approvals"],
            "group": d["group"] or None, "condition": d["condition"], "message": d["message"],
            "sla_s": d["sla_s"] or 0, "on_expiry": d["on_expiry"],
            "escalate_to": d["escalate_to"] or None,
            **{key: _names(d[key]) for key in ("tools", "risks", "agents", "requester_roles",
                                               "requester_groups")},
        }
        if d["position"] is not None:
            data["position"] = d["position"]
        return data


class GroupForm(ServiceErrorsForm):
    name = forms.CharField(max_length=64)
    members = _list_field("Members", "Usernames of reviewers and admins, comma-separated.")
    agents = _list_field("Agents", "Their requests route to this group unless a rule says "
                                   "otherwise.")


class ScopeForm(ServiceErrorsForm):
    user = forms.CharField(max_length=150, label="User")
    agents = _list_field("Agents they may run", "Empty: any.")
    tools = _list_field("Tools their tasks may call", "Others wait for an authorization; "
                                                      "empty: any.")
    authorizers = forms.CharField(max_length=64, required=False,
                                  help_text="The group that grants (empty: the admins).")


def _page(request: HttpRequest, *, rule_form: RuleForm | None = None,
          group_form: GroupForm | None = None, scope_form: ScopeForm | None = None,
          status: int = 200) -> HttpResponse:
    tenant_id = _cu(request).tenant_id
    ctx = {
        "nav": "rules",
        "rules": ApprovalRule.objects.filter(tenant_id=tenant_id).select_related(
            "group", "escalate_to"),
        "groups": ReviewerGroup.objects.filter(tenant_id=tenant_id).prefetch_related("members"),
        "scopes": RequesterScope.objects.filter(tenant_id=tenant_id).select_related(
            "user", "authorizers"),
        "rule_form": rule_form or RuleForm(),
        "group_form": group_form or GroupForm(),
        "scope_form": scope_form or ScopeForm(),
    }
    return render(request, "approvals/rules.html", ctx, status=status)


@console_view(roles=READERS)
def rules(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@console_view(roles=ADMINS)
def rule_add(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    form = RuleForm(request.POST)
    return save_form(
        form,
        lambda d: rule_create(tenant_id=cu.tenant_id, data=form.as_rule(), actor=cu.actor),
        page=lambda f, status: _page(request, rule_form=f, status=status),
        done=lambda rule: succeeded(request, f"Rule {rule.name} added.", "rules:rules"),
        status_of=error_status,
    )


@require_POST
@console_view(roles=ADMINS)
def rule_remove(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    return form_action(
        None,
        lambda _: rule_delete(tenant_id=cu.tenant_id, name=name, actor=cu.actor),
        refused=lambda exc: _refused(request, exc),
        done=lambda _: succeeded(request, f"Rule {name} deleted.", "rules:rules"),
    )


@require_POST
@console_view(roles=ADMINS)
def group_set(request: HttpRequest) -> HttpResponse:
    """Add a group, or replace an existing group's members and agents."""
    cu = _cu(request)
    form = GroupForm(request.POST)

    def save(d: dict[str, Any]) -> ReviewerGroup:
        exists = ReviewerGroup.objects.filter(tenant_id=cu.tenant_id, name=d["name"]).exists()
        return group_save(tenant_id=cu.tenant_id, name=d["name"], actor=cu.actor,
                          create=not exists,
                          data={"members": _names(d["members"]), "agents": _names(d["agents"])})

    return save_form(
        form, save,
        page=lambda f, status: _page(request, group_form=f, status=status),
        done=lambda group: succeeded(request, f"Group {group.name} saved.", "rules:rules"),
        status_of=error_status,
    )


@require_POST
@console_view(roles=ADMINS)
def group_remove(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    return form_action(
        None,
        lambda _: group_delete(tenant_id=cu.tenant_id, name=name, actor=cu.actor),
        refused=lambda exc: _refused(request, exc),
        done=lambda _: succeeded(request, f"Group {name} deleted.", "rules:rules"),
    )


@require_POST
@console_view(roles=ADMINS)
def scope_save(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    form = ScopeForm(request.POST)
    return save_form(
        form,
        lambda d: scope_set(tenant_id=cu.tenant_id, username=d["user"], actor=cu.actor,
                            data={"agents": _names(d["agents"]), "tools": _names(d["tools"]),
                                  "authorizers": d["authorizers"] or None}),
        page=lambda f, status: _page(request, scope_form=f, status=status),
        done=lambda scope: succeeded(request, f"Scope of {scope.user.username} saved.",
                                     "rules:rules"),
        status_of=error_status,
    )


def _refused(request: HttpRequest, exc: DomainError) -> HttpResponse:
    messages.error(request, error_message(exc))
    return _page(request, status=error_status(exc))
