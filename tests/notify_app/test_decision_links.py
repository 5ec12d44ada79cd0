"""Deciding from the notification e-mail: each reviewer gets their own signed
links; a link opens a confirmation page (a GET decides nothing) whose form
decides once, recorded as taken by e-mail. A forwarded link, a replay, a link
after the task moved on or after the reviewer lost the role, a tampered or an
expired link are refused with a page that says why, and change nothing."""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from accounts_app.models import Membership, Role
from approvals_app.models import Approval, Question
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task

from .conftest import ADM, Tenancy, drain

pytestmark = pytest.mark.django_db

REV = Role.REVIEWER


def _emails_on(tenancy: Tenancy) -> dict[str, str]:
    """Every member gets an address through the members API, and e-mail is turned on."""
    admin = tenancy.client(ADM)
    emails = {}
    for role, user in tenancy.users.items():
        emails[role] = f"{role}@{tenancy.tenant.name}.example"
        response = admin.patch(f"/api/v1/members/{user.pk}", {"email": emails[role]},
                               format="json")
        assert response.status_code == 200, response.content
        assert response.json()["email"] == emails[role]
    assert admin.put("/api/v1/notifications/email", {"email_reviewers": True},
                     format="json").status_code == 200
    return emails


def _links(message: Any) -> dict[str, str]:
    """The links of one e-mail, by what they say, as paths on the console."""
    found = dict(re.findall(r"^(Approve|Reject|Answer): (\S+)$", message.body, re.M))
    return {k.lower(): re.sub(r"^https?://[^/]+", "", v) for k, v in found.items()}


def _mail_to(address: str) -> Any:
    [message] = [m for m in mail.outbox if m.to == [address]]
    return message


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _state(approval: Approval) -> tuple[str, int, int]:
    """What must not change when a link is refused."""
    approval.refresh_from_db()
    task = Task.objects.get(pk=approval.task_id)
    return approval.status, task.version, Event.objects.filter(task_id=task.pk).count()


@pytest.fixture
def waiting(main: Tenancy) -> tuple[Approval, dict[str, str], dict[str, str]]:
    """An approval e-mailed to the reviewer and the admin: (approval, the reviewer's
    links, the addresses)."""
    emails = _emails_on(main)
    _, approval = main.waiting_for_approval()
    drain()
    assert sorted(m.to[0] for m in mail.outbox) == sorted([emails[REV], emails[ADM]])
    return approval, _links(_mail_to(emails[REV])), emails


def test_each_reviewer_gets_the_cards_facts_and_their_own_links(main: Tenancy, waiting) -> None:
    approval, links, emails = waiting
    message = _mail_to(emails[REV])
    for fact in ("issue_refund", "order_id: A-1", "amount_cents: 500", "Risk: ",
                 "Reason: damaged", "Expires: ", f"/tasks/{approval.task_id}/"):
        assert fact in message.body, fact
    html = message.alternatives[0][0]
    assert "issue_refund" in html and links["approve"] in html
    assert set(links) == {"approve", "reject"}
    assert links["approve"] != _links(_mail_to(emails[ADM]))["approve"]  # personal links


def test_the_link_approves_exactly_once_after_the_confirmation_form(main: Tenancy,
                                                                    waiting) -> None:
    approval, links, _ = waiting
    reviewer = _signed_in(main.users[REV])
    before = _state(approval)

    page = reviewer.get(links["approve"])
    assert page.status_code == 200
    assert b"Approve issue_refund" in page.content and b"damaged" in page.content
    assert _state(approval) == before  # a GET decides nothing

    done = reviewer.post(links["approve"], {"comment": "fine"})
    assert done.status_code == 200 and b"Approved" in done.content
    approval.refresh_from_db()
    assert (approval.status, approval.channel, approval.decided_by_id, approval.comment) == (
        "approved", "email", main.users[REV].pk, "fine")
    [granted] = Event.objects.filter(task_id=approval.task_id, type="approval_granted")
    assert granted.payload["channel"] == "email" and granted.actor == main.users[REV].username
    after = _state(approval)

    # the same link again, and the other link of the same e-mail: refused, nothing changes
    for method, path in (("post", links["approve"]), ("get", links["approve"]),
                         ("post", links["reject"])):
        again = getattr(reviewer, method)(path, {"comment": "again"})
        assert again.status_code == 409
        assert b"already approved by" in again.content and b"from email" in again.content
    assert _state(approval) == after
    assert Event.objects.filter(task_id=approval.task_id, type="approval_granted").count() == 1
    # the console's card says where it was decided
    card = reviewer.post(f"/inbox/approvals/{approval.pk}/approve/",
                         {"expected_version": approval.task_version}, HTTP_HX_REQUEST="true")
    assert card.status_code == 409 and b'data-channel="email"' in card.content


