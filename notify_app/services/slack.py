"""Slack: approval requests posted as interactive messages, kept up to date.

A tenant connects its own Slack app: the bot token and the signing secret are
tenant secrets (`SLACK_TOKEN_SECRET`, `SLACK_SIGNING_SECRET`, sealed like any
other), the channel is a notification setting. An approval request is posted
(a `slack` delivery of the outbox, retried like a webhook) as a Block Kit
message with the card's facts and Approve, Reject and Open buttons; the
message's id is kept (`SlackMessage`) so every decision on the approval,
wherever it is taken, rewrites the message to say who decided what, when and
from where (`slack_message_refresh`, after the decision commits).

Calls go through the SDK's `WebClient` with its base URL at
`TETHER_SLACK_API_URL`; its HTTP goes through Tether's outbound clients, so
`TETHER_EGRESS_ALLOW` is checked at connect time as for any outbound call.
"""
from __future__ import annotations

import json
import logging
from typing import Any
from urllib.request import Request

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from accounts_app.models import Membership
from accounts_app.vault.lookup import secret_values
from accounts_app.vault.references import secret_ref
from approvals_app.models import Approval, Decision
from tasks_app.models import Task
from tools_app.outbound import client_for

from ..models import SlackMessage
from ..payloads import link

log = logging.getLogger(__name__)

SLACK_TOKEN_SECRET = "slack-bot-token"
SLACK_SIGNING_SECRET = "slack-signing-secret"
TIMEOUT_S = 10
ARGS_CHARS = 2500  # a section's text is at most 3000 characters
APPROVE, REJECT, OPEN = "tether_approve", "tether_reject", "tether_open"
REJECT_VIEW, REASON = "tether_reject_reason", "reason"  # the reject modal, its one field
REASON_CHARS = 3000
SHOWN = {Decision.APPROVED: ":white_check_mark: Approved", Decision.REJECTED: ":x: Rejected",
         Decision.RESPONDED: ":memo: Answered instead of run",
         Decision.EXPIRED: ":hourglass: Expired", Decision.CANCELED: ":no_entry_sign: Canceled"}


class SlackNotConnected(Exception):
    """The tenant has no usable Slack secret (missing, or no longer decrypts)."""


class PolicyWebClient(WebClient):
    """The SDK's Web API client, sending through `tools_app.outbound` instead of urllib."""

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        headers = {k: str(v) for k, v in req.header_items()}
        response = client_for(url).post(url, content=req.data, headers=headers,  # type: ignore[arg-type]
                                        timeout=self.timeout)
        return {"status": response.status_code, "headers": dict(response.headers),
                "body": response.text}


def tenant_secret(tenant_id: int, name: str) -> str:
    resolved = secret_values(tenant_id=tenant_id, names=[name])
    value = resolved.values.get(secret_ref(name))
    if value is None:
        raise SlackNotConnected("; ".join(resolved.problems.values()) or name)
    return value


def slack_client(tenant_id: int) -> WebClient:
    """The tenant's bot client (retries are the outbox's business, not the SDK's)."""
    return PolicyWebClient(token=tenant_secret(tenant_id, SLACK_TOKEN_SECRET),
                           base_url=settings.TETHER_SLACK_API_URL, timeout=TIMEOUT_S,
                           retry_handlers=[])


def slack_message_post(*, tenant_id: int, channel: str, approval_id: int) -> SlackMessage | None:
    """Post the approval's message (None: it was decided before it could be posted).
    Raises `SlackNotConnected`, the SDK's `SlackApiError`, or a transport error."""
    approval = _approval(approval_id)
    if approval is None or approval.tenant_id != tenant_id:
        return None
    existing = SlackMessage.objects.filter(approval_id=approval_id).first()
    if existing is not None:  # an attempt that posted, then failed to record its success
        return existing
    if approval.status != Decision.PENDING:
        return None
    response = slack_client(tenant_id).chat_postMessage(
        channel=channel, text=_fallback(approval), blocks=approval_blocks(approval))
    return SlackMessage.objects.create(tenant_id=tenant_id, approval_id=approval_id,
                                       channel=str(response["channel"]), ts=str(response["ts"]))


def slack_message_refresh(approval_id: int) -> bool:
    """Rewrite the approval's message to show its decision (False: nothing to do or
    Slack refused; logged, never raised: the decision has committed)."""
    message = SlackMessage.objects.filter(approval_id=approval_id).first()
    approval = _approval(approval_id)
    if message is None or approval is None:
        return False
    try:
        slack_client(approval.tenant_id).chat_update(
            channel=message.channel, ts=message.ts, text=_fallback(approval),
            blocks=approval_blocks(approval))
    except Exception:  # noqa: BLE001 - Slack down or the app removed: the decision stands
        log.warning("could not update the Slack message of approval %s", approval_id,
                    exc_info=True)
        return False
    SlackMessage.objects.filter(pk=message.pk).update(updated_at=timezone.now())
    return True


