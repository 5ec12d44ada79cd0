"""Circuit breakers and retry policies through the API: the settings are
checked (400 with field errors, nothing written), `GET /api/v1/breakers` and
the `breaker_state` of tools and agents show what the workers share, each
tenant sees its own only."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile
from tools_app.breakers import Target, admit, breaker_policy, record
from tools_app.models import Tool

from .conftest import Tenancy

ADM, OPS = Role.ADMIN, Role.OPERATOR
TOOL = {"name": "lookup", "kind": "http", "url": "http://127.0.0.1:9/lookup",
        "args_schema": {"type": "object"}, "max_retries": 3, "retry_delays_s": [0, 30],
        "breaker": {"failures": 4, "cooldown_s": 5, "max_cooldown_s": 60}}
AGENT = {"name": "llm", "model": {"backend": "openai", "name": "m1",
                                  "base_url": "http://127.0.0.1:9/v1",
                                  "fallback": {"name": "m2"},
                                  "breaker": {"failures": 3, "cooldown_s": 2}},
         "tools": ["lookup_order"]}


def _open(target: Target, failures: int = 4) -> None:
    """Fail calls as workers would, until the breaker opens."""
    policy = breaker_policy({"failures": failures, "cooldown_s": 60})
    for _ in range(failures):
        seen = admit(target, owner="w", probe_ttl_s=5)
        record(target, owner="w", failed=True, policy=policy, seen=seen,
               error={"type": "http_error", "status": 503})


def test_a_tool_keeps_its_retry_policy_and_breaker_settings(main: Tenancy) -> None:
    client = main.client(ADM)
    created = client.post("/api/v1/tools", TOOL, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["retry_delays_s"], body["breaker"]) == (TOOL["retry_delays_s"], TOOL["breaker"])
    assert body["breaker_state"] == {"state": "closed", "failures": 0, "open_until": None,
                                     "opened_count": 0, "waiting_tasks": 0}
    changed = client.patch("/api/v1/tools/lookup", {"retry_delays_s": [], "breaker": {}},
                           format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["retry_delays_s"], changed.json()["breaker"]) == ([], {})


@pytest.mark.parametrize(("change", "field"), [
    ({"breaker": {"failures": 0}}, "breaker"),
    ({"breaker": {"cooldown_s": "soon"}}, "breaker"),
    ({"breaker": {"cooldown_s": 30, "max_cooldown_s": 3}}, "breaker"),
    ({"breaker": {"threshold": 3}}, "breaker"),
    ({"breaker": "on"}, "breaker"),
    ({"retry_delays_s": [-1]}, "retry_delays_s"),
    ({"retry_delays_s": "30"}, "retry_delays_s"),
    ({"retry_delays_s": [0, None]}, "retry_delays_s"),
])
def test_nonsense_retry_and_breaker_settings_are_a_400(main: Tenancy, change: dict,
                                                        field: str) -> None:
    response = main.client(ADM).post("/api/v1/tools", {**TOOL, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup").exists()


@pytest.mark.parametrize("breaker", [{"failures": -1}, {"enabled": "yes"}, [3]])
def test_a_nonsense_model_breaker_is_a_400(main: Tenancy, breaker: Any) -> None:
    agent = {**AGENT, "model": {**AGENT["model"], "breaker": breaker}}
    response = main.client(ADM).post("/api/v1/agents", agent, format="json")
    assert response.status_code == 400, response.content
    assert "model.breaker" in response.json()["error"]["details"]
    assert not AgentProfile.objects.filter(tenant=main.tenant, name="llm").exists()


def test_breakers_are_listed_and_shown_on_their_tool_and_agent(
        main: Tenancy, other: Tenancy) -> None:
    admin = main.client(ADM)
    assert admin.post("/api/v1/tools", TOOL, format="json").status_code == 201
    created = admin.post("/api/v1/agents", AGENT, format="json")
    assert created.status_code == 201, created.content
    _open(Target.tool(tenant_id=main.tenant.pk, name="lookup"))
    _open(Target.model(tenant_id=main.tenant.pk, base_url="http://127.0.0.1:9/v1", name="m2"))

    listed = main.client(OPS).get("/api/v1/breakers")
    assert listed.status_code == 200, listed.content
    rows = {(b["kind"], b["name"]): b for b in listed.json()}
    assert set(rows) == {("tool", "lookup"), ("model", "m2")}
    assert rows[("tool", "lookup")]["state"] == "open"
    assert rows[("tool", "lookup")]["last_error"] == {"type": "http_error", "status": 503}
    assert rows[("model", "m2")]["target"] == "http://127.0.0.1:9/v1"
    only_models = main.client(OPS).get("/api/v1/breakers?kind=model").json()
    assert [b["name"] for b in only_models] == ["m2"]

    tool = admin.get("/api/v1/tools/lookup").json()
    assert tool["breaker_state"]["state"] == "open" and tool["breaker_state"]["open_until"]
    agent = admin.get("/api/v1/agents/llm").json()
    assert agent["breaker_state"]["primary"]["state"] == "closed"
    assert agent["breaker_state"]["fallback"]["state"] == "open"

    # another tenant's breakers are its own: nothing of these shows there
    assert other.client(ADM).get("/api/v1/breakers").json() == []


def test_breakers_need_an_operator_and_a_known_kind(main: Tenancy) -> None:
    assert main.client(Role.REQUESTER).get("/api/v1/breakers").status_code == 403
    bad = main.client(OPS).get("/api/v1/breakers?kind=disk")
    assert bad.status_code == 400 and "kind" in bad.json()["error"]["details"]
