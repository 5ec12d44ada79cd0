"""The facts a summary must keep, read from text deterministically, and the
check of a text against them (no database)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tasks_app.context.facts import Fact, facts_in, missing, pinned_text, step_facts

NOTE = ("Customer Maria Lopez called on 2026-12-01 at 14:30 about order A-10432: "
        "do not refund more than 50 EUR. A refund above €20 needs approval from a manager; "
        "the parcel weighs 3 kg. The replacement is still pending. Ticket #88231.")


def test_each_kind_of_fact_is_read_from_the_text() -> None:
    found = facts_in(NOTE)
    assert ("name", "Maria Lopez") in found or ("name", "Customer Maria Lopez") in found
    for fact in [("date", "2026-12-01"), ("date", "14:30"), ("identifier", "A-10432"),
                 ("amount", "50 EUR"), ("amount", "€20"), ("quantity", "3 kg"),
                 ("identifier", "#88231"),
                 ("negation", "do not refund more than 50 EUR."),
                 ("permission", "A refund above €20 needs approval from a manager"),
                 ("open_item", "The replacement is still pending.")]:
        assert fact in found, fact
    assert facts_in(NOTE) == found  # the same text, the same facts, in the same order


def test_a_text_that_drops_a_fact_is_told_which_one() -> None:
    facts = step_facts([NOTE], step_no=3, event_ids=(40, 41))
    assert {f.step_no for f in facts} == {3} and {f.event_ids for f in facts} == {(40, 41)}
    faithful = ("Maria Lopez (Customer Maria Lopez) called 2026-12-01 14:30, order A-10432. "
                "Do NOT refund more than 50 EUR. A refund above €20 needs approval from a "
                "manager. 3 kg. The replacement is still pending. Ticket #88231.")
    assert missing(facts, faithful) == []
    lossy = faithful.replace("Do NOT refund more than 50 EUR.", "Refunds are limited.")
    lost = [f.text for f in missing(facts, lossy)]
    assert lost == ["do not refund more than 50 EUR.", "50 EUR"]  # in order of appearance
    assert missing(facts, lossy, "do not refund more than 50 EUR.") == []  # pinned: kept


def test_a_clause_may_be_rephrased_around_its_terms_but_not_lose_its_negation() -> None:
    (fact,) = [f for f in step_facts(["Never ship to PO boxes in Norway."], step_no=1)
               if f.kind == "negation"]
    assert missing([fact], "Shipping rule: never ship to PO boxes (Norway).") == []
    assert missing([fact], "Shipping rule: ship to PO boxes in Norway.") == [fact]


def test_json_escapes_and_quotes_do_not_hide_a_fact() -> None:
    fact = Fact(text="Refund 40 € to Zoë", kind="amount")
    assert missing([fact], '{"note": "Refund 40 \\u20ac to Zo\\u00eb"}') == []


def test_a_pinned_fact_names_its_source() -> None:
    fact = Fact(text="do not refund", kind="negation", step_no=2, event_ids=(7, 9)).as_dict()
    assert pinned_text(fact) == "Kept verbatim (from step:2, event:7, event:9): do not refund"


@given(st.text(max_size=400))
def test_any_text_gives_facts_that_the_text_itself_keeps(text: str) -> None:
    facts = step_facts([text], step_no=1)
    assert missing(facts, text) == []
