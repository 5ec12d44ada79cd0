"""An agent profile's guards through the API: completion checks, how many
answers they may refuse, and the confidence threshold. Each is checked when the
profile is saved (400 with field errors, nothing written), goes through the
profile's versions like every other field, and reaches the tasks submitted
after it."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile, AgentVersion, Task
from tools_app.models import Tool

from .conftest import Tenancy

ADM, REQ = Role.ADMIN, Role.REQUESTER
AGENT = {"name": "guarded", "model": {"backend": "scripted", "name": "scripted"},
         "tools": ["lookup_order"]}
CHECK = {"tool": "lookup_order", "args": {"order_id": "${ output.order_id }",
                                          "note": "for ${ inputs.customer }"}}


@pytest.mark.parametrize(("fields", "where", "says"), [
    ({"completion_checks": [{"tool": "issue_refund"}]}, "completion_checks[0].tool",
     "not read-only"),
    ({"completion_checks": [{"tool": "nope"}]}, "completion_checks[0].tool", "no tool named"),
    ({"completion_checks": [{"tool": "lookup_order", "args": {"a": "${ output. }"}}]},
     "completion_checks[0].args", ""),
    ({"completion_checks": [{"tool": "lookup_order", "args": {"a": "${ nodes.x }"}}]},
     "completion_checks[0].args", "is not known here"),
    ({"completion_checks": [{"tool": "lookup_order", "when": "always"}]},
     "completion_checks[0].when", "not a field"),
    ({"completion_checks": ["lookup_order"]}, "completion_checks", ""),
    ({"completion_checks": [CHECK] * 11}, "completion_checks", ""),
    ({"max_completion_attempts": 0}, "max_completion_attempts", ""),
    ({"max_completion_attempts": 21}, "max_completion_attempts", ""),
    ({"min_confidence": 1.5}, "min_confidence", ""),
    ({"min_confidence": "high"}, "min_confidence", ""),
])
def test_bad_guards_are_field_errors_and_nothing_is_written(
        main: Tenancy, fields: dict[str, Any], where: str, says: str) -> None:
    response = main.client(ADM).post("/api/v1/agents", {**AGENT, **fields}, format="json")

    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert any(key.startswith(where) for key in details), details
    assert says in str(details)
    assert not AgentProfile.objects.filter(tenant=main.tenant, name="guarded").exists()


def test_another_tenants_tool_cannot_be_a_check(main: Tenancy, other: Tenancy) -> None:
    Tool.objects.create(tenant=other.tenant, name="their_check", kind="python",
                        target="tests.fakes.python_tools.echo", side_effect="read")
    response = main.client(ADM).post(
        "/api/v1/agents", {**AGENT, "completion_checks": [{"tool": "their_check"}]},
        format="json")

    assert response.status_code == 400
    assert "no tool named 'their_check'" in str(response.json()["error"]["details"])


def test_guards_are_versioned_shown_and_copied_into_new_tasks(main: Tenancy) -> None:
    client = main.client(ADM)
    created = client.post("/api/v1/agents", AGENT, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["completion_checks"], body["max_completion_attempts"],
            body["min_confidence"]) == ([], 3, None)
    one = AgentVersion.objects.get(agent__name="guarded", number=1).config
    assert "completion_checks" not in one and "min_confidence" not in one  # unused: absent

    changed = client.patch("/api/v1/agents/guarded", {
        "completion_checks": [CHECK], "max_completion_attempts": 5, "min_confidence": 0.7},
        format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["completion_checks"] == [CHECK]
    two = AgentVersion.objects.get(agent__name="guarded", number=2)
    assert (two.config["completion_checks"], two.config["max_completion_attempts"],
            two.config["min_confidence"]) == ([CHECK], 5, 0.7)
    assert "min_confidence" in str(two.diff)  # the change has its diff
    promoted = client.post("/api/v1/agents/guarded/promote", {"version": 2}, format="json")
    assert promoted.status_code == 200, promoted.content

    task = main.client(REQ).post("/api/v1/tasks", {"goal": "g", "agent": "guarded",
                                                   "script": [{"final": {"ok": True}}]},
                                 format="json")
    assert task.status_code in (200, 201), task.content
    snapshot = Task.objects.get(pk=task.json()["id"]).agent_snapshot
    assert (snapshot["completion_checks"], snapshot["min_confidence"]) == ([CHECK], 0.7)

    # rolling back to version 1 takes the guards away again
    back = client.post("/api/v1/agents/guarded/rollback", {"version": 1}, format="json")
    assert back.status_code == 200, back.content
    agent = AgentProfile.objects.get(tenant=main.tenant, name="guarded")
    assert (agent.completion_checks, agent.max_completion_attempts, agent.min_confidence) == (
        [], 3, None)
