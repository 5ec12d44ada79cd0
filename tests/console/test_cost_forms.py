"""Prices and the cost budget through the console's agent form: stored exactly,
shown on the agent page, refused with a field error (and nothing saved) when bad;
every save is on the audit page."""
from __future__ import annotations

from decimal import Decimal

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile

from .test_admin_pages import AGENT_FORM, client_for

pytestmark = pytest.mark.django_db

PRICED = {**AGENT_FORM, "backend": "openai", "model_name": "gpt-x",
          "base_url": "http://127.0.0.1:9/v1", "input_price": "2.5", "output_price": "10",
          "fallback_name": "gpt-mini", "fallback_input_price": "0.15",
          "fallback_output_price": "0.6", "fallback_cached_input_price": "0.075",
          "max_cost": "1.25"}


def test_prices_and_max_cost_from_the_agent_form(world):
    c = client_for(world.users[Role.ADMIN])
    assert c.post("/agents/new/", PRICED).status_code == 302
    agent = AgentProfile.objects.get(tenant=world.tenant, name="billing")
    assert agent.model["prices"] == {"input_per_mtok": "2.5", "output_per_mtok": "10"}
    assert agent.model["fallback"]["prices"] == {"input_per_mtok": "0.15",
                                                 "output_per_mtok": "0.6",
                                                 "cached_input_per_mtok": "0.075"}
    assert agent.max_cost == Decimal("1.25")
    page = c.get("/agents/billing/").content.decode()
    assert "$2.5 in · $10 out" in page and "$1.25" in page
    form = c.get("/agents/billing/edit/").content.decode()
    assert 'value="0.075"' in form and 'value="1.25"' in form

    bad = c.post("/agents/billing/edit/", {**PRICED, "output_price": "-3", "max_cost": "abc"})
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "decimal number of dollars" in text
    agent.refresh_from_db()
    assert agent.model["prices"]["output_per_mtok"] == "10" and agent.max_cost == Decimal("1.25")

    assert c.post("/agents/billing/edit/", {**PRICED, "max_cost": ""}).status_code == 302
    agent.refresh_from_db()
    assert agent.max_cost is None
    audit = c.get("/audit/?kind=agent&name=billing").content.decode()
    assert "budget.max_cost" in audit and "created" in audit.lower()
