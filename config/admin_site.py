"""The Django admin is for the operator's superusers only.

The admin's classes are not scoped to a tenant (they list every tenant's tasks,
tools and users), so a tenant's own admin must not reach it: the site asks for
`is_superuser`, not Django's `is_staff`. Tenant admins manage their tenant
through the console and the API. Installed as the admin app's default site
(`TetherAdminConfig` in INSTALLED_APPS in place of `django.contrib.admin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

from foundations.actors import Actor


class SuperuserAdminSite(admin.AdminSite):
    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_superuser)


class TetherAdminConfig(AdminConfig):
    default_site = "config.admin_site.SuperuserAdminSite"


def operator_of(request: HttpRequest) -> Actor:
    """A superuser of the Django admin, as audit entries name them."""
    return Actor(name=request.user.get_username(), role="django-admin", user_id=request.user.pk)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """View-only: rows written by services (the audit trail, the ledger) are not
    edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ServiceCheckedForm(forms.ModelForm):  # type: ignore[type-arg]
    """An admin form for a tenant's resource, checked by the same rules as the API
    and the console: `check` is the service's whole-resource check (field errors
    keyed by the service's names; those the form lacks are named in the message)."""

    check: Callable[[Any], dict[str, list[str]]]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        probe = self._meta.model(
            **{k: v for k, v in data.items() if k != "tenant"},
            tenant_id=getattr(data.get("tenant"), "pk", 0),
        )
        for field, messages in type(self).check(probe).items():
            target = field if field in self.fields else None
            for message in messages:
                self.add_error(target, message if target else f"{field}: {message}")
        return data