def test_a_link_forwarded_to_another_reviewer_is_refused(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    before = _state(approval)
    someone_else = _signed_in(main.users[ADM])  # may decide, but the link is not theirs
    for method in ("get", "post"):
        response = getattr(someone_else, method)(links["approve"])
        assert response.status_code == 403
        assert b"sent to another reviewer" in response.content
    assert _state(approval) == before


def test_a_tampered_link_is_refused(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    before = _state(approval)
    reviewer = _signed_in(main.users[REV])
    token = links["approve"].split("/")[2]
    # the reject link's payload with the approve link's signature, a changed
    # character, a token cut short
    reject_token = links["reject"].split("/")[2]
    forged = [reject_token.rsplit(":", 1)[0] + ":" + token.rsplit(":", 1)[1],
              token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"),
              token[: len(token) // 2]]
    for bad in forged:
        response = reviewer.post(f"/act/{bad}/", {"comment": "x"})
        assert response.status_code == 400, bad
        assert b"This link is not valid" in response.content
    assert _state(approval) == before


def test_a_link_after_the_task_moved_on_is_refused(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    # another decision path moved the task's version on (a stale e-mail)
    Task.objects.filter(pk=approval.task_id).update(version=approval.task_version + 1)
    before = _state(approval)
    response = _signed_in(main.users[REV]).post(links["approve"])
    assert response.status_code == 409 and b"moved on" in response.content
    assert _state(approval) == before


def test_a_link_of_a_canceled_task_is_refused(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    assert main.client(ADM).post(f"/api/v1/tasks/{approval.task_id}/cancel",
                                 {"reason": "customer withdrew"},
                                 format="json").status_code == 200
    before = _state(approval)
    response = _signed_in(main.users[REV]).post(links["approve"])
    assert response.status_code == 409 and b"already canceled" in response.content
    assert _state(approval) == before


def test_a_link_after_the_reviewer_lost_the_role_is_refused(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    Membership.objects.filter(user=main.users[REV]).update(role=Role.OPERATOR)
    before = _state(approval)
    response = _signed_in(main.users[REV]).post(links["approve"])
    assert response.status_code == 403 and b"no longer have a reviewer" in response.content
    assert _state(approval) == before


def test_an_expired_link_is_refused(main: Tenancy, waiting, settings: Any) -> None:
    approval, links, _ = waiting
    reviewer = _signed_in(main.users[REV])
    before = _state(approval)
    # the approval's SLA ran out (before the sweep expired it)
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=5))
    response = reviewer.post(links["approve"])
    assert response.status_code == 410 and b"expired" in response.content
    # an approval without an SLA: the link's own age limit
    Approval.objects.filter(pk=approval.pk).update(expires_at=None)
    settings.TETHER_DECISION_LINK_MAX_AGE_S = 0.001
    response = reviewer.post(links["approve"])
    assert response.status_code == 410 and b"too old" in response.content
    assert _state(approval) == before


def test_a_reject_link_asks_why_and_rejects(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    reviewer = _signed_in(main.users[REV])
    empty = reviewer.post(links["reject"], {"comment": ""})
    assert empty.status_code == 400 and approval.__class__.objects.get(
        pk=approval.pk).status == "pending"
    done = reviewer.post(links["reject"], {"comment": "too much for a scratch"})
    assert done.status_code == 200
    approval.refresh_from_db()
    assert (approval.status, approval.channel, approval.comment) == (
        "rejected", "email", "too much for a scratch")


def test_signing_in_first_comes_back_to_the_confirmation_page(main: Tenancy, waiting) -> None:
    approval, links, _ = waiting
    response = Client().get(links["approve"])
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/act/")
    assert _state(approval)[0] == "pending"


def test_a_question_is_answered_on_the_links_page(main: Tenancy) -> None:
    emails = _emails_on(main)
    task, question = main.waiting_for_input()
    drain()
    message = _mail_to(emails[REV])
    assert "How much should be refunded?" in message.body
    links = _links(message)
    reviewer = _signed_in(main.users[REV])
    page = reviewer.get(links["answer"])
    assert page.status_code == 200 and b"How much should be refunded?" in page.content
    assert reviewer.post(links["answer"], {"answer": "500 cents"}).status_code == 200
    question = Question.objects.get(pk=question.pk)
    assert (question.status, question.answer, question.channel) == ("answered", "500 cents",
                                                                     "email")
    assert Task.objects.get(pk=task.pk).status != TaskStatus.WAITING_FOR_INPUT
    replay = reviewer.post(links["answer"], {"answer": "again"})
    assert replay.status_code == 409
    assert Question.objects.get(pk=question.pk).answer == "500 cents"
