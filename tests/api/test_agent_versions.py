"""Versioned agent profiles and their gradual release, through the API: every
edit is a version with its diff; a release sends a share of new tasks to a
candidate, decided per submission by its Idempotency-Key; promote and roll
back change what new tasks get and nothing about tasks already submitted; a
bad release changes nothing; requesters cannot release; another tenant's
agent is a 404."""

from __future__ import annotations

import math
from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, AgentReleaseEntry, AgentVersion, Task
from tasks_app.services.agent_versions import release_bucket

from .conftest import Tenancy, drive

ADM, OP, REQ = Role.ADMIN, Role.OPERATOR, Role.REQUESTER
AGENT = {
    "name": "triage",
    "model": {"backend": "scripted", "name": "scripted", "system_prompt": "Be brief."},
    "tools": ["lookup_order"],
    "budget": {"max_steps": 10},
}
SCRIPT = [{"final": {"ok": True}}]


def _three_versions(main: Tenancy) -> Any:
    """Create (version 1), then two edits (versions 2 and 3)."""
    client = main.client(ADM)
    assert client.post("/api/v1/agents", AGENT, format="json").status_code == 201
    two = client.patch("/api/v1/agents/triage", {"budget": {"max_steps": 20}}, format="json")
    assert two.status_code == 200, two.content
    three = client.patch(
        "/api/v1/agents/triage",
        {"model": {**AGENT["model"], "system_prompt": "Be thorough."},
         "tools": ["lookup_order", "notify_customer"]},
        format="json",
    )
    assert three.status_code == 200, three.content
    return client


def _submit(main: Tenancy, key: str | None = None, agent: str = "triage") -> dict[str, Any]:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    response = main.client(REQ).post(
        "/api/v1/tasks", {"goal": "g", "agent": agent, "script": SCRIPT}, format="json", **headers
    )
    assert response.status_code in (200, 201), response.content
    return response.json()


def _config(main: Tenancy, number: int) -> dict[str, Any]:
    return AgentVersion.objects.get(agent__tenant=main.tenant, agent__name="triage",
                                    number=number).config


def test_three_edits_are_versions_1_to_3_with_their_diffs(main: Tenancy) -> None:
    client = _three_versions(main)
    body = client.get("/api/v1/agents/triage").json()
    # Saved is not live: new tasks still get version 1 until 2 or 3 is released or promoted.
    assert (body["version"], body["latest_version"], body["release"]) == (1, 3, None)
    assert body["budget"]["max_steps"] == 20 and body["model"]["system_prompt"] == "Be thorough."

    page = main.client(OP).get("/api/v1/agents/triage/versions").json()
    versions = page["results"]
    assert [v["number"] for v in versions] == [3, 2, 1]
    assert [v["kind"] for v in versions] == ["edited", "edited", "created"]
    assert {v["actor"] for v in versions} == {main.users[ADM].username}
    three, two, one = versions
    assert two["diff"] == [
        {"path": "budget.max_steps", "change": "changed", "old": 10, "new": 20}
    ]
    assert sorted(three["diff"], key=lambda d: d["path"]) == [
        {"path": "model.system_prompt", "change": "changed", "old": "Be brief.",
         "new": "Be thorough."},
        {"path": "tools.1", "change": "added", "old": None, "new": "notify_customer"},
    ]
    assert {d["path"] for d in one["diff"]} >= {"model", "tools", "budget"}
    budgets = (one["config"]["budget"], three["config"]["budget"])
    assert (budgets[0]["max_steps"], budgets[1]["max_steps"]) == (10, 20)

    assert client.get("/api/v1/agents/triage/versions/2").json() == two
    assert client.get("/api/v1/agents/triage/versions/9").status_code == 404
    # Not configuration: no version (a disabled profile refuses tasks at once, unreleased).
    client.patch("/api/v1/agents/triage", {"description": "Triage desk", "enabled": True},
                 format="json")
    assert AgentVersion.objects.filter(agent__name="triage", agent__tenant=main.tenant).count() == 3
    task = _submit(main)
    assert task["agent_version"] == 1
    assert Task.objects.get(pk=task["id"]).agent_snapshot == _config(main, 1)


