"""The console's Memory pages and the inbox's proposed writes, through the
Django test client: roles, search, an item's history with its source link,
edit, delete, erasure, accept and reject."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from foundations.actors import SYSTEM
from memory_app.models import MemoryItem, MemoryProposal, ProposalStatus
from memory_app.services import item_create
from tests.factories import submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # type: ignore[no-untyped-def]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _as(world, role: str) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(world.users[role])
    return client


def _item(world, text: str = "Lives in Porto", subject: str = "cust-1") -> MemoryItem:  # type: ignore[no-untyped-def]
    return item_create(tenant_id=world.tenant.pk, actor=SYSTEM, fields={
        "scope": "subject", "subject": subject, "kind": "fact", "text": text})


def test_the_memory_pages_search_filter_and_show_an_items_history(world):
    item = _item(world)
    _item(world, "Prefers phone calls", subject="cust-2")
    client = _as(world, Role.REVIEWER)
    page = client.get("/memory/?subject=cust-1").content.decode()
    assert "Lives in Porto" in page and "Prefers phone calls" not in page
    assert "Erase the memory" not in page  # admins only
    found = client.get("/memory/?q=phone").content.decode()
    assert "Prefers phone calls" in found and "Lives in Porto" not in found
    assert "Lives in Porto" in client.get(f"/memory/{item.pk}/").content.decode()
    assert _as(world, Role.REQUESTER).get("/memory/").status_code == 403
    # a reviewer reads, and may not write
    assert client.post("/memory/new/", {"scope": "tenant", "kind": "fact",
                                        "text": "x"}).status_code == 403


def test_edit_delete_and_erase_from_the_console(world):
    item = _item(world)
    operator = _as(world, Role.OPERATOR)
    bad = operator.post(f"/memory/{item.pk}/", {"text": "", "kind": "fact"})
    assert bad.status_code == 400
    saved = operator.post(f"/memory/{item.pk}/", {"text": "Lives in Faro", "kind": "fact"})
    assert saved.status_code == 302
    page = operator.get(f"/memory/{item.pk}/").content.decode()
    assert "Lives in Faro" in page and "Lives in Porto" in page  # both versions
    assert "written by a person" in page
    made = operator.post("/memory/new/", {"scope": "subject", "subject": "cust-1",
                                          "kind": "preference", "text": "Prefers e-mail"})
    assert made.status_code == 302
    operator.post(f"/memory/{item.pk}/delete/")
    assert not MemoryItem.objects.filter(pk=item.pk).exists()

    assert operator.post("/memory/erase/", {"subject": "cust-1"}).status_code == 403
    erased = _as(world, Role.ADMIN).post("/memory/erase/", {"subject": "cust-1"})
    assert erased.status_code == 302
    assert not MemoryItem.objects.exists()


def test_proposed_writes_are_listed_with_the_approvals_and_decided_there(world):
    task = submit(world.tenant, [{"final": {}}], subject="cust-1")
    keep, drop = (MemoryProposal.objects.create(
        tenant=world.tenant, task=task, step_no=1, scope="subject", subject="cust-1",
        kind="preference", text=text) for text in ("Prefers window seats", "Likes spam"))
    reviewer = _as(world, Role.REVIEWER)
    inbox = reviewer.get("/inbox/").content.decode()
    assert "Memory writes" in inbox and "Prefers window seats" in inbox
    assert reviewer.post(f"/memory/proposals/{keep.pk}/accept/",
                         {"text": "Prefers window seats, front rows"}).status_code == 302
    assert reviewer.post(f"/memory/proposals/{drop.pk}/reject/", {"note": "no"}).status_code == 302
    assert list(MemoryItem.objects.values_list("text", flat=True)) == [
        "Prefers window seats, front rows"]
    drop.refresh_from_db()
    assert drop.status == ProposalStatus.REJECTED
    assert "Likes spam" not in reviewer.get("/inbox/").content.decode()
    assert _as(world, Role.OPERATOR).post(f"/memory/proposals/{drop.pk}/accept/").status_code == 403


def test_the_agent_form_sets_the_memory_policy(world):
    admin = _as(world, Role.ADMIN)
    page = admin.get("/agents/support/edit/")
    assert page.status_code == 200 and 'name="memory_policy"' in page.content.decode()
    form = page.context["form"]
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(memory_policy="propose", per_tool="{}", result_schema="{}")
    saved = admin.post("/agents/support/edit/", data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    world.tenant.agents.get(name="support").refresh_from_db()
    assert world.tenant.agents.get(name="support").memory_policy == "propose"
