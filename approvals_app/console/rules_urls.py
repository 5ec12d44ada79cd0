"""Approval rules routes, mounted at /approval-rules/."""

from django.urls import path

from . import rules

app_name = "rules"
urlpatterns = [
    path("", rules.rules, name="rules"),
    path("add/", rules.rule_add, name="rule-add"),
    path("<slug:name>/delete/", rules.rule_remove, name="rule-delete"),
    path("groups/", rules.group_set, name="group-set"),
    path("groups/<slug:name>/delete/", rules.group_remove, name="group-delete"),
    path("scopes/", rules.scope_save, name="scope-set"),
]
