"""An evaluation's replay in Chromium: from the evaluation's per-task table, an
operator opens a task whose candidate refunds another amount and sees both
timelines on rows by step number, the identical first step folded, and the
first divergence highlighted, opened on both sides and scrolled to."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.evals_app.conftest import Refunds, evaluate, refunding
from tests.evals_app.conftest import refunds as refunds  # noqa: F401,PLC0414 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Each row's two sides: which step each shows, and where on the page it starts.
ROWS = """() => [...document.querySelectorAll(".align-row")].map((row) => {
  const side = (name) => {
    const el = row.querySelector(`[data-side="${name}"] > *`);
    return {step: el && el.dataset.stepNo ? Number(el.dataset.stepNo) : null,
            top: el ? el.getBoundingClientRect().top : null,
            visible: el ? el.checkVisibility() : false};
  };
  return {no: Number(row.dataset.stepNo), same: row.dataset.same === "1",
          divergence: row.classList.contains("is-divergence"),
          background: getComputedStyle(row).backgroundColor,
          baseline: side("baseline"), candidate: side("candidate")};
})"""


def test_the_comparison_page_aligns_both_timelines_at_the_first_divergence(
        refunds: Refunds, page_as: Any, tmp_path: Path) -> None:
    recorded = refunds.record("A-1", "A-2")
    different = recorded[1]

    def candidate(done: int, order: str) -> Any:
        return refunding(amount=7 if order == "A-2" else 5)(done, order)
    refunds.plans["candidate"] = candidate
    evaluation = evaluate(refunds)
    assert evaluation["summary"]["diverged"] == 1

    operator = page_as(refunds.operator)
    page = operator.page
    page.set_viewport_size({"width": 1280, "height": 720})
    operator.goto(f"/evaluations/{evaluation['id']}/")
    row = page.locator(f"tr[data-recorded='{different.pk}']")
    assert "step 2" in row.inner_text()
    row.get_by_role("link", name="Compare").click()
    page.wait_for_selector("#divergence")
    page.screenshot(path=str(tmp_path / "compare-1280.png"), full_page=True)

    rows = page.evaluate(ROWS)
    assert [(r["no"], r["same"], r["divergence"]) for r in rows] == [
        (1, True, False), (2, False, True), (3, False, False)]
    for r in rows:  # the same step number side by side, level with each other
        assert r["baseline"]["step"] == r["candidate"]["step"] == r["no"], r
    for r in rows[1:]:
        assert r["baseline"]["top"] == pytest.approx(r["candidate"]["top"], abs=1), r
    # The identical step is folded away; the divergence is highlighted and in view.
    assert not rows[0]["baseline"]["visible"]
    assert rows[1]["background"] not in (rows[2]["background"], "rgba(0, 0, 0, 0)")
    top, bottom = page.evaluate("""() => { const b = document.getElementById("divergence")
      .getBoundingClientRect(); return [b.top, b.bottom]; }""")
    assert 0 <= top < 720 and bottom > 0
    assert page.evaluate("window.scrollY") > 0  # scrolled to it, not left at the top
    diverged = page.locator("#divergence")
    assert diverged.locator("details[open]").count() == 2  # both sides' step opened
    assert '"amount": 5' in diverged.locator("[data-side='baseline']").inner_text()
    candidate_side = diverged.locator("[data-side='candidate']").inner_text()
    assert '"amount": 7' in candidate_side and "not_executed_in_evaluation" in candidate_side

    # Unfolded, the identical step shows on both sides, level.
    page.locator(".align-same > summary").click()
    first = page.evaluate(ROWS)[0]
    assert first["baseline"]["visible"] and first["candidate"]["visible"]
    assert first["baseline"]["top"] == pytest.approx(first["candidate"]["top"], abs=1)
