"""The names an evaluation run (a shadow task, `runner.shadow`) writes into
its steps, which the evaluation's comparison reads back (`evals_app`)."""

# a step's error type: an unmatched read-only call, not made
NOT_RECORDED = "not_recorded"
# a step's error type: an unmatched write, never made ("would call X with Y")
NOT_EXECUTED = "not_executed_in_evaluation"
# a question the record has no answer to: the run stops (step error, failure reason)
NEEDS_A_PERSON = "needs_a_person"
# `Step.model_log["evaluation"]`: how an approval the call needed was settled
APPROVAL_AS_RECORDED = "approval_as_recorded"
WOULD_NEED_APPROVAL = "would_need_approval"
