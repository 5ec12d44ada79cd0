"""`follow` reads a task's event stream (Server-Sent Events) when the server has
one, resumes it with Last-Event-ID and yields every event once; it polls the
events when the server has no stream (404). The stream is served by a fake
server at the edge of the process, answering with shapes rendered by Tether's
own serializers from a real task."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tether_client import AsyncTether, StreamDelta, Tether
from tether_client._operations import Follower
from tether_client.models import Event

from tasks_app.api.serializers import EventSerializer, TaskDetailSerializer
from tasks_app.models import Event as EventRow
from tasks_app.models import Task
from tests.clients.conftest import LOOKUP
from tests.factories import submit
from tests.fakes.http_tool_server import FakeToolServer, Reply
from tests.helpers import drive

SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-store"}


@pytest.fixture
def ran(world: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A task run to its end here: its detail and events, rendered as the API renders them."""
    task = drive(submit(world.tenant, LOOKUP).pk)
    events = EventRow.objects.filter(task_id=task.pk).order_by("id")
    render = json.loads(json.dumps(EventSerializer(events, many=True).data))
    detail = TaskDetailSerializer(Task.objects.get(pk=task.pk), context={"open_request": None})
    return json.loads(json.dumps(detail.data)), render


def _sse(*messages: str) -> bytes:
    return "".join(m + "\n\n" for m in messages).encode()


def _event(e: dict[str, Any]) -> str:
    return f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}"


def _page(results: list[dict[str, Any]], after: int) -> Reply:
    return Reply(200, {"results": results, "next_after": results[-1]["id"] if results else after,
                       "has_more": False})


def _follow(kind: str, url: str, task_id: int) -> list[Any]:
    if kind == "sync":
        with Tether(url, "tk_test") as tether:
            return list(tether.follow(task_id, poll_interval=0.01))

    async def collect() -> list[Any]:
        async with AsyncTether(url, "tk_test") as tether:
            return [item async for item in tether.follow(task_id, poll_interval=0.01)]

    return asyncio.run(collect())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_stream_is_resumed_with_last_event_id_and_each_event_comes_once(
        kind: str, fake_http: FakeToolServer, ran: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    detail, events, server = *ran, fake_http
    first, second, rest = events[:1], events[1:2], events[2:]
    base = f"/api/v1/tasks/{detail['id']}"
    # The first stream carries an event, a token delta and a keep-alive, then drops;
    # the second replays what was already seen (a server may), then the rest.
    server.on("GET", f"{base}/stream",
              Reply(200, body=_sse(*map(_event, first), 'event: delta\ndata: {"delta": "Hel"}',
                                   ": keep-alive"), headers=SSE),
              Reply(200, body=_sse(*map(_event, first + second + rest)), headers=SSE))
    server.on("GET", f"{base}/events*", _page([], 0))
    server.on("GET", base, Reply(200, {**detail, "status": "RUNNING"}), Reply(200, detail))

    items = _follow(kind, server.url(""), detail["id"])

    assert [e.id for e in items if isinstance(e, Event)] == [e["id"] for e in events]
    (delta,) = [d for d in items if isinstance(d, StreamDelta)]
    assert (delta.event, delta.data) == ("delta", {"delta": "Hel"}) and items[1] is delta
    streams = server.requests_to("GET", f"{base}/stream")
    assert [s.headers.get("last-event-id") for s in streams] == [None, str(first[0]["id"])]
    assert all(s.headers["accept"] == "text/event-stream" for s in streams)
    assert all(s.headers["authorization"] == "Token tk_test" for s in streams)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_server_without_a_stream_is_polled(
        kind: str, fake_http: FakeToolServer, ran: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    detail, events, server = *ran, fake_http
    base = f"/api/v1/tasks/{detail['id']}"
    server.on("GET", f"{base}/stream", Reply(404, {"error": {
        "code": "not_found", "message": "No such resource.", "details": {}}}))
    server.on("GET", f"{base}/events*", _page(events[:2], 0), _page([], events[1]["id"]),
              _page(events[2:], events[1]["id"]), _page([], events[-1]["id"]))
    server.on("GET", base, Reply(200, {**detail, "status": "RUNNING"}), Reply(200, detail))

    items = _follow(kind, server.url(""), detail["id"])

    assert [e.id for e in items] == [e["id"] for e in events]
    assert len(server.requests_to("GET", f"{base}/stream")) == 1  # asked once, then polled
    afters = [r.path.split("after=")[1].split("&")[0]
              for r in server.requests_to("GET", f"{base}/events*")]
    # from the start; again after the second event (nothing new); once more when it ended
    assert afters == ["0", str(events[1]["id"]), str(events[1]["id"])]


def test_a_stream_that_says_nothing_is_left_for_polling(
        fake_http: FakeToolServer, ran: tuple[dict[str, Any], list[dict[str, Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    detail, events = ran
    base = f"/api/v1/tasks/{detail['id']}"
    monkeypatch.setattr(Follower, "STREAM_IDLE_S", 0.3)  # the patience, shortened for the test
    stalled = fake_http.hold()  # answers nothing until the test ends
    fake_http.on("GET", f"{base}/stream", Reply(200, body=b"", headers=SSE, hold=stalled))
    fake_http.on("GET", f"{base}/events*", _page(events, 0), _page([], events[-1]["id"]))
    fake_http.on("GET", base, Reply(200, detail))

    items = _follow("sync", fake_http.url(""), detail["id"])

    assert [e.id for e in items] == [e["id"] for e in events]
    assert len(fake_http.requests_to("GET", f"{base}/stream")) == 1
