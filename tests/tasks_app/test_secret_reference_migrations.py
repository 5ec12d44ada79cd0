"""The data migrations that move tools and agents off environment variables:
references are converted (or dropped), and no environment value is ever copied
into a tenant."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from accounts_app.models import TenantSecret
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tests.factories import TenantFactory, submit
from tests.fakes.runtime import add_agent, add_tool

pytestmark = pytest.mark.django_db

agents_migration = importlib.import_module("tasks_app.migrations.0005_model_key_references")
tools_migration = importlib.import_module("tools_app.migrations.0004_secret_header_templates")


def test_agent_keys_become_secret_references_unless_granted(world, settings, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    settings.TETHER_ENV_GRANTS = ("t-main:OLLAMA_API_KEY",)
    model = {"backend": "openai", "name": "m", "base_url": "http://h/v1"}
    add_agent(world.tenant, "cloud", [], model={**model, "api_key_env": "OPENAI_API_KEY",
                                                "fallback": {"name": "f",
                                                             "api_key_env": "SECRET_KEY"}})
    add_agent(world.tenant, "local", [], model={**model, "api_key_env": "OLLAMA_API_KEY"})
    elsewhere = TenantFactory(name="t-elsewhere")
    add_agent(elsewhere, "local", [], model={**model, "api_key_env": "OLLAMA_API_KEY"})
    running = submit(world.tenant, None, agent="cloud")
    finished = submit(world.tenant, None, agent="cloud")
    Task.objects.filter(pk=finished.pk).update(status=TaskStatus.SUCCEEDED)

    agents_migration.forwards(apps, None)

    cloud = AgentProfile.objects.get(tenant=world.tenant, name="cloud").model
    assert (cloud["api_key_secret"], cloud["fallback"]["api_key_secret"]) == (
        "openai_api_key", "secret_key")
    assert "api_key_env" not in cloud and "api_key_env" not in cloud["fallback"]
    # granted to t-main: kept there, converted in the tenant it is not granted to
    assert AgentProfile.objects.get(tenant=world.tenant, name="local").model[
        "api_key_env"] == "OLLAMA_API_KEY"
    assert AgentProfile.objects.get(tenant=elsewhere, name="local").model[
        "api_key_secret"] == "ollama_api_key"
    assert Task.objects.get(pk=running.pk).agent_snapshot["model"]["api_key_secret"] == (
        "openai_api_key")
    assert Task.objects.get(pk=finished.pk).agent_snapshot["model"]["api_key_env"] == (
        "OPENAI_API_KEY")
    assert not TenantSecret.objects.exists()  # nothing copied from the environment


def test_tool_headers_become_secret_templates_and_other_variables_go(world):
    add_tool(world.tenant, "legacy", kind="http", url="https://x.example/a", secret_headers={
        "Authorization": "TETHER_SECRET_SHIPPING_TOKEN",
        "X-Server": "SECRET_KEY",
        "X-New": "Bearer {secret:new}",
    })

    tools_migration.forwards(apps, None)

    assert world.tenant.tools.get(name="legacy").secret_headers == {
        "Authorization": "{secret:shipping_token}",
        "X-New": "Bearer {secret:new}",
    }
    assert not TenantSecret.objects.exists()
