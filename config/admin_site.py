"""The Django admin is for the operator's superusers only.

The admin's classes are not scoped to a tenant (they list every tenant's tasks,
tools and users), so a tenant's own admin must not reach it: the site asks for
`is_superuser`, not Django's `is_staff`. Tenant admins manage their tenant
through the console and the API. Installed as the admin app's default site
(`TetherAdminConfig` in INSTALLED_APPS in place of `django.contrib.admin`).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest


class SuperuserAdminSite(admin.AdminSite):
    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_superuser)


class TetherAdminConfig(AdminConfig):
    default_site = "config.admin_site.SuperuserAdminSite"
