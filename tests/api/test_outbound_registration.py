"""URLs a tenant's admin registers pass the outbound-address policy: tool `url`
and `status_url`, an agent's model `base_url` and its fallback's. A refused
address is a 400 with a field error naming the policy, the same words whatever
the target, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile
from tools_app.models import Tool
from tools_app.outbound import REFUSED

from .conftest import Tenancy

ADM = Role.ADMIN
REFUSED_URLS = [
    "http://127.0.0.2:8000/x",  # loopback, not allowed (the suite allows 127.0.0.1 only)
    "http://10.0.0.1/x",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://[::ffff:10.0.0.1]/x",
    "http://0.0.0.0:5432/",
]
# 127.0.0.2 as a decimal number and in octal
ODD_SPELLINGS = ["http://2130706434/x", "http://0177.0.0.2/x"]
TOOL = {"name": "lookup_stock", "kind": "http", "url": "http://127.0.0.1:9/stock",
        "args_schema": {"type": "object"}, "side_effect": "read"}
MODEL = {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:11434/v1"}
AGENT = {"name": "exfil", "tools": ["lookup_order"]}


def _refused(response: Any, field: str) -> None:
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert details[field] == [REFUSED]
    assert "TETHER_EGRESS_ALLOW" in REFUSED and "outbound-address policy" in REFUSED


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_a_tool_url_to_a_refused_address_is_a_400(main: Tenancy, url: str) -> None:
    _refused(main.client(ADM).post("/api/v1/tools", {**TOOL, "url": url}, format="json"), "url")
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup_stock").exists()


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_a_status_url_to_a_refused_address_is_a_400(main: Tenancy, url: str) -> None:
    status_url = url.rstrip("/") + "/status/{key}"
    response = main.client(ADM).post("/api/v1/tools", {**TOOL, "status_url": status_url},
                                     format="json")
    _refused(response, "status_url")
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup_stock").exists()


@pytest.mark.parametrize("url", ODD_SPELLINGS)
@pytest.mark.parametrize("field", ["url", "status_url"])
def test_odd_spellings_of_an_address_are_refused_too(main: Tenancy, field: str, url: str) -> None:
    # Django's URL validator already refuses these spellings (the policy would too).
    response = main.client(ADM).post("/api/v1/tools", {**TOOL, field: url + "{key}"},
                                     format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup_stock").exists()


def test_an_update_to_a_refused_address_is_a_400_and_changes_nothing(main: Tenancy) -> None:
    client = main.client(ADM)
    assert client.post("/api/v1/tools", TOOL, format="json").status_code == 201
    response = client.patch("/api/v1/tools/lookup_stock", {"url": "http://10.1.2.3/x"},
                            format="json")
    _refused(response, "url")
    assert Tool.objects.get(tenant=main.tenant, name="lookup_stock").url == TOOL["url"]


def test_ipv6_loopback_and_names_resolving_to_loopback_are_refused_unless_allowed(
        main: Tenancy, settings: Any) -> None:
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]
    client = main.client(ADM)
    _refused(client.post("/api/v1/tools", {**TOOL, "url": "http://[::1]:9/x"}, format="json"),
             "url")
    settings.TETHER_EGRESS_ALLOW = []
    _refused(client.post("/api/v1/tools", {**TOOL, "url": "http://localhost:9/x"},
                         format="json"), "url")
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup_stock").exists()


# The decimal spelling passes the model settings' URL check and meets the policy.
@pytest.mark.parametrize("url", [*REFUSED_URLS, ODD_SPELLINGS[0]])
def test_a_model_base_url_to_a_refused_address_is_a_400(main: Tenancy, url: str) -> None:
    response = main.client(ADM).post(
        "/api/v1/agents", {**AGENT, "model": {**MODEL, "base_url": url}}, format="json")
    _refused(response, "model.base_url")
    assert not AgentProfile.objects.filter(tenant=main.tenant, name="exfil").exists()


def test_a_fallback_base_url_to_a_refused_address_is_a_400(main: Tenancy) -> None:
    model = {**MODEL, "fallback": {"name": "m2", "base_url": "http://169.254.169.254/v1"}}
    response = main.client(ADM).post("/api/v1/agents", {**AGENT, "model": model},
                                     format="json")
    _refused(response, "model.fallback.base_url")
    assert not AgentProfile.objects.filter(tenant=main.tenant, name="exfil").exists()


def test_an_allowed_model_endpoint_registers(main: Tenancy) -> None:
    response = main.client(ADM).post("/api/v1/agents",
                                     {**AGENT, "name": "local", "model": MODEL}, format="json")
    assert response.status_code == 201, response.content
