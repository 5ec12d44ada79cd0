"""An approval routed to a reviewer group is e-mailed to that group's members
only (and after a reassignment, its SLA warning to the new assignee only)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.utils import timezone

from accounts_app.models import Role
from approvals_app.models import Approval
from approvals_app.services.routing import approval_reassign
from approvals_app.services.rules import group_save
from foundations.actors import SYSTEM
from tasks_app.runner.recovery import recovery_sweep
from tests.factories import actor_of, make_user

from .conftest import ADM, Tenancy, drain

pytestmark = pytest.mark.django_db


def test_a_routed_approval_is_emailed_to_its_group_only(main: Tenancy) -> None:
    lead = make_user(main.tenant, Role.REVIEWER, "lead")
    for user in [*main.users.values(), lead]:
        get_user_model().objects.filter(pk=user.pk).update(email=f"{user.username}@x.example")
    main.client(ADM).put("/api/v1/notifications/email", {"email_reviewers": True},
                         format="json")
    group_save(tenant_id=main.tenant.pk, name="leads",
               data={"members": ["lead"], "agents": ["support"]}, actor=SYSTEM, create=True)
    _task, approval = main.waiting_for_approval()
    drain()
    [message] = mail.outbox
    assert message.to == ["lead@x.example"]
    assert approval.group is not None and approval.group.name == "leads"

    # handed to the tenant's reviewer: the 80 % reminder goes to them alone
    reviewer = main.users[Role.REVIEWER]
    approval_reassign(approval_id=approval.pk, tenant_id=main.tenant.pk, actor=actor_of(lead),
                      to_user=reviewer.username)
    now = timezone.now()
    Approval.objects.filter(pk=approval.pk).update(
        created_at=now - timedelta(seconds=90), expires_at=now + timedelta(seconds=10))
    recovery_sweep()
    drain()
    assert [m.to for m in mail.outbox[1:]] == [[f"{reviewer.username}@x.example"]]
