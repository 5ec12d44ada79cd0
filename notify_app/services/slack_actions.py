"""A button pressed on an approval's Slack message, and the reject modal's reason.

Slack posts both to `/api/v1/slack/<tenant>/interactions`. Checked in this
order, each refusal changing nothing:
1. the signature and timestamp (`slack_sdk.signature.SignatureVerifier`, keyed
   with the tenant's signing secret; older than five minutes is refused):
   401 otherwise, the same for a tenant that does not exist or has no secret;
2. the Slack user is a member of the tenant by e-mail (`users.info`): an
   unmapped user gets an ephemeral refusal (in the modal: its field's error);
3. Approve decides at once; Reject opens a modal asking why (`views.open`
   with the press's `trigger_id`), since a rejection needs a reason the agent
   is told. Submitting the modal (a `view_submission`) rejects with that
   reason; an empty one is the field's error (`response_action: errors`) and
   nothing is decided;
4. the decision, through the same service as the console
   (`approval_decide`, recorded as taken from `slack`) at the task version the
   message showed; whatever it refuses (a reviewer's role missing, the
   requester deciding their own task, the task moved on, decided already) is
   said in an ephemeral message, or under the modal's field.
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
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from accounts_app.models import Membership, Tenant
from approvals_app.models import DecisionChannel
from approvals_app.services.decisions import approval_decide
from foundations.actors import Actor
from foundations.errors import DomainError

from .slack import (
    APPROVE,
    REASON,
    REASON_CHARS,
    REJECT,
    REJECT_VIEW,
    SLACK_SIGNING_SECRET,
    SlackNotConnected,
    reject_modal,
    slack_client,
    slack_reviewer,
    tenant_secret,
)

log = logging.getLogger(__name__)


UNKNOWN = ("Tether does not know you: no member of this tenant has your Slack e-mail "
           "address. Nothing was decided.")


@dataclass(frozen=True)
class Handled:
    status: int  # the HTTP status Slack gets (200: acknowledged)
    outcome: str  # what happened, for logs and tests
    body: dict[str, Any] | None = None  # what Slack is answered (a modal's field errors)


def slack_interaction(*, tenant_name: str, body: bytes, headers: Mapping[str, str]) -> Handled:
    tenant = Tenant.objects.filter(name=tenant_name).first()
    if tenant is None or not _signed(tenant.pk, body, headers):
        return Handled(401, "unsigned")
    try:
        payload = json.loads(parse_qs(body.decode("utf-8")).get("payload", [""])[0])
    except (ValueError, UnicodeDecodeError):
        return Handled(400, "malformed")
    if not isinstance(payload, dict):
        return Handled(200, "ignored")
    view = payload.get("view")
    view = view if isinstance(view, dict) else {}
    if payload.get("type") == "view_submission" and view.get("callback_id") == REJECT_VIEW:
        return _reason_submitted(tenant.pk, payload, view)
    if payload.get("type") != "block_actions":
        return Handled(200, "ignored")
    action = (payload.get("actions") or [{}])[0]
    if action.get("action_id") not in (APPROVE, REJECT):
        return Handled(200, "ignored")  # Open is a link: Slack only tells us it was pressed
    slack_user = _slack_user(payload)
    channel = str((payload.get("channel") or payload.get("container") or {}).get("id")
                  or (payload.get("container") or {}).get("channel_id") or "")
    try:
        client = slack_client(tenant.pk)
    except SlackNotConnected:
        return Handled(503, "not_connected")  # the signing secret is set, the token is not
    member = slack_reviewer(tenant_id=tenant.pk, client=client, slack_user_id=slack_user)
    if member is None:
        _tell(client, channel, slack_user, UNKNOWN)
        return Handled(200, "unmapped")
    try:
        approval_id, version = _pressed(json.loads(action.get("value") or "{}"))
    except (ValueError, KeyError, TypeError):
        return Handled(400, "malformed")
    if action["action_id"] == REJECT:
        return _ask_why(client, payload, channel, slack_user, approval_id, version)
    refused = _decide(tenant.pk, member, approval_id, version, approve=True)
    if refused is not None:
        _tell(client, channel, slack_user, f"Not applied: {refused.message}. "
              "Nothing was decided.")
        return Handled(200, f"refused:{refused.code}")
    return Handled(200, "approved")


def _ask_why(client: WebClient, payload: dict[str, Any], channel: str, slack_user: str,
             approval_id: int, version: int) -> Handled:
    """Open the reject modal for the presser (its trigger is valid for three seconds)."""
    try:
        client.views_open(trigger_id=str(payload.get("trigger_id") or ""),
                          view=reject_modal(approval_id=approval_id, version=version,
                                            channel=channel))
    except SlackApiError:
        _tell(client, channel, slack_user, "Could not open the form asking why; reject from "
              "the card instead (Open). Nothing was decided.")
        return Handled(200, "modal_failed")
    return Handled(200, "asked_why")


def _reason_submitted(tenant_id: int, payload: dict[str, Any], view: dict[str, Any]) -> Handled:
    """The reject modal submitted: reject with its reason, or say under the field why not."""
    reason = str((((view.get("state") or {}).get("values") or {}).get(REASON) or {})
                 .get(REASON, {}).get("value") or "").strip()
    try:
        approval_id, version = _pressed(json.loads(view.get("private_metadata") or "{}"))
    except (ValueError, KeyError, TypeError):
        return Handled(400, "malformed")
    if not reason:
        return _field_error("Say why, so the agent can do better.", "no_reason")
    if len(reason) > REASON_CHARS:
        return _field_error(f"At most {REASON_CHARS} characters.", "too_long")
    try:
        client = slack_client(tenant_id)
    except SlackNotConnected:
        return Handled(503, "not_connected")
    member = slack_reviewer(tenant_id=tenant_id, client=client,
                            slack_user_id=_slack_user(payload))
    if member is None:
        return _field_error(UNKNOWN, "unmapped")
    refused = _decide(tenant_id, member, approval_id, version, approve=False, reason=reason)
    if refused is not None:
        return _field_error(f"Not applied: {refused.message}. Nothing was decided.",
                            f"refused:{refused.code}")
    return Handled(200, "rejected")  # an empty answer closes the modal


def _decide(tenant_id: int, member: Membership, approval_id: int, version: int, *,
            approve: bool, reason: str = "") -> DomainError | None:
    """Decide as the member, from Slack; what the service refused, if it did."""
    user = member.user
    actor = Actor(name=user.get_username(), role=member.role, user_id=user.pk)
    try:
        approval_decide(approval_id=approval_id, tenant_id=tenant_id, actor=actor,
                        decision="approve" if approve else "reject", comment=reason,
                        expected_version=version, channel=DecisionChannel.SLACK)
    except DomainError as exc:
        return exc
    return None


def _pressed(value: Any) -> tuple[int, int]:
    """The approval and task version a button (or the modal it opened) carries."""
    return int(value["approval"]), int(value["version"])


def _slack_user(payload: dict[str, Any]) -> str:
    return str((payload.get("user") or {}).get("id") or "")


def _field_error(message: str, outcome: str) -> Handled:
    """The modal stays open with `message` under its reason field."""
    return Handled(200, outcome, {"response_action": "errors", "errors": {REASON: message}})


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
