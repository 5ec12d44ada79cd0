"""What an MCP caller is shown and may answer (`mcp_server_app.catalog`), on
the real database; the protocol itself is tested against a live server in
tests/system/test_mcp_server.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from accounts_app.models import Role
from approvals_app.models import Question
from foundations.actors import SYSTEM
from foundations.api_access import may
from mcp_server_app.catalog import TEXT_ANSWER, Caller, elicitation_form, run_tools
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import actor_of
from tests.helpers import drive
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import workflow_create

pytestmark = pytest.mark.django_db(transaction=True)


def caller(user: Any) -> Caller:
    role = user.membership.role
    return Caller(tenant_id=user.membership.tenant_id, user_id=user.pk, actor=actor_of(user),
                  may_submit=may(role, "task.submit"), may_answer=may(role, "task.input"))


def test_only_published_enabled_agents_are_tools_and_only_for_submitters(world):
    demo_agent_ensure(world.tenant, name="off")
    AgentProfile.objects.filter(tenant=world.tenant).update(published=True)
    AgentProfile.objects.filter(tenant=world.tenant, name="off").update(enabled=False)
    demo_agent_ensure(world.tenant, name="draft")  # not published

    assert [t.name for t in run_tools(caller(world.users[Role.REQUESTER]))] == ["run_support"]
    assert [t.name for t in run_tools(caller(world.users[Role.ADMIN]))] == ["run_support"]
    assert run_tools(caller(world.users[Role.OPERATOR])) == []


def _asked(world: Any, schema: dict[str, Any] | None) -> Question:
    """A question of the requester's own run, asked the real way: a workflow's
    `human` node (with `schema` as its answer schema), run until it waits."""
    name = f"ask-{uuid.uuid4().hex[:8]}"
    human = {"question": "Which?", **({"schema": schema} if schema else {})}
    workflow_create(tenant_id=world.tenant.pk, name=name, actor=SYSTEM,
                    definition={"nodes": [{"id": "q", "human": human}]})
    task = submit_run(tenant_id=world.tenant.pk, requester_id=world.users[Role.REQUESTER].pk,
                      workflow=name, input={}, actor=SYSTEM).task
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_INPUT
    return Question.objects.get(task_id=task.pk)


@pytest.mark.parametrize(("schema", "form"), [
    (None, (TEXT_ANSWER, False)),
    ({"type": "object", "required": ["n"], "additionalProperties": False,
      "properties": {"n": {"type": "integer", "minimum": 1, "pattern": "x"}}},
     ({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer",
                                                                  "minimum": 1}}}, True)),
    ({"type": "object", "properties": {"address": {"type": "object"}}}, None),
    ({"type": "array"}, None),
])
def test_a_question_is_a_form_only_when_mcp_can_carry_its_schema(world, schema, form):
    question = _asked(world, schema)
    requester = caller(world.users[Role.REQUESTER])
    assert elicitation_form(requester, task_id=question.task_id, question_id=question.pk) == form


def test_only_the_tasks_requester_is_asked(world):
    question = _asked(world, None)
    admin = caller(world.users[Role.ADMIN])
    assert elicitation_form(admin, task_id=question.task_id, question_id=question.pk) is None
