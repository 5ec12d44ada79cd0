"""Admins' pages: tools and agent profiles in the console (through the same
services as the API, with their field errors on the form), and the Django
admin, where task state is read-only."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from foundations.actors import SYSTEM
from tasks_app.models import AgentProfile
from tests.factories import submit
from tests.helpers import drive
from tools_app.models import Tool

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


TOOL_FORM = {
    "name": "shipping_quote",
    "description": "Quote a shipment.",
    "kind": "http",
    "url": "http://127.0.0.1:9/quote",  # an address the suite allows (TETHER_EGRESS_ALLOW)
    "status_url": "",
    "status_tool": "",
    "target": "",
    "compensation_tool": "",
    "secret_headers": '{"Authorization": "Bearer {secret:shipping}"}',
    "args_schema": json.dumps({"type": "object", "properties": {"weight": {"type": "number"}}}),
    "result_schema": "",
    "side_effect": "read",
    "risk": "low",
    "timeout_s": "3",
    "max_retries": "2",
    "enabled": "on",
}

AGENT_FORM = {
    "name": "billing",
    "description": "Billing questions",
    "enabled": "on",
    "backend": "scripted",
    "model_name": "scripted",
    "system_prompt": "Be brief.",
    "tools": ["lookup_order"],
    "max_steps": "10",
    "max_model_calls": "12",
    "max_tool_calls": "8",
    "max_tokens": "5000",
    "max_duration_s": "600",
    "max_concurrent_tasks": "3",
    "per_tool": '{"lookup_order": 4}',
    "on_exhaustion": "escalate",
    "no_progress_repeats": "3",
    "no_progress_window": "6",
    "approval_sla_s": "3600",
    "approval_on_expiry": "reject",
    "result_schema": "",
}


def test_admin_registers_and_edits_a_tool(world):
    c = client_for(world.users[Role.ADMIN])
    assert "Register a tool" in c.get("/tools/").content.decode()
    bad = c.post("/tools/new/", {**TOOL_FORM, "args_schema": '{"type": "nonsense"}'})
    assert bad.status_code == 400
    assert "Not saved" in bad.content.decode()
    assert not Tool.objects.filter(tenant=world.tenant, name="shipping_quote").exists()
    not_json = c.post("/tools/new/", {**TOOL_FORM, "args_schema": "{oops"})
    assert not_json.status_code == 400 and "not valid JSON" in not_json.content.decode()
    # A header names secrets of the tenant: never SECRET_KEY or any other variable.
    leaky = c.post(
        "/tools/new/", {**TOOL_FORM, "secret_headers": '{"Authorization": "SECRET_KEY"}'}
    )
    assert leaky.status_code == 400
    (message,) = leaky.context["form"].errors["secret_headers"]
    assert "{secret:NAME}" in message
    assert 'class="field-error">Authorization: must name a secret of this tenant' in (
        leaky.content.decode()
    )
    # ... and only secrets that exist in the tenant.
    missing = c.post("/tools/new/", TOOL_FORM)
    assert missing.status_code == 400
    assert "no secret named &#x27;shipping&#x27; in this tenant" in missing.content.decode()
    assert not Tool.objects.filter(tenant=world.tenant, name="shipping_quote").exists()

    secret_create(tenant_id=world.tenant.pk, name="shipping", value="ship-s3cret", actor=SYSTEM)
    ok = c.post("/tools/new/", TOOL_FORM)
    assert ok.status_code == 302 and ok["Location"] == "/tools/shipping_quote/"
    tool = Tool.objects.get(tenant=world.tenant, name="shipping_quote")
    assert tool.kind == "http"
    assert tool.secret_headers == {"Authorization": "Bearer {secret:shipping}"}
    page = c.get("/tools/shipping_quote/").content.decode()
    assert "Bearer {secret:shipping}" in page and "ship-s3cret" not in page

    edit = c.post(
        "/tools/shipping_quote/edit/",
        {**TOOL_FORM, "name": "renamed", "timeout_s": "7", "enabled": ""},
    )
    assert edit.status_code == 302
    tool.refresh_from_db()
    # Saved, but not renamed: a tool's name is its identity.
    assert (tool.name, tool.timeout_s, tool.enabled) == ("shipping_quote", 7.0, False)
    wrong = c.post(
        "/tools/shipping_quote/edit/", {**TOOL_FORM, "status_url": "https://x.example/s"}
    )
    assert wrong.status_code == 400 and "{key}" in wrong.content.decode()


def test_admin_creates_and_edits_an_agent_profile(world):
    c = client_for(world.users[Role.ADMIN])
    form = c.get("/agents/new/").content.decode()
    assert 'name="system_prompt"' in form and 'value="lookup_order"' in form
    data = dict(AGENT_FORM)
    bad = c.post("/agents/new/", {**data, "per_tool": '{"issue_refund": 1}'})
    assert bad.status_code == 400 and "not one of this agent" in bad.content.decode()
    assert not AgentProfile.objects.filter(tenant=world.tenant, name="billing").exists()

    ok = c.post("/agents/new/", data)
    assert ok.status_code == 302
    agent = AgentProfile.objects.get(tenant=world.tenant, name="billing")
    assert agent.model["system_prompt"] == "Be brief." and agent.per_tool == {"lookup_order": 4}
    assert agent.max_steps == 10 and agent.on_exhaustion == "escalate"

    edited = c.post(
        "/agents/billing/edit/",
        {**data, "system_prompt": "Be thorough.", "temperature": "0.2", "max_steps": "20"},
    )
    assert edited.status_code == 302
    agent.refresh_from_db()
    assert agent.model["system_prompt"] == "Be thorough." and agent.model["temperature"] == 0.2
    assert agent.max_steps == 20
    page = c.get("/agents/billing/").content.decode()
    assert "Be thorough." in page and "lookup_order" in page


def test_the_django_admin_shows_task_state_read_only(world, django_user_model):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    root = django_user_model.objects.create_superuser("root", password="pw")
    c = client_for(root)
    page = c.get(f"/admin/tasks_app/task/{task.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "WAITING_FOR_INPUT" in html
    assert 'name="status"' not in html  # no input: the status changes only through transitions
    assert (
        c.post(f"/admin/tasks_app/task/{task.pk}/change/", {"status": "SUCCEEDED"}).status_code
        == 403
    )
    for path in (
        "/admin/tasks_app/event/",
        "/admin/approvals_app/question/",
        "/admin/tools_app/tool/",
        "/admin/tools_app/toolexecution/",
        "/admin/tasks_app/agentprofile/",
    ):
        assert c.get(path).status_code == 200, path


def test_the_django_admin_checks_a_tool_like_the_api(world, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="pw")
    c = client_for(root)
    tool = Tool.objects.get(tenant=world.tenant, name="lookup_order")
    response = c.post(
        f"/admin/tools_app/tool/{tool.pk}/change/",
        {
            "tenant": world.tenant.pk,
            "name": "lookup_order",
            "kind": "python",
            "target": "os.system",
            "args_schema": '{"type": "object"}',
            "result_schema": "{}",
            "secret_headers": "{}",
            "risk": "low",
            "timeout_s": "5",
            "side_effect": "read",
            "max_retries": "1",
            "enabled": "on",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert "python tools must live under" in response.content.decode()
    tool.refresh_from_db()
    assert tool.target == "tools_app.demo.tools.lookup_order"


def test_names_that_are_console_routes_are_refused(world):
    c = client_for(world.users[Role.ADMIN])
    tool = c.post("/tools/new/", {**TOOL_FORM, "name": "new"})
    assert tool.status_code == 400
    assert tool.context["form"].errors["name"] == ["'new' is reserved: choose another name"]
    assert not Tool.objects.filter(tenant=world.tenant, name="new").exists()
    assert c.get("/tools/new/").status_code == 200  # still the registration form

    agent = c.post("/agents/new/", {**AGENT_FORM, "name": "new"})
    assert agent.status_code == 400
    assert agent.context["form"].errors["name"] == ["'new' is reserved: choose another name"]
    assert not AgentProfile.objects.filter(tenant=world.tenant, name="new").exists()
    # Only the route's exact word is reserved.
    assert c.post("/agents/new/", {**AGENT_FORM, "name": "newer"}).status_code == 302


def test_the_agent_form_sets_the_guards_and_maps_their_errors(world):
    c = client_for(world.users[Role.ADMIN])
    check = '[{"tool": "lookup_order", "args": {"order_id": "${ output.order_id }"}}]'
    page = c.get("/agents/new/").content.decode()
    assert 'name="completion_checks"' in page and 'name="min_confidence"' in page

    bad = c.post("/agents/new/", {**AGENT_FORM, "completion_checks": '[{"tool": "issue_refund"}]',
                                  "min_confidence": "0.7"})
    assert bad.status_code == 400 and "not read-only" in bad.content.decode()
    assert not AgentProfile.objects.filter(tenant=world.tenant, name="billing").exists()
    not_a_list = c.post("/agents/new/", {**AGENT_FORM, "completion_checks": '{"tool": "x"}'})
    assert not_a_list.status_code == 400 and "a JSON list" in not_a_list.content.decode()

    ok = c.post("/agents/new/", {**AGENT_FORM, "completion_checks": check,
                                 "max_completion_attempts": "4", "min_confidence": "0.7"})
    assert ok.status_code == 302
    agent = AgentProfile.objects.get(tenant=world.tenant, name="billing")
    assert (agent.completion_checks[0]["tool"], agent.max_completion_attempts,
            agent.min_confidence) == ("lookup_order", 4, 0.7)
    shown = c.get("/agents/billing/").content.decode()
    assert "lookup_order" in shown and "0.7" in shown
    # cleared: off again
    assert c.post("/agents/billing/edit/", {**AGENT_FORM, "min_confidence": ""}).status_code == 302
    agent.refresh_from_db()
    assert (agent.completion_checks, agent.min_confidence) == ([], None)
