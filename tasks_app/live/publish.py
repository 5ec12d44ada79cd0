"""Publishing a committed event to its task's and its tenant's groups.

Called only after an event commits (registered with `store.hooks.on_event_committed`).
Publishing never blocks or fails a step: the message is handed to one
publisher task on an event loop (the ASGI server's own loop in the embedded
mode, so the in-memory layer wakes its consumers at once; else a loop in a
daemon thread of this process), which sends them in commit order.

Sending is batched: after the first event of a batch arrives, the publisher
waits `PUBLISH_WINDOW_MS` (a Nagle-style window: a step's decision and its
outcome are a few milliseconds apart), and everything queued by then goes out
as one message per group, the batch's messages in one round trip to Redis
(`send_all`). A send to the Redis layer costs a round trip whatever it
carries, so the window roughly halves the publisher's share of a step's CPU
for a few milliseconds of latency. A push that is lost costs
nothing but latency: subscribers catch up from the database by asking for
events after the last id they saw.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections import deque
from contextlib import suppress
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from ..models import Event
from ..selectors import event_dict

log = logging.getLogger(__name__)

# A decision's token pieces (`live.tokens`): a preview, never stored.
TOKENS = "tether.tokens"


def task_group(task_id: int) -> str:
    return f"task.{task_id}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live socket of one user: told to close when the user loses access."""
    return f"user.{user_id}"


