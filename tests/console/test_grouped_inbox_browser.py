"""The grouped inbox in a real browser: a reviewer in the group `leads` sees
every pending request under "All", only the one assigned to them under
"Mine", and theirs and their group's under "My groups"; each card says which
rule applied and for whom."""
from __future__ import annotations

import re

import pytest

from tests.console.test_rule_pages import routed  # noqa: F401 - a fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shown(p) -> set[str]:  # type: ignore[no-untyped-def]
    return {key for key in p.locator("[data-card-key]").evaluate_all(
        "cards => cards.map(c => c.dataset.cardKey)") if key.startswith("approval-")}


def test_the_grouped_inbox_filters_mine_my_groups_and_all(world, routed, page_as) -> None:  # noqa: F811
    keys = {k: f"approval-{routed[k].pk}" for k in ("group", "mine", "anyone")}
    page = page_as(routed["ana"])
    page.goto("/inbox/")
    p = page.page
    p.locator(f'[data-card-key="{keys["group"]}"]').wait_for()
    assert _shown(p) == set(keys.values())
    group_card = p.locator(f'[data-card-key="{keys["group"]}"]').inner_text()
    assert "a1-to-leads" in group_card and "only its members decide" in group_card

    p.locator('a[data-show="mine"]').click()
    p.wait_for_url(re.compile(r"show=mine"))
    assert p.locator('a[data-show="mine"]').get_attribute("aria-current") == "page"
    assert _shown(p) == {keys["mine"]}

    p.locator('a[data-show="groups"]').click()
    p.wait_for_url(re.compile(r"show=groups"))
    assert _shown(p) == {keys["group"], keys["mine"]}
    page.shot("inbox-my-groups")
