"""`/api/v1/memory`: every input validated (400 with field errors), nothing of
another tenant visible (404), versions readable, changes attributed and in the
audit log, erasure by subject."""
from __future__ import annotations

from typing import Any

import pytest

from audit_app.models import AuditEntry
from memory_app.models import MemoryItem, MemoryProposal, MemoryVersion
from retention_app.erasure_parts import subject_reference
from tasks_app.models import Role
from tests.api.conftest import Tenancy, make_tenancy
from tests.factories import submit

ADM, OP, REV = Role.ADMIN, Role.OPERATOR, Role.REVIEWER
FACT = {"scope": "subject", "subject": "cust-1", "kind": "fact", "text": "Lives in Porto"}


@pytest.fixture
def main(world: Any) -> Tenancy:
    return Tenancy(tenant=world.tenant, users=world.users, hanging_url="")


@pytest.fixture
def other(db: Any) -> Tenancy:
    return make_tenancy("t-other", "")


def _errors(response) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    assert response.status_code == 400, response.content
    return response.json()["error"]["details"]


def _post(t: Tenancy, body: dict[str, Any], role: str = ADM):  # type: ignore[no-untyped-def]
    return t.client(role).post("/api/v1/memory", body, format="json")


@pytest.mark.parametrize(("body", "field"), [
    ({**FACT, "text": ""}, "text"),
    ({**FACT, "text": "x" * 2001}, "text"),
    ({**FACT, "kind": "opinion"}, "kind"),
    ({**FACT, "scope": "world"}, "scope"),
    ({**FACT, "subject": ""}, "subject"),
    ({**FACT, "subject": " padded"}, "subject"),
    ({k: v for k, v in FACT.items() if k != "subject"}, "subject"),
    ({**FACT, "scope": "tenant"}, "subject"),  # a tenant's item has no subject
    ({"scope": "agent", "kind": "fact", "text": "t"}, "agent"),
    ({"scope": "agent", "agent": "nobody", "kind": "fact", "text": "t"}, "agent"),
    ({**FACT, "kind": "artifact"}, "uri"),
    ({**FACT, "uri": "https://example.com/x"}, "uri"),
    ({**FACT, "kind": "artifact", "uri": "not a uri"}, "uri"),
    ({**FACT, "tags": ["a"] * 11}, "tags"),
    ({**FACT, "tags": [""]}, "tags"),
    ({**FACT, "value": "v" * 9000}, "value"),
    ({**FACT, "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({**FACT, "expires_at": "soon"}, "expires_at"),
])
def test_every_input_is_validated_with_field_errors(main, body, field):
    assert field in _errors(_post(main, body))
    assert not MemoryItem.objects.exists()


def test_write_read_change_and_the_versions_stay_readable(main):
    created = _post(main, {**FACT, "tags": ["address"], "value": {"city": "Porto"}})
    assert created.status_code == 201, created.content
    item = created.json()
    assert (item["cite_id"], item["created_by"], item["source"]) == (
        f"mem:{item['id']}@1", main.users[ADM].username, None)
    url = f"/api/v1/memory/{item['id']}"

    changed = main.client(OP).patch(url, {"text": "Lives in Lisbon", "expected_version": 1},
                                    format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["version"], changed.json()["updated_by"]) == (
        2, main.users[OP].username)
    stale = main.client(OP).patch(url, {"text": "Lives in Faro", "expected_version": 1},
                                  format="json")
    assert stale.status_code == 409
    assert "scope" in _errors(main.client(OP).patch(url, {"scope": "tenant"}, format="json"))

    versions = main.client(REV).get(f"{url}/versions").json()
    assert [(v["version"], v["text"], v["author"]) for v in versions] == [
        (2, "Lives in Lisbon", main.users[OP].username),
        (1, "Lives in Porto", main.users[ADM].username)]
    assert main.client(REV).get(f"{url}/versions/1").json()["value"] == {"city": "Porto"}
    assert main.client(REV).get(f"{url}/versions/3").status_code == 404

    actions = list(AuditEntry.objects.filter(kind="memory").order_by("id")
                   .values_list("action", "actor"))
    assert actions == [("created", main.users[ADM].username),
                       ("updated", main.users[OP].username)]
    assert "Porto" not in str(AuditEntry.objects.filter(kind="memory").values_list("diff"))


def test_filters_search_and_pages(main):
    for i in range(3):
        _post(main, {**FACT, "text": f"Order {i} arrived damaged"})
    _post(main, {"scope": "tenant", "kind": "preference", "text": "Customers prefer e-mail"})
    _post(main, {**FACT, "subject": "cust-2", "text": "Prefers phone calls"})
    client = main.client(OP)

    def texts(query: str) -> list[str]:
        response = client.get(f"/api/v1/memory{query}")
        assert response.status_code == 200, response.content
        return [r["text"] for r in response.json()["results"]]

    assert texts("?subject=cust-2") == ["Prefers phone calls"]
    assert texts("?scope=tenant") == ["Customers prefer e-mail"]
    assert texts("?kind=preference") == ["Customers prefer e-mail"]
    assert texts("?q=damaged&subject=cust-1") == [f"Order {i} arrived damaged"
                                                   for i in (2, 1, 0)]
    assert texts("?q=nothing-like-it") == []
    page = client.get("/api/v1/memory?limit=2").json()
    assert len(page["results"]) == 2 and page["next"]
    assert len(client.get(page["next"]).json()["results"]) == 2
    for bad in ("?scope=world", "?kind=", "?limit=0", "?cursor=zzz"):
        assert client.get(f"/api/v1/memory{bad}").status_code == 400, bad


def test_nothing_of_another_tenant_is_visible(main, other):
    mine = _post(main, FACT).json()
    theirs = other.client(ADM)
    assert theirs.get("/api/v1/memory").json()["results"] == []
    assert theirs.get("/api/v1/memory?subject=cust-1").json()["results"] == []
    for method, suffix, body in (("get", "", None), ("patch", "", {"text": "x"}),
                                 ("delete", "", None), ("get", "/versions", None),
                                 ("get", "/versions/1", None)):
        response = getattr(theirs, method)(f"/api/v1/memory/{mine['id']}{suffix}", body,
                                          format="json")
        assert response.status_code == 404, (method, suffix)
    assert theirs.delete("/api/v1/memory?subject=cust-1").json()["items"] == 0
    assert MemoryItem.objects.get().text == "Lives in Porto"
    task = submit(main.tenant, [{"final": {}}])
    proposal = MemoryProposal.objects.create(tenant=main.tenant, task=task, step_no=1,
                                             scope="tenant", kind="fact", text="t")
    for action in ("accept", "reject"):
        response = theirs.post(f"/api/v1/memory/proposals/{proposal.pk}/{action}", {},
                               format="json")
        assert response.status_code == 404
    assert theirs.get("/api/v1/memory/proposals").json()["results"] == []


def test_erasing_a_subject_deletes_its_items_versions_and_proposals_attributed(main):
    first = _post(main, FACT).json()
    main.client(ADM).patch(f"/api/v1/memory/{first['id']}", {"text": "Lives in Faro"},
                           format="json")
    _post(main, {**FACT, "text": "Has a dog"})
    kept = _post(main, {**FACT, "subject": "cust-2"}).json()
    task = submit(main.tenant, [{"final": {}}], subject="cust-1")
    MemoryProposal.objects.create(tenant=main.tenant, task=task, step_no=1, scope="subject",
                                  subject="cust-1", kind="fact", text="t")
    assert "subject" in _errors(main.client(ADM).delete("/api/v1/memory"))
    assert main.client(OP).delete("/api/v1/memory?subject=cust-1").status_code == 403

    erased = main.client(ADM).delete("/api/v1/memory?subject=cust-1")
    assert erased.json() == {"items": 2, "versions": 3, "proposals": 1}
    assert list(MemoryItem.objects.values_list("id", flat=True)) == [kept["id"]]
    assert MemoryVersion.objects.filter(item_id=first["id"]).count() == 0
    entry = AuditEntry.objects.get(kind="memory", action="erased")
    # named by a digest: the entry outlives the erasure, the subject's name must not
    assert (entry.name, entry.actor) == (subject_reference("cust-1"), main.users[ADM].username)


def test_a_scope_holds_at_most_the_configured_number_of_items(main, settings):
    settings.TETHER = {**settings.TETHER, "MEMORY_MAX_ITEMS_PER_SCOPE": 2}
    assert _post(main, FACT).status_code == 201
    assert _post(main, FACT).status_code == 201
    full = _post(main, FACT)
    assert full.status_code == 409 and full.json()["error"]["code"] == "memory_full"
    assert _post(main, {**FACT, "subject": "cust-2"}).status_code == 201


def test_a_task_takes_a_subject_and_is_found_by_it(main):
    client = main.client(ADM)
    made = client.post("/api/v1/tasks", {"agent": "support", "goal": "g", "subject": "cust-9",
                                         "script": [{"final": {}}]}, format="json")
    assert made.status_code == 201 and made.json()["subject"] == "cust-9"
    client.post("/api/v1/tasks", {"agent": "support", "goal": "g", "script": [{"final": {}}]},
                format="json")
    found = client.get("/api/v1/tasks?subject=cust-9").json()["results"]
    assert [t["id"] for t in found] == [made.json()["id"]]
    for bad in (" x", "a\nb", "x" * 201):
        response = client.post("/api/v1/tasks", {"agent": "support", "goal": "g",
                                                 "subject": bad, "script": []}, format="json")
        assert "subject" in _errors(response), bad


def test_a_retry_keeps_the_subject_of_the_task_it_retries(main):
    client = main.client(ADM)
    made = client.post("/api/v1/tasks", {"agent": "support", "goal": "g", "subject": "cust-9",
                                         "script": [{"final": {}}]}, format="json").json()
    assert client.post(f"/api/v1/tasks/{made['id']}/cancel", {"reason": "wrong"},
                       format="json").status_code == 200
    retried = client.post(f"/api/v1/tasks/{made['id']}/retry", {}, format="json")
    assert retried.status_code == 201, retried.content
    assert retried.json()["subject"] == "cust-9"