def test_a_20_percent_release_reaches_a_fifth_of_submissions_by_their_keys(main: Tenancy) -> None:
    client = _three_versions(main)
    response = client.patch("/api/v1/agents/triage", {"release": {"candidate": 3, "percent": 20}},
                            format="json")
    assert response.status_code == 200, response.content
    assert response.json()["release"] == {"candidate": 3, "percent": 20}
    agent = AgentProfile.objects.get(tenant=main.tenant, name="triage")

    n, p = 200, 0.20
    tasks = [_submit(main, key=f"order-{i}") for i in range(n)]
    got = [t["agent_version"] for t in tasks]
    assert set(got) == {1, 3}
    share = got.count(3)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(share - n * p) <= 4 * sigma, share
    # The choice is a pure function of (agent, candidate, key)...
    assert got == [
        3 if release_bucket(agent_id=agent.pk, candidate=3, salt=f"order-{i}") < 20 else 1
        for i in range(n)
    ]
    # ...so the same key gets the same task and the same version.
    again = _submit(main, key="order-7")
    assert (again["id"], again["agent_version"]) == (tasks[7]["id"], tasks[7]["agent_version"])
    for task in (tasks[got.index(1)], tasks[got.index(3)]):
        stored = Task.objects.get(pk=task["id"])
        assert stored.agent_snapshot == _config(main, stored.agent_version)
    # The task list filters by version.
    listed = client.get("/api/v1/tasks?agent=triage&agent_version=3&limit=200").json()["results"]
    assert sorted(t["id"] for t in listed) == sorted(
        t["id"] for t in tasks if t["agent_version"] == 3
    )

    entry = AgentReleaseEntry.objects.get(agent=agent)
    assert (entry.action, entry.candidate, entry.percent, entry.actor) == (
        "started", 3, 20, main.users[ADM].username)


def test_promote_and_roll_back_change_new_tasks_and_not_running_ones(main: Tenancy) -> None:
    client = _three_versions(main)
    before = _submit(main)  # version 1, not yet run
    asked = main.client(REQ).post(
        "/api/v1/tasks",
        {"goal": "g", "agent": "triage", "script": [{"ask": "which order?"}, {"final": {}}]},
        format="json",
    ).json()
    assert drive(asked["id"]).status == TaskStatus.WAITING_FOR_INPUT
    v1_snapshot = Task.objects.get(pk=asked["id"]).agent_snapshot

    client.patch("/api/v1/agents/triage", {"release": {"candidate": 3, "percent": 50}},
                 format="json")
    promoted = client.post("/api/v1/agents/triage/promote", {}, format="json")
    assert promoted.status_code == 200, promoted.content
    assert (promoted.json()["version"], promoted.json()["release"]) == (3, None)
    assert _submit(main)["agent_version"] == 3

    back = client.post("/api/v1/agents/triage/rollback", {"version": 1}, format="json")
    assert back.status_code == 200, back.content
    assert (back.json()["version"], back.json()["latest_version"]) == (4, 4)
    four = client.get("/api/v1/agents/triage/versions/4").json()
    assert (four["kind"], four["source_version"]) == ("rolled_back", 1)
    assert four["config"] == _config(main, 1)
    assert {d["path"] for d in four["diff"]} == {"budget.max_steps", "model.system_prompt",
                                                 "tools.1"}
    # The profile as saved is version 1's again, so the next edit starts from what runs.
    assert back.json()["budget"]["max_steps"] == 10
    new = _submit(main)
    assert new["agent_version"] == 4
    assert Task.objects.get(pk=new["id"]).agent_snapshot == _config(main, 1)

    # Tasks submitted before keep their version and snapshot, and finish with them.
    for task_id in (before["id"], asked["id"]):
        assert Task.objects.get(pk=task_id).agent_version == 1
    assert Task.objects.get(pk=asked["id"]).agent_snapshot == v1_snapshot
    answered = main.client(REQ).post(f"/api/v1/tasks/{asked['id']}/input", {"answer": "A-1"},
                                     format="json")
    assert answered.status_code == 200
    done = drive(asked["id"])
    assert (done.status, done.agent_version, done.agent_snapshot) == (
        TaskStatus.SUCCEEDED, 1, v1_snapshot)

    # A rollback that only ends a release; with none in progress there is nothing to end.
    client.patch("/api/v1/agents/triage", {"release": {"candidate": 3, "percent": 10}},
                 format="json")
    ended = client.post("/api/v1/agents/triage/rollback", {}, format="json").json()
    assert (ended["version"], ended["release"]) == (4, None)
    nothing = client.post("/api/v1/agents/triage/rollback", {}, format="json")
    assert nothing.status_code == 400 and "version" in nothing.json()["error"]["details"]
    log = main.client(OP).get("/api/v1/agents/triage/releases").json()["results"]
    assert [(e["action"], e["current_before"], e["current_after"]) for e in log] == [
        ("rolled_back", 4, 4), ("started", 4, 4), ("rolled_back", 3, 4), ("promoted", 1, 3),
        ("started", 1, 1)]
    assert log[2]["candidate"] is None and log[3]["candidate"] == 3
    assert {e["actor"] for e in log} == {main.users[ADM].username}


