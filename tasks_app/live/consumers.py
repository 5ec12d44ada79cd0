"""The console's WebSocket: authenticated by session, scoped to the user's tenant.

Protocol (JSON):
- client → ``{"type": "subscribe", "task": ID, "after": LAST_EVENT_ID}``: the
  task's events after that id, then live ones; or ``{"type": "subscribe",
  "tenant": true}`` for every task of the tenant (lists, inbox, dashboard).
- server → ``{"type": "event", "event": {...}}`` in id order, each once;
  ``{"type": "tokens", "task": ID, "step_no": N, "attempt": A, "deltas": [...]}``
  while a subscribed task's model streams its decision (`live.tokens`; dropped
  once an event of that step was sent: the recorded decision replaces them);
  ``{"type": "error", "code": ...}`` for a refused subscription.

Order and no duplicates across a reconnect: the consumer joins the group
first, then replays the backlog from the database, and drops any live event
whose id it has already sent.

A socket lives only as long as its user's access: it closes (code 4403) when
told so on the user's group (`publish.end_user_sockets`, after a membership is
revoked or the user deactivated through `accounts_app.services.accounts`), and on its own
re-check every `LIVE_RECHECK_S` seconds, which catches changes made elsewhere
(the Django admin, a shell).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import suppress
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from accounts_app.models import Membership
from foundations.ids import parse_id

from ..selectors import event_dict, events_after, task_of_tenant
from .publish import task_group, tenant_group, user_group
from .tokens import step_of, superseded

BACKLOG_PAGE = 500


class LiveConsumer(AsyncJsonWebsocketConsumer):
    tenant_id: int | None = None
    revoked = False
    recheck: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user_id = user.pk
        self.tenant_id = await _tenant_of(user.pk)
        if self.tenant_id is None:
            await self.close(code=4403)
            return
        self.groups_joined: set[str] = set()
        self.last_sent: dict[int, int] = {}  # task id -> last event id sent
        self.decided: dict[int, int] = {}  # task id -> latest step an event was sent of
        self.tenant_wide = False
        await self._join(user_group(user.pk))
        await self.accept()
        self.recheck = asyncio.create_task(self._recheck_access())

    async def disconnect(self, code: int) -> None:
        if self.recheck is not None and self.recheck is not asyncio.current_task():
            self.recheck.cancel()
            with suppress(asyncio.CancelledError):
                await self.recheck
        await self._leave_groups()

    async def _leave_groups(self) -> None:
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = set()

    async def tether_revoked(self, message: dict[str, Any]) -> None:
        await self._revoke()

    async def _revoke(self) -> None:
        if self.revoked:
            return
        self.revoked = True  # nothing more is sent, even before the close is through
        await self._leave_groups()
        await self.close(code=4403)

    async def _recheck_access(self) -> None:
        interval = settings.TETHER["LIVE_RECHECK_S"]
        while not self.revoked:
            await asyncio.sleep(interval)
            if await _tenant_of(self.user_id) != self.tenant_id:
                await self._revoke()

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """A frame that is not JSON (or absurdly nested) is a bad message, not a crash."""
        try:
            return json.loads(text_data)
        except (ValueError, RecursionError):
            return None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        if text_data is None:  # a binary frame
            await self.send_json({"type": "error", "code": "bad_message"})
            return
        await super().receive(text_data=text_data, **kwargs)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.revoked:
            return
        if not isinstance(content, dict) or content.get("type") != "subscribe":
            await self.send_json({"type": "error", "code": "bad_message"})
            return
        if content.get("tenant"):
            await self._join(tenant_group(self.tenant_id))  # type: ignore[arg-type]
            self.tenant_wide = True
            await self.send_json({"type": "subscribed", "tenant": True})
            return
        task_id = parse_id(content.get("task"))
        after = parse_id(content.get("after") or 0)
        if task_id is None or after is None:
            await self.send_json({"type": "error", "code": "bad_message"})
            return
        if not await _task_visible(self.tenant_id, task_id):  # type: ignore[arg-type]
            await self.send_json({"type": "error", "code": "not_found", "task": task_id})
            return
        await self._join(task_group(task_id))
        self.last_sent[task_id] = max(self.last_sent.get(task_id, 0), after)
        while True:
            backlog = await _backlog(task_id, self.last_sent[task_id])
            for event in backlog:
                await self._send_event(event)
            if len(backlog) < BACKLOG_PAGE:
                break
        await self.send_json(
            {"type": "subscribed", "task": task_id, "last_id": self.last_sent[task_id]}
        )

    async def _join(self, group: str) -> None:
        if group not in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.add(group)

    async def _send_event(self, event: dict[str, Any]) -> None:
        if self.revoked:
            return
        task_id = event["task_id"]
        if task_id in self.last_sent:
            if event["id"] <= self.last_sent[task_id]:
                return  # already sent (backlog and live overlap)
            self.last_sent[task_id] = event["id"]
            self.decided[task_id] = max(self.decided.get(task_id, 0), step_of(event))
        await self.send_json({"type": "event", "event": event})

    async def tether_tokens(self, message: dict[str, Any]) -> None:
        """A decision's tokens, to a socket subscribed to its task (never tenant-wide)."""
        task_id = message["task_id"]
        if self.revoked or task_id not in self.last_sent:
            return
        if superseded(message, self.decided.get(task_id, 0)):
            return
        await self.send_json({"type": "tokens", "task": task_id, "step_no": message["step_no"],
                              "attempt": message["attempt"], "deltas": message["deltas"]})

    async def tether_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        if event["task_id"] not in self.last_sent and not self.tenant_wide:
            return
        await self._send_event(event)

    async def tether_events(self, message: dict[str, Any]) -> None:
        """Several events of one group, published together (see `publish.coalesce`)."""
        for event in message["events"]:
            await self.tether_event({"event": event})


@database_sync_to_async
def _tenant_of(user_id: int) -> int | None:
    """The tenant of an active user's membership (None: no access)."""
    return (
        Membership.objects.filter(user_id=user_id, user__is_active=True)
        .values_list("tenant_id", flat=True)
        .first()
    )


@database_sync_to_async
def _task_visible(tenant_id: int, task_id: int) -> bool:
    return task_of_tenant(tenant_id, task_id) is not None


@database_sync_to_async
def _backlog(task_id: int, after: int) -> list[dict[str, Any]]:
    return [
        event_dict(e) for e in events_after(task_id=task_id, after_id=after, limit=BACKLOG_PAGE)
    ]
