"""Answering a question: the human decision that gives the agent what it asked for.

One transaction, like every decision of the human loop (`decisions`): the
answer is checked against the question's schema, the task moves on
(`input_received`, whose event carries the answer and the channel it came
from), the question is marked answered and its step succeeds, and the task's
next slice is scheduled once that commits.
"""
from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.utils import timezone

from foundations.actors import Actor
from foundations.errors import conflict, invalid
from tasks_app.models import Step, StepStatus, Task
from tasks_app.services.dispatch import schedule_advance_on_commit
from tasks_app.store.steps import step_move
from tasks_app.store.tasks import Transitioned, task_transition
from tools_app.schemas import schema_errors

from ..models import DecisionChannel, Question, QuestionStatus


def task_provide_input(*, task_id: int, answer: str, actor: Actor,
                       expected_version: int | None = None,
                       channel: str = DecisionChannel.CONSOLE) -> Transitioned:
    """The answer to the agent's open question joins its context verbatim.
    `channel`: where it was typed (console, api, email), recorded with it."""
    with transaction.atomic():
        question = (Question.objects.filter(task_id=task_id, status=QuestionStatus.OPEN)
                    .order_by("-id").first())
        if question is None:
            task = Task.objects.only("status").get(pk=task_id)
            raise conflict("no_open_question", f"the task is {task.status} and asks nothing",
                           status=task.status)
        decision = Step.objects.filter(pk=question.step_id).values_list("decision", flat=True).get()
        problems = answer_problems((decision or {}).get("answer_schema"), answer)
        if problems:
            raise invalid("invalid", "The answer does not match what the question asks for.",
                          answer=problems)
        done = task_transition(
            task_id=task_id, event="input_received", actor=actor, expected_version=expected_version,
            payload={"question_id": question.pk, "answer": answer, "channel": channel},
        )
        Question.objects.filter(pk=question.pk).update(
            status=QuestionStatus.ANSWERED, answer=answer, answered_by_id=actor.user_id,
            answered_role=actor.role, answered_at=timezone.now(), channel=channel,
        )
        step_move(question.step_id, StepStatus.SUCCEEDED, output={"answer": answer},
                  finished_at=timezone.now())
        schedule_advance_on_commit(task_id)
    return done


def answer_problems(schema: dict[str, Any] | None, answer: str) -> list[str]:
    """A question with an answer schema (a workflow's form, an approval) takes an
    answer that is JSON matching it; any other question takes any text."""
    if not schema:
        return []
    try:
        value = json.loads(answer)
    except ValueError:
        return ["the answer must be JSON matching the question's schema"]
    return schema_errors(schema, value)
