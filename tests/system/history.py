"""Checks that a task's durable history is whole: no step lost, no event
version skipped, and the event log replays to the task's status."""

from __future__ import annotations

from tasks_app.models import Event, Step, Task

TERMINAL_STEP_STATUSES = {"SUCCEEDED", "FAILED", "REJECTED", "DISCARDED"}


def assert_history_intact(task: Task) -> None:
    steps = list(
        Step.objects.filter(task_id=task.pk).order_by("step_no").values("step_no", "status")
    )
    assert [s["step_no"] for s in steps] == list(range(1, len(steps) + 1)), steps
    assert task.steps_count == len(steps)
    if task.is_terminal:
        assert all(s["status"] in TERMINAL_STEP_STATUSES for s in steps), steps

    events = list(
        Event.objects.filter(task_id=task.pk)
        .order_by("id")
        .values("type", "task_version", "payload")
    )
    versions = [e["task_version"] for e in events]
    assert versions == sorted(versions), (
        f"event versions go backwards: {[(e['type'], e['task_version']) for e in events]}")
    transitions = [e for e in events if "from" in e["payload"]]
    assert [e["task_version"] for e in transitions] == list(range(1, task.version + 1)), transitions
    status = events[0]["payload"]["to"]
    assert events[0]["type"] == "task_created"
    for event in transitions:
        assert event["payload"]["from"] == status, (event, status)
        status = event["payload"]["to"]
    assert status == task.status
