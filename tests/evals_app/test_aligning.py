"""The alignment of a recorded task's steps with its shadow task's: the same
step_no on one row, and the first row whose decisions differ (a call's tool
and canonical arguments, a question, a final answer's result)."""
from __future__ import annotations

from typing import Any

from evals_app.services.comparing import align, first_divergence
from tasks_app.models import Step, StepKind


def call(no: int, tool: str, **args: Any) -> Step:
    return Step(step_no=no, kind=StepKind.TOOL, tool=tool, args=args)


def final(no: int, result: Any) -> Step:
    return Step(step_no=no, kind=StepKind.FINAL, output=result)


def run(amount: int = 5, result: Any = None) -> list[Step]:
    return [call(1, "lookup", order_id="A-1"), call(2, "refund", order_id="A-1", amount=amount),
            final(3, result or {"refunded": "A-1"})]


def test_identical_runs_do_not_diverge_and_every_row_is_the_same():
    alignment = align(run(), run())
    assert alignment.divergence is None and alignment.diverged_row is None
    assert [(r.step_no, r.same) for r in alignment.rows] == [(1, True), (2, True), (3, True)]
    assert first_divergence(alignment) is None


def test_arguments_in_another_order_are_the_same_call():
    reordered = [Step(step_no=1, kind=StepKind.TOOL, tool="lookup", args={"order_id": "A-1"}),
                 Step(step_no=2, kind=StepKind.TOOL, tool="refund",
                      args={"amount": 5, "order_id": "A-1"}), final(3, {"refunded": "A-1"})]
    assert align(run(), reordered).divergence is None


def test_a_tools_arguments_diverge_at_that_step_and_the_rows_stay_aligned():
    alignment = align(run(amount=5), run(amount=7))
    assert alignment.divergence == 2
    assert [(r.step_no, r.same) for r in alignment.rows] == [(1, True), (2, False), (3, True)]
    row = alignment.diverged_row
    assert row is not None and row.baseline and row.candidate
    assert (row.baseline.args["amount"], row.candidate.args["amount"]) == (5, 7)
    assert first_divergence(alignment) == {
        "position": 2,
        "baseline": {"step_no": 2, "kind": "tool", "tool": "refund",
                     "args": {"order_id": "A-1", "amount": 5}},
        "candidate": {"step_no": 2, "kind": "tool", "tool": "refund",
                      "args": {"order_id": "A-1", "amount": 7}}}


def test_another_tool_diverges_even_with_the_same_arguments():
    other = run()
    other[1] = call(2, "escalate", order_id="A-1", amount=5)
    assert align(run(), other).divergence == 2


def test_the_final_answer_diverges_on_its_result():
    alignment = align(run(result={"refunded": "A-1"}), run(result={"refunded": "A-2"}))
    assert alignment.divergence == 3
    assert [r.same for r in alignment.rows] == [True, True, False]
    assert first_divergence(alignment)["candidate"] == {  # type: ignore[index]
        "step_no": 3, "kind": "final", "result": {"refunded": "A-2"}}


def test_a_longer_candidate_diverges_at_its_first_extra_step():
    longer = [*run()[:2], call(3, "notify", order_id="A-1"), final(4, {"refunded": "A-1"})]
    alignment = align(run(), longer)
    assert alignment.divergence == 3
    assert [(r.step_no, r.baseline is not None, r.candidate is not None, r.same)
            for r in alignment.rows] == [(1, True, True, True), (2, True, True, True),
                                         (3, True, True, False), (4, False, True, False)]


def test_a_shorter_candidate_diverges_where_the_baseline_goes_on():
    shorter = run()[:2]
    alignment = align(run(), shorter)
    assert alignment.divergence == 3
    last = alignment.rows[-1]
    assert (last.step_no, last.candidate, last.same) == (3, None, False)
    assert first_divergence(alignment) == {
        "position": 3, "candidate": None,
        "baseline": {"step_no": 3, "kind": "final", "result": {"refunded": "A-1"}}}


def test_a_question_diverges_on_its_text_and_anything_maps_to_its_step():
    def ask(no: int, question: str) -> dict[str, Step]:
        return {"step": Step(step_no=no, kind=StepKind.ASK, decision={"question": question})}
    asked = ask(1, "Which order?")
    same = align([asked], [ask(1, "Which order?")], lambda v: v["step"])
    assert same.divergence is None and same.rows[0].baseline is asked  # the item itself
    assert align([ask(1, "Which order?")], [ask(1, "Which item?")],
                 lambda v: v["step"]).divergence == 1
