"""A button pressed on an approval's Slack message.

Slack posts the press to `/api/v1/slack/<tenant>/interactions`. Checked in
this order, each refusal changing nothing:
1. the signature and timestamp (`slack_sdk.signature.SignatureVerifier`, keyed
   with the tenant's signing secret; older than five minutes is refused):
   401 otherwise, the same for a tenant that does not exist or has no secret;
2. the Slack user is a member of the tenant by e-mail (`users.info`): an
   unmapped user gets an ephemeral refusal;
3. the decision, through the same service as the console
   (`approval_decide`, recorded as taken from `slack`) at the task version the
   message showed; whatever it refuses (a reviewer's role missing, the
   requester deciding their own task, the task moved on, decided already) is
   said in an ephemeral message.
The message itself is updated by the decision's after-commit hook (`hooks`),
as for a decision taken anywhere else.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from approvals_app.models import DecisionChannel
from approvals_app.services.decisions import approval_decide
from config.errors import DomainError
from tasks_app.actors import Actor
from tasks_app.models import Tenant

from .slack import (
    APPROVE,
    REJECT,
    SLACK_SIGNING_SECRET,
    SlackNotConnected,
    slack_client,
    slack_reviewer,
    tenant_secret,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Handled:
    status: int  # the HTTP status Slack gets (200: acknowledged)
    outcome: str  # what happened, for logs and tests


def slack_interaction(*, tenant_name: str, body: bytes, headers: Mapping[str, str]) -> Handled:
    tenant = Tenant.objects.filter(name=tenant_name).first()
    if tenant is None or not _signed(tenant.pk, body, headers):
        return Handled(401, "unsigned")
    try:
        payload = json.loads(parse_qs(body.decode("utf-8")).get("payload", [""])[0])
    except (ValueError, UnicodeDecodeError):
        return Handled(400, "malformed")
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return Handled(200, "ignored")
    action = (payload.get("actions") or [{}])[0]
    if action.get("action_id") not in (APPROVE, REJECT):
        return Handled(200, "ignored")  # Open is a link: Slack only tells us it was pressed
    slack_user = str((payload.get("user") or {}).get("id") or "")
    channel = str((payload.get("channel") or payload.get("container") or {}).get("id")
                  or (payload.get("container") or {}).get("channel_id") or "")
    try:
        client = slack_client(tenant.pk)
    except SlackNotConnected:
        return Handled(503, "not_connected")  # the signing secret is set, the token is not
    member = slack_reviewer(tenant_id=tenant.pk, client=client, slack_user_id=slack_user)
    if member is None:
        _tell(client, channel, slack_user, "Tether does not know you: no member of this "
              "tenant has your Slack e-mail address. Nothing was decided.")
        return Handled(200, "unmapped")
    try:
        pressed = json.loads(action.get("value") or "{}")
        approval_id, version = int(pressed["approval"]), int(pressed["version"])
    except (ValueError, KeyError, TypeError):
        return Handled(400, "malformed")
    user = member.user
    actor = Actor(name=user.get_username(), role=member.role, user_id=user.pk)
    approve = action["action_id"] == APPROVE
    try:
        approval_decide(
            approval_id=approval_id, tenant_id=tenant.pk, actor=actor,
            decision="approve" if approve else "reject",
            comment="" if approve else f"rejected in Slack by {actor.name} (no reason given)",
            expected_version=version, channel=DecisionChannel.SLACK)
    except DomainError as exc:
        _tell(client, channel, slack_user, f"Not applied: {exc.message}. Nothing was decided.")
        return Handled(200, f"refused:{exc.code}")
    return Handled(200, "approved" if approve else "rejected")


def _signed(tenant_id: int, body: bytes, headers: Mapping[str, str]) -> bool:
    try:
        secret = tenant_secret(tenant_id, SLACK_SIGNING_SECRET)
    except SlackNotConnected:
        log.warning("a Slack request for tenant %s, which has no Slack signing secret",
                    tenant_id)
        return False
    try:
        return SignatureVerifier(secret).is_valid_request(body, dict(headers))
    except ValueError:  # a timestamp that is not a number
        return False


def _tell(client: WebClient, channel: str, user: str, text: str) -> Any:
    """An ephemeral message: only the person who pressed sees it."""
    try:
        return client.chat_postEphemeral(channel=channel, user=user, text=text)
    except Exception:  # noqa: BLE001 - the refusal stands even if Slack cannot show it
        log.warning("could not tell Slack user %s: %s", user, text, exc_info=True)
        return None
