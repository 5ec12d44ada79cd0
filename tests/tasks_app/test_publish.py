"""The publisher's batching: events queued for a group while it was busy go out
as one message, in commit order; other groups keep their own."""

from __future__ import annotations

from tasks_app.live.publish import coalesce


def _queued(group: str, event_id: int, task_id: int = 7) -> tuple[str, dict]:
    event = {"id": event_id, "task_id": task_id}
    return group, {"type": "tether.event", "event": event, "task_id": task_id}


def test_a_lone_event_stays_a_single_message():
    assert coalesce([_queued("task.7", 1)]) == [
        ("task.7", {"type": "tether.event", "event": {"id": 1, "task_id": 7}, "task_id": 7})]


def test_events_of_one_group_go_together_in_order_and_groups_stay_apart():
    batch = [_queued("task.7", 1), _queued("tenant.1", 1), _queued("task.7", 2),
             _queued("tenant.1", 2), _queued("task.8", 3, task_id=8),
             _queued("tenant.1", 3, task_id=8)]

    assert coalesce(batch) == [
        ("task.7", {"type": "tether.events",
                    "events": [{"id": 1, "task_id": 7}, {"id": 2, "task_id": 7}]}),
        ("tenant.1", {"type": "tether.events",
                      "events": [{"id": 1, "task_id": 7}, {"id": 2, "task_id": 7},
                                 {"id": 3, "task_id": 8}]}),
        ("task.8", {"type": "tether.event", "event": {"id": 3, "task_id": 8}, "task_id": 8}),
    ]
