"""Prices and the cost budget on agent profiles, through the API: stored exactly,
shown back, and bad amounts are a 400 with field errors that change nothing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile
from tasks_app.pricing import Prices, TokenUsage, money, pico_text, prices_of

from .conftest import Tenancy

ADM = Role.ADMIN
MODEL = {"backend": "openai", "name": "gpt-x", "base_url": "http://127.0.0.1:9/v1",
         "prices": {"input_per_mtok": "2.5", "output_per_mtok": 10},
         "fallback": {"name": "gpt-mini",
                      "prices": {"input_per_mtok": 0.15, "output_per_mtok": "0.6",
                                 "cached_input_per_mtok": "0.075"}}}
AGENT = {"name": "priced", "model": MODEL, "tools": ["lookup_order"],
         "budget": {"max_steps": 10, "max_cost": "1.50"}}


def _errors(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["details"]


def test_prices_and_max_cost_are_stored_and_shown(main: Tenancy) -> None:
    client = main.client(ADM)
    created = client.post("/api/v1/agents", AGENT, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["budget"]["max_cost"] == "1.5"
    assert body["model"]["prices"] == {"input_per_mtok": "2.5", "output_per_mtok": 10}
    agent = AgentProfile.objects.get(tenant=main.tenant, name="priced")
    assert agent.max_cost == Decimal("1.5")
    assert prices_of(agent.model, fallback=True) == Prices(
        Decimal("0.15"), Decimal("0.6"), Decimal("0.075"))

    cleared = client.patch("/api/v1/agents/priced", {"budget": {"max_cost": None}}, format="json")
    assert cleared.status_code == 200, cleared.content
    assert cleared.json()["budget"]["max_cost"] is None


@pytest.mark.parametrize(("change", "field"), [
    ({"model": {**MODEL, "prices": {"input_per_mtok": -1, "output_per_mtok": 1}}},
     "model.prices.input_per_mtok"),
    ({"model": {**MODEL, "prices": {"input_per_mtok": "0.0000001", "output_per_mtok": 1}}},
     "model.prices.input_per_mtok"),
    ({"model": {**MODEL, "prices": {"input_per_mtok": "1e9", "output_per_mtok": 1}}},
     "model.prices.input_per_mtok"),
    ({"model": {**MODEL, "prices": {"input_per_mtok": 1}}}, "model.prices.output_per_mtok"),
    ({"model": {**MODEL, "prices": {"input_per_mtok": 1, "output_per_mtok": True}}},
     "model.prices.output_per_mtok"),
    ({"model": {**MODEL, "prices": {"input_per_mtok": 1, "output_per_mtok": 1, "per_call": 1}}},
     "model.prices.per_call"),
    ({"model": {**MODEL, "prices": "cheap"}}, "model.prices"),
    ({"model": {**MODEL, "fallback": {"name": "gpt-mini"}}}, "model.fallback.prices"),
    ({"model": {**MODEL, "fallback": {"name": "m", "prices": {"input_per_mtok": "x",
                                                              "output_per_mtok": 1}}}},
     "model.fallback.prices.input_per_mtok"),
])
def test_bad_prices_are_field_errors_and_change_nothing(main: Tenancy, change: dict[str, Any],
                                                        field: str) -> None:
    client = main.client(ADM)
    before = AgentProfile.objects.get(tenant=main.tenant, name="support")
    response = client.patch("/api/v1/agents/support", change, format="json")
    assert field in _errors(response)
    after = AgentProfile.objects.get(tenant=main.tenant, name="support")
    assert (after.model, after.latest_version) == (before.model, before.latest_version)


@pytest.mark.parametrize("max_cost", [-1, "abc", "0.0000001", 10**9, True, 0, "0.00"])
def test_a_bad_max_cost_is_a_field_error(main: Tenancy, max_cost: Any) -> None:
    response = main.client(ADM).patch("/api/v1/agents/support", {"budget": {"max_cost": max_cost}},
                                      format="json")
    errors = _errors(response)
    # the serializer nests its errors ({"budget": {"max_cost": ...}}), the service flattens them
    assert (errors.get("budget") or {}).get("max_cost") or errors.get("budget.max_cost"), errors
    assert AgentProfile.objects.get(tenant=main.tenant, name="support").max_cost is None


def test_cost_arithmetic_is_exact() -> None:
    prices = Prices(Decimal("0.15"), Decimal("0.6"), Decimal("0.075"))
    usage = TokenUsage(input_tokens=3, output_tokens=7, cached_input_tokens=1)
    # (2 * 0.15 + 1 * 0.075 + 7 * 0.6) / 1e6 dollars
    assert pico_text(prices.cost_pico(usage)) == "0.000004575"
    assert money(0.1) == Decimal("0.1") and money(float("nan")) is None and money("1e400") is None
    assert TokenUsage.from_openai({"prompt_tokens": "junk", "completion_tokens": -5,
                                   "prompt_tokens_details": {"cached_tokens": 99}}) == TokenUsage()
    assert TokenUsage.from_openai(None) == TokenUsage()
