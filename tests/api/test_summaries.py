"""Context summaries through the API: a scripted task driven past the summary
threshold lists its versions, an operator rolls one back (with the event and
the 409 / 404 / 400 refusals), and its steps show the decision's cites and the
model call log."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import ContextSummary, Event, Task

from .conftest import Tenancy

REQ, OP, ADM = Role.REQUESTER, Role.OPERATOR, Role.ADMIN


def _summaries(t: Tenancy, task: Task) -> list[dict[str, Any]]:
    response = t.client(REQ).get(f"/api/v1/tasks/{task.pk}/summaries")
    assert response.status_code == 200
    return response.json()


def _rollback(t: Tenancy, task: Task, version: int, body: Any = None, role: str = OP) -> Any:
    url = f"/api/v1/tasks/{task.pk}/summaries/{version}/rollback"
    return t.client(role).post(url, body or {}, format="json")


def test_a_task_past_the_threshold_lists_its_summary_versions(main: Tenancy) -> None:
    task = main.summarized()
    listed = _summaries(main, task)
    assert [(s["version"], s["covers_until_step"], s["active"], s["in_use"]) for s in listed] == [
        (2, 4, True, True),
        (1, 2, True, False),
    ]
    assert set(listed[0]) == {
        "version",
        "text",
        "covers_until_step",
        "event_ids",
        "active",
        "in_use",
        "created_by",
        "created_at",
        "fact_check",
        "pinned_facts",
    }
    v2, v1 = listed
    assert v1["fact_check"]["checked"] == v1["fact_check"]["kept"] + v1["fact_check"]["pinned_now"]
    assert "- step 4 lookup_order" in v2["text"] and "- step 1 lookup_order" in v2["text"]
    assert v1["created_by"] == "summarizer:deterministic"
    # v1 is built from the events of steps 1-2; v2 from the ones after them.
    steps_of_v1 = {
        e.payload.get("step_no") for e in Event.objects.filter(pk__in=v1["event_ids"])
    } - {None}
    assert steps_of_v1 == {1, 2}
    assert min(v2["event_ids"]) > max(v1["event_ids"])
    assert Event.objects.filter(task=task, pk__in=v1["event_ids"] + v2["event_ids"]).count() == (
        len(v1["event_ids"]) + len(v2["event_ids"])
    )


def test_a_task_without_summaries_lists_none(main: Tenancy) -> None:
    task = main.finished_task()
    assert _summaries(main, task) == []


def test_an_operator_rolls_back_and_the_event_records_it(main: Tenancy) -> None:
    task = main.summarized()
    response = _rollback(
        main, task, 1, {"expected_version": task.version, "comment": "v2 lost the amount"}
    )
    assert response.status_code == 200, response.content
    done = response.json()
    assert (done["task_id"], done["version"], done["from_version"], done["deactivated"]) == (
        task.pk,
        1,
        2,
        [2],
    )
    listed = _summaries(main, task)
    assert [(s["version"], s["active"], s["in_use"]) for s in listed] == [
        (2, False, False),
        (1, True, True),
    ]
    events = main.client(REQ).get(f"/api/v1/tasks/{task.pk}/events?limit=500").json()["results"]
    rolled = [e for e in events if e["type"] == "summary_rolled_back"]
    assert len(rolled) == 1 and rolled[0]["id"] == done["event_id"]
    assert rolled[0]["actor"] == main.users[OP].username and rolled[0]["actor_role"] == OP
    assert rolled[0]["payload"] == {
        "to_version": 1,
        "from_version": 2,
        "deactivated": [2],
        "comment": "v2 lost the amount",
    }
    assert len([e for e in events if e["type"] == "context_summarized"]) == 2

    # Back to no summary at all: every version is kept, none is in use.
    again = _rollback(main, task, 0, role=ADM)
    assert again.status_code == 200, again.content
    assert (again.json()["from_version"], again.json()["deactivated"]) == (1, [1])
    assert [(s["active"], s["in_use"]) for s in _summaries(main, task)] == [(False, False)] * 2


def test_a_stale_expected_version_is_a_409_and_changes_nothing(main: Tenancy) -> None:
    task = main.summarized()
    response = _rollback(main, task, 1, {"expected_version": task.version - 1})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "stale_version"
    assert error["details"]["current_version"] == task.version
    assert _unchanged(task)


@pytest.mark.parametrize("version", [3, 99, 999_999_999_999])
def test_an_unknown_version_is_a_404(main: Tenancy, version: int) -> None:
    task = main.summarized()
    response = _rollback(main, task, version)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert _unchanged(task)
    assert _rollback(main, main.created_task(), 1).status_code == 404


def test_rolling_back_to_the_version_in_use_is_a_400(main: Tenancy) -> None:
    task = main.summarized()
    response = _rollback(main, task, 2)
    assert response.status_code == 400
    assert "version" in response.json()["error"]["details"]
    assert _unchanged(task)


@pytest.mark.parametrize(
    "body",
    [
        {"expected_version": "two"},
        {"expected_version": -1},
        {"comment": "x" * 2001},
        {"comment": None},
    ],
)
def test_a_bad_body_is_a_400_with_field_errors(main: Tenancy, body: dict[str, Any]) -> None:
    task = main.summarized()
    response = _rollback(main, task, 1, body)
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == set(body)
    assert _unchanged(task)


def test_steps_show_the_decision_with_its_cites_and_the_model_call(main: Tenancy) -> None:
    task = main.summarized()
    steps = main.client(REQ).get(f"/api/v1/tasks/{task.pk}/steps").json()["results"]
    third = steps[2]
    assert third["decision"] == {
        "kind": "tool_call",
        "tool": "lookup_order",
        "args": {"order_id": "A-1"},
        "reason": "look 3",
        "cites": ["step:2"],
    }
    log = third["model_log"]
    assert {
        "backend",
        "model",
        "latency_ms",
        "tokens",
        "input_summary",
        "raw",
        "used_fallback",
        "attempts",
    } <= set(log)
    assert (log["backend"], log["model"], log["used_fallback"], log["attempts"]) == (
        "scripted",
        "scripted",
        False,
        1,
    )
    assert log["tokens"] > 0 and '"look 3"' in log["raw"]
    assert steps[-1]["decision"] == {"kind": "final", "result": {"ok": True}}


def _unchanged(task: Task) -> bool:
    rows = list(ContextSummary.objects.filter(task=task).values_list("version", "active"))
    return (
        rows == [(1, True), (2, True)]
        and not Event.objects.filter(task=task, type="summary_rolled_back").exists()
    )
