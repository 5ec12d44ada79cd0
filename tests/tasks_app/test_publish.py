"""The publisher's batching: events queued for a group while it was busy go out
as one message, in commit order; other groups keep their own."""

from __future__ import annotations

import asyncio
from uuid import uuid4

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from tasks_app.live.publish import Publisher, coalesce, send_all


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


def test_events_sent_within_the_window_reach_a_group_as_one_message(settings):
    """Through the real Redis layer: two events handed over back to back (a
    step's decision and outcome) arrive as one `tether.events` message."""
    settings.TETHER = {**settings.TETHER, "PUBLISH_WINDOW_MS": 500}
    layer = get_channel_layer()
    group = f"task.test-{uuid4().hex}"
    first, second = _queued(group, 1)[1], _queued(group, 2)[1]

    async def subscribe_publish_receive() -> dict:
        # The pub/sub layer keeps its subscriptions per event loop: one loop here.
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        publisher = Publisher()  # its own loop and thread, as in a Celery worker
        try:
            publisher.send([(group, first)])
            publisher.send([(group, second)])
            return await asyncio.wait_for(layer.receive(channel), timeout=10)
        finally:
            publisher.close()
            await layer.group_discard(group, channel)

    assert async_to_sync(subscribe_publish_receive)() == {
        "type": "tether.events", "events": [first["event"], second["event"]]}


def test_a_batch_for_several_groups_goes_out_at_once_and_a_bad_message_stops_no_other():
    """Through the real Redis layer: one batch's messages (pipelined) reach each
    group; one that cannot be sent is logged and skipped."""
    layer = get_channel_layer()
    groups = [f"task.test-{uuid4().hex}" for _ in range(3)]
    sends = [_queued(groups[0], 1), (groups[1], {"type": "tether.event", "bad": object()}),
             _queued(groups[2], 3)]

    async def subscribe_send_receive() -> list[dict]:
        channels = [await layer.new_channel() for _ in groups]
        for group, channel in zip(groups, channels, strict=True):
            await layer.group_add(group, channel)
        try:
            await send_all(layer, sends)
            return [await asyncio.wait_for(layer.receive(c), timeout=10)
                    for c in (channels[0], channels[2])]
        finally:
            for group, channel in zip(groups, channels, strict=True):
                await layer.group_discard(group, channel)

    assert async_to_sync(subscribe_send_receive)() == [sends[0][1], sends[2][1]]


def _tokens(attempt: int, *deltas: dict, last: bool = False) -> tuple[str, dict]:
    return "task.7", {"type": "tether.tokens", "task_id": 7, "step_no": 2, "attempt": attempt,
                      "deltas": list(deltas), "last": last}


def test_a_decisions_token_pieces_go_as_one_message_between_events_in_order():
    text = {"kind": "text", "text": "Look"}
    more = {"kind": "text", "text": "ing."}
    call = {"kind": "tool_call", "index": 0, "name": "lookup_order", "args": '{"order'}
    rest = {"kind": "tool_call", "index": 0, "name": "lookup_order", "args": '_id": 1}'}
    batch = [_tokens(1, text), _tokens(1, more, call), _tokens(1, rest, last=True),
             _queued("task.7", 9), _tokens(2, text)]

    assert coalesce(batch) == [
        ("task.7", {"type": "tether.tokens", "task_id": 7, "step_no": 2, "attempt": 1,
                    "last": True, "deltas": [
                        {"kind": "text", "text": "Looking."},
                        {"kind": "tool_call", "index": 0, "name": "lookup_order",
                         "args": '{"order_id": 1}'}]}),
        ("task.7", {"type": "tether.event", "event": {"id": 9, "task_id": 7}, "task_id": 7}),
        ("task.7", {"type": "tether.tokens", "task_id": 7, "step_no": 2, "attempt": 2,
                    "last": False, "deltas": [text]}),
    ]