def on_approval_decided(event: Any) -> None:
    """Registered for the decision events (`hooks`): inside the deciding
    transaction, so the message is rewritten only once the decision commits."""
    approval_id = (event.payload or {}).get("approval_id")
    if approval_id and SlackMessage.objects.filter(approval_id=approval_id).exists():
        transaction.on_commit(lambda: slack_message_refresh(int(approval_id)))


def slack_reviewer(*, tenant_id: int, client: WebClient, slack_user_id: str) -> Membership | None:
    """The tenant's active member whose e-mail is the Slack user's (users.info), if any."""
    try:
        info = client.users_info(user=slack_user_id)
    except SlackApiError:  # user_not_found, or the app lacks users:read.email
        return None
    email = str(((info.get("user") or {}).get("profile") or {}).get("email") or "").strip()
    if not email:
        return None
    matches = list(Membership.objects.select_related("user").filter(
        tenant_id=tenant_id, user__is_active=True, user__email__iexact=email)[:2])
    return matches[0] if len(matches) == 1 else None  # two accounts, one address: nobody


def button_value(approval: Approval) -> str:
    """What a button carries: the approval and the task version its message showed."""
    return json.dumps({"approval": approval.pk, "version": approval.task_version})


def approval_blocks(approval: Approval) -> list[dict[str, Any]]:
    """The card's facts; the buttons while it waits, who decided what once it is decided."""
    task: Task = approval.task
    preview = approval.preview or {}
    agent = (task.agent_snapshot or {}).get("name") or "agent"
    url = link(f"/tasks/{task.pk}/")
    args = json.dumps(approval.args, indent=2, ensure_ascii=False)
    if len(args) > ARGS_CHARS:
        args = args[:ARGS_CHARS] + "\n…"
    cites = ", ".join(str(c) for c in preview.get("cites") or []) or "none"
    expires = f"{approval.expires_at:%Y-%m-%d %H:%M} UTC" if approval.expires_at else "no expiry"
    blocks: list[dict[str, Any]] = [
        _text(f"*Approval requested* · <{url}|task #{task.pk}> · {_escape(agent)}\n"
              f"*Goal:* {_escape(task.goal[:300])}"),
        {"type": "section", "fields": [
            {"type": "mrkdwn", "text": f"*Tool*\n`{_escape(approval.tool)}`"},
            {"type": "mrkdwn", "text": f"*Risk*\n{_escape(str(preview.get('risk') or '?'))}"},
            {"type": "mrkdwn", "text": f"*Expires*\n{expires}"},
            {"type": "mrkdwn", "text": f"*Step*\n{approval.step.step_no}"},
        ]},
        _text(f"*Arguments*\n```{_escape(args)}```"),
        _text(f"*Reason:* {_escape(str(preview.get('reason') or 'none given'))}\n"
              f"*Cited evidence:* {_escape(cites)}"),
    ]
    if approval.status == Decision.PENDING:
        value = button_value(approval)
        blocks.append({"type": "actions", "block_id": f"approval-{approval.pk}", "elements": [
            {"type": "button", "action_id": APPROVE, "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            # opens the reject modal, which asks why (`reject_modal`)
            {"type": "button", "action_id": REJECT, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Reject…"}},
            {"type": "button", "action_id": OPEN, "url": url,
             "text": {"type": "plain_text", "text": "Open"}},
        ]})
    else:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": _escape(decided_line(approval))}]})
    return blocks


def reject_modal(*, approval_id: int, version: int, channel: str) -> dict[str, Any]:
    """The modal a Reject press opens (`views.open`): the reason the agent is told.
    What it rejects rides in `private_metadata`, which Slack returns on submission."""
    metadata = json.dumps({"approval": approval_id, "version": version, "channel": channel})
    return {
        "type": "modal", "callback_id": REJECT_VIEW, "private_metadata": metadata,
        "title": {"type": "plain_text", "text": "Reject this call"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Back"},
        "blocks": [{
            "type": "input", "block_id": REASON,
            "label": {"type": "plain_text", "text": "Why? The agent is told, to do better"},
            "element": {"type": "plain_text_input", "action_id": REASON, "multiline": True,
                        "max_length": REASON_CHARS},
        }],
    }


def decided_line(approval: Approval) -> str:
    said = SHOWN.get(approval.status, approval.status)  # type: ignore[call-overload]
    if approval.decided_by is not None:
        said += f" by {approval.decided_by.get_username()}"
    if approval.channel:
        said += f" (from {approval.channel})"
    if approval.decided_at is not None:
        said += f" at {approval.decided_at:%Y-%m-%d %H:%M} UTC"
    if approval.comment:
        said += f": {approval.comment[:500]}"
    return said


def _approval(approval_id: int) -> Approval | None:
    return (Approval.objects.select_related("task", "step", "decided_by")
            .filter(pk=approval_id).first())


def _fallback(approval: Approval) -> str:
    """The notification text (and what screen readers say)."""
    if approval.status == Decision.PENDING:
        return f"Approval requested: task #{approval.task_id} wants to call {approval.tool}"
    return f"Task #{approval.task_id}, {approval.tool}: {decided_line(approval)}"


def _text(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _escape(text: str) -> str:
    """Slack's three control characters in text a model or a person wrote."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
