"""Production hardening seen from the browser's side: sign-in throttling per
user name and address (django-axes), and a Django admin for superusers only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def sign_in(client: Client, username: str, password: str, address: str) -> Any:
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def test_ten_wrong_passwords_lock_that_user_name_from_that_address(world, settings):
    assert settings.AXES_FAILURE_LIMIT == 10  # the documented default
    user = world.users[Role.OPERATOR]
    right = "pw-" + user.username
    attacker = Client()
    for attempt in range(9):
        page = sign_in(attacker, user.username, f"guess-{attempt}", "203.0.113.7")
        assert page.status_code == 200 and b"Please enter a correct" in page.content
    tenth = sign_in(attacker, user.username, "guess-9", "203.0.113.7")
    assert tenth.status_code == 429

    # Now even the right password is refused from that address, with a clear message.
    refused = sign_in(attacker, user.username, right, "203.0.113.7")
    assert refused.status_code == 429
    html = refused.content.decode()
    assert "Too many failed sign-ins" in html and user.username in html
    assert f"refused for {settings.AXES_COOLOFF_TIME.seconds // 60} minutes" in html
    assert not signed_in(attacker)

    # The same user from another address, and another user from that address, still sign in.
    elsewhere = Client()
    assert sign_in(elsewhere, user.username, right, "198.51.100.4").status_code == 302
    assert signed_in(elsewhere)
    colleague = world.users[Role.REVIEWER]
    neighbour = Client()
    answer = sign_in(neighbour, colleague.username, "pw-" + colleague.username, "203.0.113.7")
    assert answer.status_code == 302 and signed_in(neighbour)


def test_the_api_key_of_a_locked_out_user_still_works(world):
    """API keys are not passwords: the sign-in throttle does not touch them."""
    user = world.users[Role.OPERATOR]
    for attempt in range(10):
        sign_in(Client(), user.username, f"guess-{attempt}", "127.0.0.1")
    assert sign_in(Client(), user.username, "pw-" + user.username, "127.0.0.1").status_code == 429
    api = APIClient(REMOTE_ADDR="127.0.0.1")
    api.credentials(HTTP_AUTHORIZATION="Token " + api_key_create(user=user))
    assert api.get("/api/v1/tasks").status_code == 200


def test_a_tenant_admin_gets_no_django_admin(world, django_user_model):
    admin = world.users[Role.ADMIN]
    assert not admin.is_staff  # a tenant's admin is not Django staff
    c = Client()
    c.force_login(admin)
    for path in ("/admin/", "/admin/tasks_app/task/", "/admin/auth/user/"):
        answer = c.get(path)
        assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/"), path
    # even made staff by hand, only a superuser gets in
    admin.is_staff = True
    admin.save()
    assert c.get("/admin/").status_code == 302

    root = django_user_model.objects.create_superuser("root", password="pw")
    c.force_login(root)
    assert c.get("/admin/").status_code == 200
