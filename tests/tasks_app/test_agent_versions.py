"""Versions outside the API: a profile made behind the services gets version 1
at its first task, the data migration gives every existing profile version 1,
and an edit in the Django admin is a version like any other."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.test import Client

from tasks_app.models import AgentProfile, AgentVersion, Task
from tests.factories import AgentFactory, submit

pytestmark = pytest.mark.django_db

version_one = importlib.import_module("tasks_app.migrations.0008_agent_versions_v1").version_one


def test_a_profile_made_behind_the_services_gets_version_1_at_its_first_task(world):
    agent = AgentFactory(tenant=world.tenant, name="raw", tools=["lookup_order"], max_steps=7)
    assert (agent.current_version, agent.versions.count()) == (0, 0)
    task = submit(world.tenant, [{"final": {}}], agent="raw")
    (version,) = AgentVersion.objects.filter(agent=agent)
    assert (version.number, version.kind, version.actor) == (1, "imported", "system")
    assert task.agent_version == 1 and task.agent_snapshot == version.config
    assert version.config["budget"]["max_steps"] == 7
    assert submit(world.tenant, [{"final": {}}], agent="raw").agent_version == 1
    assert AgentVersion.objects.filter(agent=agent).count() == 1


def test_the_data_migration_gives_every_existing_profile_version_1(world):
    old = AgentFactory(tenant=world.tenant, name="before-versions", max_tokens=1234)
    already = AgentProfile.objects.get(tenant=world.tenant, name="support")  # has its versions
    before = list(AgentVersion.objects.filter(agent=already).values_list("id", flat=True))

    version_one(apps, None)

    (version,) = AgentVersion.objects.filter(agent=old)
    assert (version.number, version.kind) == (1, "imported")
    assert version.config == AgentProfile.objects.get(pk=old.pk).snapshot()
    assert version.config["budget"]["max_tokens"] == 1234
    old.refresh_from_db()
    assert (old.current_version, old.latest_version) == (1, 1)
    assert list(AgentVersion.objects.filter(agent=already).values_list("id", flat=True)) == before


def test_an_edit_in_the_django_admin_is_a_version(world, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="pw")
    c = Client()
    c.force_login(root)
    agent = AgentProfile.objects.get(tenant=world.tenant, name="support")
    current = agent.current_version
    form = {
        "tenant": world.tenant.pk, "name": "support", "description": agent.description,
        "enabled": "on", "model": '{"backend": "scripted", "name": "scripted"}',
        "tools": '["lookup_order"]', "max_steps": "9", "max_model_calls": "60",
        "max_tool_calls": "50", "max_tokens": "200000", "max_duration_s": "3600",
        "per_tool": "{}", "max_concurrent_tasks": "20", "on_exhaustion": "fail",
        "no_progress_repeats": "3", "no_progress_window": "6", "approval_sla_s": "86400",
        "approval_on_expiry": "escalate", "result_schema": "{}", "memory_policy": "off",
        "completion_checks": "[]", "max_completion_attempts": "3",
    }
    response = c.post(f"/admin/tasks_app/agentprofile/{agent.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    latest = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
    assert latest is not None and latest.number == current + 1
    assert (latest.actor, latest.config["budget"]["max_steps"]) == ("root", 9)
    agent.refresh_from_db()
    # Saved, not live: new tasks still get the current version until it is released.
    assert agent.current_version == current
    task = submit(world.tenant, [{"final": {}}])
    assert Task.objects.get(pk=task.pk).agent_version == current
