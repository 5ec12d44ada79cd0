"""Approvals in Slack, against a fake Slack Web API on loopback
(`TETHER_SLACK_API_URL`): an approval request is posted as an interactive
message; a button press signed with the tenant's signing secret decides through
the same service as the console, recorded as taken from Slack, and the message
is rewritten to say who decided; a decision taken elsewhere rewrites it too. A
bad signature or an old timestamp is a 401, an unmapped Slack user gets an
ephemeral refusal, and neither changes anything. Reject opens a modal asking
why (`views.open`); its submission rejects with the reason, and an empty one is
the field's error with nothing decided."""
from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from approvals_app.models import Approval
from foundations.actors import SYSTEM
from notify_app.models import Delivery, SlackMessage
from tasks_app.models import Event, Task
from tests.fakes.slack_server import SIGNING_SECRET, TOKEN, FakeSlack, fake_slack, signed

from .conftest import ADM, Tenancy, drain

pytestmark = pytest.mark.django_db
__all__ = ["fake_slack"]

REV = Role.REVIEWER
CHANNEL = "C0APPROVALS"


def _connect(tenancy: Tenancy) -> None:
    """The tenant's Slack app: its secrets, its channel, and the reviewers' addresses."""
    for name, value in (("slack-bot-token", TOKEN), ("slack-signing-secret", SIGNING_SECRET)):
        secret_create(tenant_id=tenancy.tenant.pk, name=name, value=value, actor=SYSTEM)
    admin = tenancy.client(ADM)
    response = admin.put("/api/v1/notifications/slack", {"channel": CHANNEL}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["interactions_url"].endswith(
        f"/api/v1/slack/{tenancy.tenant.name}/interactions")
    for role in (REV, ADM):
        user = tenancy.users[role]
        assert admin.patch(f"/api/v1/members/{user.pk}", {"email": f"{role}@corp.example"},
                           format="json").status_code == 200


@pytest.fixture
def posted(main: Tenancy, fake_slack: FakeSlack) -> tuple[Approval, dict[str, Any]]:
    """An approval posted to Slack: (the approval, the message as posted)."""
    _connect(main)
    fake_slack.add_user("U_REVIEWER", f"{REV}@corp.example")
    _, approval = main.waiting_for_approval()
    drain()
    [post] = fake_slack.of("chat.postMessage")
    assert post.token == TOKEN and post.args["channel"] == CHANNEL
    return approval, post.args


def _press(tenancy: Tenancy, approval: Approval, *, action: str = "tether_approve",
           user: str = "U_REVIEWER", secret: str = SIGNING_SECRET, at: int | None = None,
           version: int | None = None) -> Any:
    value = json.dumps({"approval": approval.pk,
                        "version": approval.task_version if version is None else version})
    payload = {"type": "block_actions", "user": {"id": user},
               "channel": {"id": CHANNEL}, "container": {"message_ts": "1700000000.000001"},
               "actions": [{"action_id": action, "value": value}]}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = signed(body, secret, at=at)
    return Client().post(f"/api/v1/slack/{tenancy.tenant.name}/interactions", body,
                         content_type="application/x-www-form-urlencoded",
                         headers=headers)


def _post(tenancy: Tenancy, payload: dict[str, Any]) -> Any:
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return Client().post(f"/api/v1/slack/{tenancy.tenant.name}/interactions", body,
                         content_type="application/x-www-form-urlencoded",
                         headers=signed(body))


def _submit_reason(tenancy: Tenancy, view: dict[str, Any], reason: str, *,
                   user: str = "U_REVIEWER") -> Any:
    """The modal `view` (as opened) submitted with `reason`, as Slack posts it."""
    submitted = {**view, "id": "V1", "state": {"values": {
        "reason": {"reason": {"type": "plain_text_input", "value": reason}}}}}
    return _post(tenancy, {"type": "view_submission", "user": {"id": user},
                           "view": submitted})


def _state(approval: Approval) -> tuple[str, int, int]:
    approval.refresh_from_db()
    task = Task.objects.get(pk=approval.task_id)
    return approval.status, task.version, Event.objects.filter(task_id=task.pk).count()


def _blocks(blocks: Any) -> list[dict[str, Any]]:
    """Blocks as the SDK sent them (a JSON body, or a form field holding JSON)."""
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _texts(blocks: Any) -> str:
    return json.dumps(_blocks(blocks))


def test_the_request_is_posted_with_the_cards_facts_and_buttons(posted) -> None:
    approval, message = posted
    blocks = _texts(message["blocks"])
    for fact in ("issue_refund", "A-1", "damaged", "*Risk*", "*Expires*",
                 f"/tasks/{approval.task_id}/"):
        assert fact in blocks, fact
    actions = [b for b in _blocks(message["blocks"]) if b["type"] == "actions"]
    assert [e["action_id"] for e in actions[0]["elements"]] == [
        "tether_approve", "tether_reject", "tether_open"]
    assert SlackMessage.objects.get().approval_id == approval.pk
    assert Delivery.objects.get(channel="slack").status == "succeeded"


def test_a_signed_press_approves_and_the_message_says_who(main: Tenancy, posted,
                                                          fake_slack: FakeSlack,
                                                          django_capture_on_commit_callbacks
                                                          ) -> None:
    approval, _ = posted
    with django_capture_on_commit_callbacks(execute=True):
        response = _press(main, approval)
    assert response.status_code == 200
    approval.refresh_from_db()
    assert (approval.status, approval.channel, approval.decided_by_id) == (
        "approved", "slack", main.users[REV].pk)
    [granted] = Event.objects.filter(task_id=approval.task_id, type="approval_granted")
    assert granted.payload["channel"] == "slack"
    [lookup] = fake_slack.of("users.info")
    assert lookup.args["user"] == "U_REVIEWER"
    [update] = fake_slack.of("chat.update")
    assert update.args["channel"] == CHANNEL
    blocks = _texts(update.args["blocks"])
    assert f"Approved by {main.users[REV].username} (from slack)" in blocks
    assert "tether_approve" not in blocks  # no buttons left
    assert not fake_slack.of("chat.postEphemeral")


def test_a_decision_in_the_console_updates_the_message_too(main: Tenancy, posted,
                                                           fake_slack: FakeSlack,
                                                           django_capture_on_commit_callbacks
                                                           ) -> None:
    approval, _ = posted
    with django_capture_on_commit_callbacks(execute=True):
        response = main.client(ADM).post(f"/api/v1/approvals/{approval.pk}/reject",
                                         {"comment": "not this one"}, format="json")
    assert response.status_code == 200
    [update] = fake_slack.of("chat.update")
    assert (f"Rejected by {main.users[ADM].username} (from api)" in _texts(update.args["blocks"])
            and "not this one" in _texts(update.args["blocks"]))


@pytest.mark.parametrize("case", ["bad signature", "old timestamp", "other tenant's secret"])
def test_an_unsigned_press_is_401_and_changes_nothing(main: Tenancy, posted,
                                                      fake_slack: FakeSlack, case: str) -> None:
    approval, _ = posted
    before = _state(approval)
    if case == "bad signature":
        response = _press(main, approval, secret="not-the-signing-secret")
    elif case == "old timestamp":
        response = _press(main, approval, at=int(time.time()) - 10 * 60)
    else:
        response = Client().post("/api/v1/slack/no-such-tenant/interactions", b"payload={}",
                                 content_type="application/x-www-form-urlencoded",
                                 headers=signed(b"payload={}"))
    assert response.status_code == 401
    assert _state(approval) == before
    assert not fake_slack.of("users.info") and not fake_slack.of("chat.update")


def test_an_unmapped_slack_user_is_told_and_nothing_changes(main: Tenancy, posted,
                                                            fake_slack: FakeSlack) -> None:
    approval, _ = posted
    before = _state(approval)
    fake_slack.add_user("U_STRANGER", "stranger@elsewhere.example")
    response = _press(main, approval, user="U_STRANGER")
    assert response.status_code == 200
    assert _state(approval) == before
    [told] = fake_slack.of("chat.postEphemeral")
    assert told.args["user"] == "U_STRANGER" and "does not know you" in told.args["text"]


def test_a_press_the_service_refuses_is_told_and_changes_nothing(main: Tenancy, posted,
                                                                 fake_slack: FakeSlack) -> None:
    approval, _ = posted
    # a member without a reviewer's role, then a message showing an older version
    fake_slack.add_user("U_OPERATOR", "operator@corp.example")
    main.client(ADM).patch(f"/api/v1/members/{main.users[Role.OPERATOR].pk}",
                           {"email": "operator@corp.example"}, format="json")
    before = _state(approval)
    assert _press(main, approval, user="U_OPERATOR").status_code == 200
    assert _press(main, approval, version=approval.task_version - 1).status_code == 200
    assert _state(approval) == before
    told = [c.args["text"] for c in fake_slack.of("chat.postEphemeral")]
    assert len(told) == 2 and all(t.startswith("Not applied:") for t in told)
    assert "moved on" in told[1]


def test_the_outbound_policy_applies_to_slack(main: Tenancy, fake_slack: FakeSlack,
                                              settings: Any) -> None:
    _connect(main)
    settings.TETHER_EGRESS_ALLOW = ()  # loopback is no longer allowed
    main.waiting_for_approval()
    drain()
    delivery = Delivery.objects.get(channel="slack")
    assert delivery.status == "refused"
    assert not fake_slack.calls and not SlackMessage.objects.exists()


def test_reject_asks_why_in_a_modal_and_rejects_with_the_reason(
        main: Tenancy, posted, fake_slack: FakeSlack,
        django_capture_on_commit_callbacks) -> None:
    approval, _ = posted
    before = _state(approval)
    value = json.dumps({"approval": approval.pk, "version": approval.task_version})
    pressed = _post(main, {"type": "block_actions", "user": {"id": "U_REVIEWER"},
                           "trigger_id": "trigger-1", "channel": {"id": CHANNEL},
                           "actions": [{"action_id": "tether_reject", "value": value}]})
    assert pressed.status_code == 200
    assert _state(approval) == before  # a press only asks: nothing decided yet
    [opened] = fake_slack.of("views.open")
    assert opened.args["trigger_id"] == "trigger-1"
    view = opened.args["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["callback_id"] == "tether_reject_reason"
    assert [b["block_id"] for b in view["blocks"]] == ["reason"]

    empty = _submit_reason(main, view, "   ")
    assert empty.status_code == 200
    assert empty.json() == {"response_action": "errors",
                            "errors": {"reason": "Say why, so the agent can do better."}}
    assert _state(approval) == before

    stranger = _submit_reason(main, view, "no", user="U_STRANGER")
    assert "does not know you" in stranger.json()["errors"]["reason"]
    assert _state(approval) == before

    with django_capture_on_commit_callbacks(execute=True):
        done = _submit_reason(main, view, "Refund the shipping only, not the item.")
    assert done.status_code == 200 and done.content == b""  # closes the modal
    approval.refresh_from_db()
    assert (approval.status, approval.channel, approval.decided_by_id, approval.comment) == (
        "rejected", "slack", main.users[REV].pk, "Refund the shipping only, not the item.")
    [rejected] = Event.objects.filter(task_id=approval.task_id, type="approval_rejected")
    assert rejected.payload["comment"] == "Refund the shipping only, not the item."
    [update] = fake_slack.of("chat.update")
    assert "Refund the shipping only" in _texts(update.args["blocks"])

    again = _submit_reason(main, view, "twice")  # the same modal once more: decided already
    assert again.json()["errors"]["reason"].startswith("Not applied:")