@pytest.mark.parametrize(
    ("release", "field"),
    [
        ({"candidate": 99, "percent": 10}, "release.candidate"),
        ({"candidate": 3, "percent": 101}, "release.percent"),
        ({"candidate": 3, "percent": -1}, "release.percent"),
        ({"candidate": 1, "percent": 10}, "release.candidate"),
        ({"candidate": 3}, "release.percent"),
        ({"candidate": 3, "percent": True}, "release.percent"),
        ({"candidate": "3", "percent": 10}, "release.candidate"),
        ({"candidate": 2**40, "percent": 10}, "release.candidate"),
        ({"candidate": 3, "percent": 10, "ramp": "fast"}, "release.ramp"),
    ],
)
def test_a_bad_release_is_a_400_with_field_errors_and_changes_nothing(
    main: Tenancy, release: dict[str, Any], field: str
) -> None:
    client = _three_versions(main)
    response = client.patch(
        "/api/v1/agents/triage", {"budget": {"max_steps": 33}, "release": release}, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    agent = AgentProfile.objects.get(tenant=main.tenant, name="triage")
    # Neither the release nor the edit sent with it happened.
    assert (agent.current_version, agent.latest_version, agent.release_candidate) == (1, 3, None)
    assert agent.max_steps == 20
    assert not AgentReleaseEntry.objects.filter(agent=agent).exists()
    bad_promote = client.post("/api/v1/agents/triage/promote", {"version": 1}, format="json")
    assert bad_promote.status_code == 400 and "version" in bad_promote.json()["error"]["details"]
    assert client.post("/api/v1/agents/triage/promote", {}, format="json").status_code == 400


def test_a_requester_cannot_release_and_an_operator_only_reads(main: Tenancy) -> None:
    _three_versions(main)
    release = {"release": {"candidate": 3, "percent": 50}}
    for role in (REQ, OP):
        refused = main.client(role).patch("/api/v1/agents/triage", release, format="json")
        assert refused.status_code == 403, refused.content
        assert main.client(role).post("/api/v1/agents/triage/promote", {"version": 3},
                                      format="json").status_code == 403
    assert main.client(REQ).get("/api/v1/agents/triage/versions").status_code == 403
    assert main.client(OP).get("/api/v1/agents/triage/versions").status_code == 200
    agent = AgentProfile.objects.get(tenant=main.tenant, name="triage")
    assert (agent.current_version, agent.release_candidate) == (1, None)


def test_another_tenants_agent_versions_are_404(main: Tenancy, other: Tenancy) -> None:
    _three_versions(main)
    theirs = other.client(ADM)
    for method, url, body in (
        ("get", "/api/v1/agents/triage/versions", None),
        ("get", "/api/v1/agents/triage/versions/1", None),
        ("patch", "/api/v1/agents/triage", {"release": {"candidate": 3, "percent": 50}}),
        ("post", "/api/v1/agents/triage/promote", {"version": 3}),
        ("post", "/api/v1/agents/triage/rollback", {"version": 1}),
    ):
        response = getattr(theirs, method)(url, body, format="json")
        assert response.status_code == 404, (url, response.content)
    # Their own `support` has its own history, unrelated to ours.
    own = theirs.get("/api/v1/agents/support/versions").json()["results"]
    assert [v["number"] for v in own] == [1]
    agent = AgentProfile.objects.get(tenant=main.tenant, name="triage")
    assert (agent.current_version, agent.release_candidate) == (1, None)