def end_user_sockets(user_id: int) -> None:
    """Close every live socket of `user_id` (call it after the commit that took
    the access away). Rare, so sent directly rather than through the batching
    publisher; a lost message is caught by the sockets' own periodic re-check."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user_id), {"type": "tether.revoked"})
    except Exception:  # noqa: BLE001 - best effort: the re-check closes it within seconds
        log.warning("could not tell user %s's sockets to close", user_id, exc_info=True)


def publish_event(event: Event) -> None:
    message = {"type": "tether.event", "event": event_dict(event), "task_id": event.task_id}
    publisher.send([(task_group(event.task_id), message), (tenant_group(event.tenant_id), message)])


class Publisher:
    """One ordered outbox per event loop, drained by a single task.

    A direct `async_to_sync(group_send)` per event costs a fresh event loop and
    Redis connection each time (milliseconds per event, on the step's path).
    Handing a message over is a `deque.append`; the loop is woken (a write to
    its self-pipe and a thread switch) only by the first event of a batch.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._own_pid = 0
        self._outboxes: dict[asyncio.AbstractEventLoop, _Outbox] = {}
        self._server_loop: asyncio.AbstractEventLoop | None = None

    def bind_server_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Publish on the ASGI server's `loop` (the embedded runner binds it when it
        gets the loop): the in-memory layer then wakes the consumers at once."""
        self._server_loop = loop

    def send(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if get_channel_layer() is None:
            return
        outbox = self._outbox(self._target_loop())
        outbox.messages.extend(items)
        # Appended before the check, and the drainer disarms before it empties
        # the deque: either this sees the outbox armed and the coming drain takes
        # the items, or it arms it and wakes the drainer.
        if not outbox.armed:
            outbox.armed = True
            outbox.loop.call_soon_threadsafe(outbox.wake.set)

    def close(self) -> None:
        """End this process's publisher thread: its drain tasks, then its loop.
        (A later `send` starts a new one.)"""
        with self._lock:
            loop, pid = self._own_loop, self._own_pid
            if loop is None or pid != os.getpid():
                return
            self._own_loop, self._outboxes = None, {}
        _end_drains(loop)
        loop.call_soon_threadsafe(loop.stop)

    def _target_loop(self) -> asyncio.AbstractEventLoop:
        server_loop = self._server_loop
        if server_loop is not None and not server_loop.is_closed():
            return server_loop
        with self._lock:
            # A forked child (a prefork Celery worker) inherits the loop object but
            # not its thread: start a fresh one per process.
            if self._own_loop is None or self._own_pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="tether-publisher", daemon=True
                ).start()
                self._own_loop, self._own_pid = loop, os.getpid()
                self._outboxes = {}
                atexit.register(_end_drains, loop)
            return self._own_loop

    def _outbox(self, loop: asyncio.AbstractEventLoop) -> _Outbox:
        outbox = self._outboxes.get(loop)
        if outbox is None:
            with self._lock:
                outbox = self._outboxes.get(loop)
                if outbox is None:
                    outbox = self._outboxes[loop] = _Outbox(loop)
                    loop.call_soon_threadsafe(loop.create_task, outbox.drain())
        return outbox


def _end_drains(loop: asyncio.AbstractEventLoop) -> None:
    """End the drain tasks of a publisher thread's loop (on `close`, and at
    exit): left pending, they are destroyed with the loop or the interpreter,
    and asyncio logs each as an error."""
    if loop.is_closed() or not loop.is_running():
        return

    async def cancel_the_others() -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    with suppress(Exception):  # best effort, the process is ending anyway
        asyncio.run_coroutine_threadsafe(cancel_the_others(), loop).result(timeout=1)


class _Outbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.messages: deque[tuple[str, dict[str, Any]]] = deque()
        self.wake = asyncio.Event()
        self.armed = False

    async def drain(self) -> None:
        layer = get_channel_layer()
        window_s = settings.TETHER["PUBLISH_WINDOW_MS"] / 1000
        while True:
            await self.wake.wait()
            self.wake.clear()
            if window_s > 0:
                await asyncio.sleep(window_s)  # the batching window (see the module's doc)
            self.armed = False
            batch = []
            while self.messages:
                batch.append(self.messages.popleft())
            await send_all(layer, coalesce(batch))


async def send_all(layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    """Every send of a batch, best effort (the database is the truth). Through
    the Redis pub/sub layer, one round trip per Redis server for the whole
    batch (a PUBLISH each, pipelined): a send alone cost the worker a round
    trip's CPU, twice what a pipelined one does, and a streamed reply's tokens
    are three or four sends (docs/performance)."""
    shards = _pubsub_shards(layer, sends)
    if shards is None:
        for group, message in sends:
            try:
                await layer.group_send(group, message)
            except Exception:  # noqa: BLE001
                log.warning("could not publish to %s", group, exc_info=True)
        return
    for shard, publishes in shards.items():
        try:
            async with shard._lock:  # the layer's own order on the connection
                shard._ensure_redis()
                pipe = shard._redis.pipeline(transaction=False)
                for channel, data in publishes:
                    pipe.publish(channel, data)
                await pipe.execute()
        except Exception:  # noqa: BLE001
            log.warning("could not publish %d messages", len(publishes), exc_info=True)


def _pubsub_shards(layer: Any, sends: list[tuple[str, dict[str, Any]]]
                   ) -> dict[Any, list[tuple[str, bytes]]] | None:
    """The batch's PUBLISHes by the shard they go to, as
    `channels_redis.pubsub` sends them one by one; None: another layer."""
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    loop_layer = layer._get_layer()
    shards: dict[Any, list[tuple[str, bytes]]] = {}
    for group, message in sends:
        channel = loop_layer._get_group_channel_name(group)
        try:
            data = layer.serialize(message)
        except Exception:  # noqa: BLE001 - this message only
            log.warning("could not publish to %s", group, exc_info=True)
            continue
        shards.setdefault(loop_layer._get_shard(channel), []).append((channel, data))
    return shards


def coalesce(batch: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Messages queued for the same group while the publisher was busy go out
    as few sends as their order allows: a run of events as one `tether.events`
    message (in commit order; a lone event stays a `tether.event`), a run of one
    decision's token pieces (`live.tokens`) as one `tether.tokens` message, its
    pieces joined. Runs of different kinds keep their order."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, message in batch:
        runs = by_group.setdefault(group, [])
        last = runs[-1] if runs else None
        if message["type"] == TOKENS:
            if last is not None and last["type"] == TOKENS and _same_attempt(last, message):
                last["deltas"].extend(message["deltas"])
                last["last"] = message.get("last", False)
            else:
                runs.append({**message, "deltas": list(message["deltas"])})
        elif last is not None and last["type"] == "tether.event":
            last["events"].append(message["event"])
        else:
            runs.append({"type": "tether.event", "events": [message["event"]]})
    return [(group, _sendable(run)) for group, runs in by_group.items() for run in runs]


def _same_attempt(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["task_id"], a["step_no"], a["attempt"]) == (b["task_id"], b["step_no"], b["attempt"])


def _sendable(run: dict[str, Any]) -> dict[str, Any]:
    if run["type"] == TOKENS:
        return {**run, "deltas": merged_deltas(run["deltas"])}
    events = run["events"]
    if len(events) == 1:
        return {"type": "tether.event", "event": events[0], "task_id": events[0]["task_id"]}
    return {"type": "tether.events", "events": events}



def merged_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive pieces of the same text, or of the same tool call, joined into one."""
    out: list[dict[str, Any]] = []
    for delta in deltas:
        last = out[-1] if out else None
        if last is not None and last["kind"] == delta["kind"] == "text":
            last["text"] += delta["text"]
        elif (last is not None and last["kind"] == delta["kind"] == "tool_call"
              and last["index"] == delta["index"]):
            last["name"] = delta["name"]
            last["args"] += delta["args"]
        else:
            out.append(dict(delta))
    return out


publisher = Publisher()
