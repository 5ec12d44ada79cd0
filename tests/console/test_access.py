"""Who sees what in the console: sign-in, navigation by role, tenant scoping,
role checks on every action, CSRF, the security headers, and escaping of
untrusted (model and tool) output."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.models import Approval
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tests.factories import TenantFactory, make_user, submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db

APPROVAL_SCRIPT = [
    {
        "tool": "issue_refund",
        "args": {"order_id": "A-1", "amount_cents": 100},
        "reason": "refund it",
    },
    {"final": {"ok": True}},
]


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def status_of(task: Task) -> str:
    return Task.objects.get(pk=task.pk).status


@pytest.fixture
def other(world):  # type: ignore[no-untyped-def]
    """A second tenant with a reviewer and an operator."""
    from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure

    tenant = TenantFactory(name="t-other")
    demo_tools_ensure(tenant)
    demo_agent_ensure(tenant)
    return {
        "tenant": tenant,
        "reviewer": make_user(tenant, Role.REVIEWER),
        "operator": make_user(tenant, Role.OPERATOR),
    }


@pytest.mark.parametrize("path", ["/", "/tasks/", "/tasks/1/", "/inbox/", "/tools/", "/agents/"])
def test_anonymous_users_are_sent_to_sign_in(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_sign_in_with_the_form_lands_on_the_dashboard(client, world):
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b"Sign in" in page.content
    response = client.post(
        "/accounts/login/", {"username": "t-main-operator", "password": "pw-t-main-operator"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_user_without_a_tenant_is_told_so(client, django_user_model):
    user = django_user_model.objects.create_user("loner", password="pw")
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 403
    assert b"no tenant" in response.content


@pytest.mark.parametrize(
    "role, visible, hidden",
    [
        (Role.REQUESTER, ["Dashboard", "Tasks"], ["Inbox", "Tools", "Django admin"]),
        (Role.OPERATOR, ["Tasks", "Tools", "Agents"], ["Inbox", "Django admin"]),
        (Role.REVIEWER, ["Inbox", "Tasks", "Tools"], ["Django admin"]),
        # the Django admin is not tenant-scoped: superusers only
        (Role.ADMIN, ["Inbox", "Tools", "Agents"], ["Django admin"]),
    ],
)
def test_navigation_follows_the_role(world, role, visible, hidden):
    html = client_for(world.users[role]).get("/").content.decode()
    nav = html[html.index('<nav class="mainnav"') : html.index("</nav>")]
    for label in visible:
        assert f">{label}" in nav, label
    for label in hidden:
        assert f">{label}" not in nav, label


def test_the_inbox_is_for_reviewers_and_admins(world):
    assert client_for(world.users[Role.OPERATOR]).get("/inbox/").status_code == 403
    assert client_for(world.users[Role.REQUESTER]).get("/inbox/").status_code == 403
    assert client_for(world.users[Role.REVIEWER]).get("/inbox/").status_code == 200


def test_another_tenants_task_does_not_exist_for_you(world, other):
    task = submit(world.tenant, APPROVAL_SCRIPT, goal="tenant one's secret")
    drive(task.pk)
    approval = Approval.objects.get(task=task)
    outsider = client_for(other["reviewer"])
    for path in (
        f"/tasks/{task.pk}/",
        f"/tasks/{task.pk}/live/?after=0",
        f"/tasks/{task.pk}/events/?before=99",
    ):
        assert outsider.get(path).status_code == 404, path
    assert b"tenant one" not in outsider.get("/tasks/?q=secret").content
    assert b"tenant one" not in outsider.get("/inbox/").content
    assert (
        outsider.post(
            f"/inbox/approvals/{approval.pk}/approve/", {"expected_version": 2}
        ).status_code
        == 404
    )
    operator = client_for(other["operator"])
    assert operator.post(f"/tasks/{task.pk}/cancel/", {"expected_version": 2}).status_code == 404
    assert status_of(task) == TaskStatus.WAITING_FOR_APPROVAL
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_only_reviewers_and_admins_decide_approvals(world):
    task = submit(world.tenant, APPROVAL_SCRIPT)
    drive(task.pk)
    approval = Approval.objects.get(task=task)
    version = Task.objects.get(pk=task.pk).version
    for role in (Role.OPERATOR, Role.REQUESTER):
        c = client_for(world.users[role])
        for action in ("approve", "reject", "respond"):
            response = c.post(
                f"/inbox/approvals/{approval.pk}/{action}/",
                {"expected_version": version, "comment": "x", "output": "{}"},
            )
            assert response.status_code == 403, (role, action)
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_cancel_is_for_operators_admins_and_the_tasks_own_requester(world):
    mine = submit(world.tenant, [{"ask": "?"}], requester=world.users[Role.REQUESTER])
    theirs = submit(world.tenant, [{"ask": "?"}], requester=world.users[Role.ADMIN])
    drive(mine.pk)
    drive(theirs.pk)
    version = Task.objects.get(pk=mine.pk).version

    reviewer = client_for(world.users[Role.REVIEWER])
    assert (
        reviewer.post(f"/tasks/{mine.pk}/cancel/", {"expected_version": version}).status_code == 403
    )
    requester = client_for(world.users[Role.REQUESTER])
    assert (
        requester.post(f"/tasks/{theirs.pk}/cancel/", {"expected_version": version}).status_code
        == 403
    )
    assert status_of(theirs) == TaskStatus.WAITING_FOR_INPUT

    response = requester.post(f"/tasks/{mine.pk}/cancel/", {"expected_version": version})
    assert response.status_code == 302
    assert status_of(mine) == TaskStatus.CANCELED


def test_operator_only_actions_refuse_other_roles(world):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    version = Task.objects.get(pk=task.pk).version
    reviewer = client_for(world.users[Role.REVIEWER])
    assert (
        reviewer.post(f"/tasks/{task.pk}/resume/", {"expected_version": version}).status_code == 403
    )
    assert (
        reviewer.post(
            f"/tasks/{task.pk}/fail/", {"expected_version": version, "reason": "x"}
        ).status_code
        == 403
    )
    assert (
        reviewer.post("/tasks/cancel/", {"status": "active", "expected_count": 1}).status_code
        == 403
    )
    assert status_of(task) == TaskStatus.WAITING_FOR_INPUT


def test_admin_pages_are_for_admins(world):
    for role in (Role.OPERATOR, Role.REVIEWER, Role.REQUESTER):
        c = client_for(world.users[role])
        assert c.get("/tools/new/").status_code == 403
        assert c.get("/agents/new/").status_code == 403
        assert c.get("/tools/lookup_order/edit/").status_code == 403
        assert c.post("/agents/support/edit/", {"description": "hijacked"}).status_code == 403


def test_every_form_needs_a_csrf_token(world):
    task = submit(world.tenant, [{"ask": "?"}])
    drive(task.pk)
    c = Client(enforce_csrf_checks=True)
    c.force_login(world.users[Role.OPERATOR])
    version = Task.objects.get(pk=task.pk).version
    assert c.post(f"/tasks/{task.pk}/cancel/", {"expected_version": version}).status_code == 403
    assert status_of(task) == TaskStatus.WAITING_FOR_INPUT
    page = c.get(f"/tasks/{task.pk}/").content.decode()
    assert page.count('name="csrfmiddlewaretoken"') >= 2  # the cancel and fail forms
    assert '"X-CSRFToken"' in page  # htmx requests carry it as a header


def test_console_pages_send_a_strict_content_security_policy(world):
    response = client_for(world.users[Role.ADMIN]).get("/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db(transaction=True)
def test_model_and_tool_output_is_escaped_everywhere(world):
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    task = submit(
        world.tenant,
        [
            {"tool": "lookup_order", "args": {"order_id": "NOPE-1"}, "reason": evil},
            {
                "tool": "issue_refund",
                "args": {"order_id": "A-1", "amount_cents": 100, "reason": "ok"},
                "reason": evil,
                "cites": ["step:1", "goal"],
            },
        ],
        goal=evil,
    )
    drive(task.pk)
    step = Step.objects.get(task=task, step_no=1)
    assert "NOPE-1" in str(step.error)  # the tool's own error message echoes model input
    reviewer = client_for(world.users[Role.REVIEWER])
    for path in (
        f"/tasks/{task.pk}/",
        f"/tasks/{task.pk}/live/?after=0",
        "/tasks/",
        "/inbox/",
        "/",
    ):
        html = reviewer.get(path).content.decode()
        assert "<script>alert" not in html, path
        assert "<img src=x" not in html, path
    html = reviewer.get("/inbox/").content.decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
