"""`/api/v1/memory`: every input validated (400 with field errors), nothing of
another tenant visible (404), versions readable, changes attributed and in the
audit log, erasure by subject."""
from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from audit_app.models import AuditEntry
from memory_app.models import MemoryItem, MemoryProposal, MemoryVersion
from retention_app.erasure_parts import subject_reference
from tasks_app.models import Task
from tests.api.conftest import Tenancy, make_tenancy
from tests.factories import AgentFactory, submit

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
    task = submit(main.tenant, [{"final": {}}], subject="cust-1")
    assert theirs.get("/api/v1/tasks?subject=cust-1").json()["results"] == []
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
        assert "subject" in str(_errors(client.post("/api/v1/tasks/batch", {"tasks": [
            {"agent": "support", "goal": "g", "subject": bad, "script": [],
             "idempotency_key": "k-1"}]}, format="json"))), bad
        assert "subject" in _errors(client.get("/api/v1/tasks", {"subject": bad})), bad
    workflow_run = client.post("/api/v1/tasks", {"workflow": "any", "subject": "cust-9"},
                               format="json")
    assert "subject" in _errors(workflow_run)
    assert Task.objects.filter(tenant=main.tenant).count() == 2  # the two good ones


def test_a_retry_keeps_the_subject_of_the_task_it_retries(main):
    client = main.client(ADM)
    made = client.post("/api/v1/tasks", {"agent": "support", "goal": "g", "subject": "cust-9",
                                         "script": [{"final": {}}]}, format="json").json()
    assert client.post(f"/api/v1/tasks/{made['id']}/cancel", {"reason": "wrong"},
                       format="json").status_code == 200
    retried = client.post(f"/api/v1/tasks/{made['id']}/retry", {}, format="json")
    assert retried.status_code == 201, retried.content
    assert retried.json()["subject"] == "cust-9"


@pytest.mark.parametrize(("body", "field"), [
    ({"text": ""}, "text"),
    ({"text": "x" * 2001}, "text"),
    ({"kind": "opinion"}, "kind"),
    ({"kind": "artifact"}, "uri"),  # an artifact needs its URI
    ({"tags": ["a"] * 11}, "tags"),
    ({"expires_at": "soon"}, "expires_at"),
    ({"expected_version": 0}, "expected_version"),
    ({"subject": "cust-2"}, "subject"),  # an item's scope never changes
    ({"agent": "support"}, "agent"),
    ({"colour": "red"}, "colour"),
])
def test_every_change_is_validated_and_a_refused_one_changes_nothing(main, body, field):
    item = _post(main, {**FACT, "tags": ["address"]}).json()
    response = main.client(OP).patch(f"/api/v1/memory/{item['id']}", body, format="json")
    assert field in _errors(response)
    row = MemoryItem.objects.get()
    assert (row.version, row.text, row.subject, row.kind, row.tags) == (
        1, "Lives in Porto", "cust-1", "fact", ["address"])
    assert MemoryVersion.objects.count() == 1
    assert not AuditEntry.objects.filter(kind="memory", action="updated").exists()


@pytest.mark.parametrize(("query", "field"), [
    ("scope=world", "scope"), ("kind=", "kind"), ("kind=opinion", "kind"),
    ("subject=%20padded", "subject"), ("q=" + "x" * 501, "q"), ("tag=" + "t" * 65, "tag"),
    ("agent=" + "a" * 65, "agent"), ("limit=0", "limit"), ("cursor=zzz", "cursor"),
])
def test_every_list_filter_is_validated_with_its_field(main, query, field):
    for url in ("/api/v1/memory", "/api/v1/memory/proposals"):
        if url.endswith("proposals") and field not in ("limit", "cursor"):
            continue  # the proposals list takes only its page
        assert field in _errors(main.client(OP).get(f"{url}?{query}")), (url, query)


def test_a_review_is_validated_and_a_decided_proposal_stays_decided(main):
    task = submit(main.tenant, [{"final": {}}], subject="cust-1")
    proposal = MemoryProposal.objects.create(tenant=main.tenant, task=task, step_no=1,
                                             scope="subject", subject="cust-1", kind="fact",
                                             text="Hates aisles")
    reviewer = main.client(REV)
    accept = f"/api/v1/memory/proposals/{proposal.pk}/accept"
    reject = f"/api/v1/memory/proposals/{proposal.pk}/reject"
    for body, field in (({"text": ""}, "text"), ({"kind": "opinion"}, "kind"),
                        ({"tags": [""]}, "tags"), ({"value": "v" * 9000}, "value"),
                        ({"scope": "tenant"}, "scope"), ({"subject": "cust-2"}, "subject")):
        assert field in _errors(reviewer.post(accept, body, format="json")), body
    assert "note" in _errors(reviewer.post(reject, {"note": "n" * 1001}, format="json"))
    proposal.refresh_from_db()
    assert proposal.status == "open" and not MemoryItem.objects.exists()

    assert reviewer.post(reject, {"note": "not a fact"}, format="json").status_code == 200
    # a rejected proposal is never written, whoever tries afterwards
    for url in (accept, reject):
        response = main.client(ADM).post(url, {}, format="json")
        assert response.status_code == 409, (url, response.content)
    assert not MemoryItem.objects.exists() and not MemoryVersion.objects.exists()
    assert reviewer.get("/api/v1/memory/proposals").json()["results"] == []
    proposal.refresh_from_db()
    assert (proposal.status, proposal.note) == ("rejected", "not a fact")


def test_another_tenants_agent_is_no_scope_and_no_filter(main, other):
    AgentFactory(tenant=other.tenant, name="theirs-only", tools=["lookup_order"])
    mine = main.client(ADM)
    response = _post(main, {"scope": "agent", "agent": "theirs-only", "kind": "fact",
                            "text": "t"})
    assert "agent" in _errors(response)
    assert not MemoryItem.objects.exists()
    theirs = other.client(ADM).post("/api/v1/memory", {
        "scope": "agent", "agent": "theirs-only", "kind": "fact", "text": "Their secret"},
        format="json")
    assert theirs.status_code == 201, theirs.content
    assert mine.get("/api/v1/memory?agent=theirs-only").json()["results"] == []
    assert mine.get("/api/v1/memory?scope=agent").json()["results"] == []
    assert mine.get("/api/v1/memory?q=secret").json()["results"] == []


@pytest.mark.parametrize("policy", ["sometimes", "", None, 3])
def test_an_agents_memory_policy_is_validated(main, policy):
    response = main.client(ADM).post("/api/v1/agents", {
        "name": "noter", "model": {"backend": "scripted", "name": "scripted"},
        "tools": ["lookup_order"], "memory_policy": policy}, format="json")
    assert "memory_policy" in _errors(response)
    assert not main.tenant.agents.filter(name="noter").exists()
    assert main.client(ADM).patch("/api/v1/agents/support", {"memory_policy": policy},
                                  format="json").status_code == 400
    assert main.tenant.agents.get(name="support").memory_policy == "off"
