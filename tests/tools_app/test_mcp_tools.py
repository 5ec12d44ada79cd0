"""MCP servers as a tool source, against a real MCP server built with the SDK
(`tests.fakes.mcp_server`, its own process): registration, the tools it
lists, calls through the ledger, approval of unconfirmed tools, refreshes,
the outbound-address policy and secret headers."""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.services.accounts import api_key_create
from accounts_app.services.secrets import secret_create
from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from audit_app.models import AuditEntry
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepStatus, Task
from tests.factories import actor_of, submit
from tests.fakes.mcp_process import McpTestServer, start_mcp_server
from tests.fakes.runtime import add_agent, assert_log_consistent
from tests.helpers import drive
from tools_app.models import LedgerStatus, McpServer, Review, Tool, ToolExecution
from tools_app.outbound import REFUSED
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"ok": True}}
TOKEN = "s3cret-mcp-token"


def _admin(world: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users['admin'])}")
    return client


def _register(world: Any, server: McpTestServer, **extra: Any) -> dict[str, Any]:
    response = _admin(world).post("/api/v1/mcp-servers",
                                  {"name": "shop", "url": server.url, **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _confirm(world: Any, name: str, **changes: Any) -> dict[str, Any]:
    response = _admin(world).patch(f"/api/v1/tools/{name}", changes, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def _agent(world: Any) -> None:
    add_agent(world.tenant, "mcp-agent", ["shop__lookup", "shop__record", "shop__refuse"])


def _run(world: Any, *calls: dict[str, Any]) -> Task:
    task = submit(world.tenant, [*calls, FINAL], agent="mcp-agent")
    return drive(task.pk)


LOOKUP = {"tool": "shop__lookup", "args": {"order_id": "A-1"}}
RECORD = {"tool": "shop__record", "args": {"note": "called back"}}


def test_registration_lists_the_servers_tools_with_their_schemas(world, mcp_server):
    body = _register(world, mcp_server)

    changes = body["changes"]
    assert sorted(changes["new"]) == ["shop__liar", "shop__lookup", "shop__record",
                                      "shop__refuse"]
    skipped = {s["tool"]: s["reason"] for s in changes["skipped"]}
    assert "not a function name" in skipped["odd.name"]
    # a schema Tether refuses costs that tool only, not the registration
    assert "input schema" in skipped["hostile"] and "RE2" in skipped["hostile"]
    assert body["server"]["name"] == "shop" and body["server"]["url"] == mcp_server.url

    lookup = Tool.objects.get(tenant=world.tenant, name="shop__lookup")
    assert lookup.kind == "mcp" and lookup.target == "lookup" and lookup.review == Review.NEW
    assert lookup.args_schema["properties"]["order_id"]["type"] == "string"
    assert lookup.args_schema["required"] == ["order_id"]
    assert lookup.result_schema["required"] == ["order_id", "status"]  # the output schema
    assert lookup.mcp_hints == {"readOnlyHint": True}
    record = Tool.objects.get(tenant=world.tenant, name="shop__record")
    assert record.mcp_hints == {"idempotentHint": True, "destructiveHint": False}
    # The hints only prefill the settings; until an admin saves them, both are plain
    # writes that need approval.
    assert (lookup.side_effect, record.side_effect) == ("read", "idempotent_write")
    specs = tool_specs(tenant_id=world.tenant.pk)
    for name in ("shop__lookup", "shop__record"):
        assert specs[name].side_effect == "write" and specs[name].requires_approval

    listed = _admin(world).get("/api/v1/tools/shop__record").json()
    assert listed["mcp_server"] == "shop" and listed["review"] == "new"
    server = _admin(world).get("/api/v1/mcp-servers/shop").json()
    assert {t["name"] for t in server["tools"]} == {"shop__liar", "shop__lookup",
                                                      "shop__record", "shop__refuse"}


def test_a_task_calls_each_tool_through_the_ledger(world, mcp_server):
    _register(world, mcp_server)
    for name in ("shop__lookup", "shop__record", "shop__refuse"):
        confirmed = _confirm(world, name)
        assert confirmed["review"] == ""
    _agent(world)

    task = _run(world, LOOKUP, RECORD, RECORD)

    assert task.status == TaskStatus.SUCCEEDED, task.failure_reason
    lookup, first, second = (Step.objects.get(task=task, step_no=n) for n in (1, 2, 3))
    assert lookup.status == StepStatus.SUCCEEDED
    assert lookup.output == {"order_id": "A-1", "status": "delivered"}
    assert first.output == {"receipt": f"r-{first.idempotency_key[:8]}", "note": "called back"}
    for step in (lookup, first, second):
        ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
        assert ledger.status == LedgerStatus.SUCCEEDED and ledger.result == step.output
    # The key of each call travelled in the request's _meta, one effect per key.
    calls = mcp_server.calls_of("record")
    assert [c["key"] for c in calls] == [first.idempotency_key, second.idempotency_key]
    assert mcp_server.state()["effects"] == {first.idempotency_key: 1, second.idempotency_key: 1}
    assert mcp_server.calls_of("lookup")[0]["key"] == lookup.idempotency_key
    # One pooled session served the calls (and the registration's listing).
    assert len({h["mcp-session-id"] for h in mcp_server.state()["headers"]}) == 1
    assert_log_consistent(task.pk)


def test_a_tool_error_goes_back_to_the_model_as_a_business_error(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__refuse", side_effect="read", requires_approval=False)
    _agent(world)

    task = _run(world, {"tool": "shop__refuse", "args": {"reason": "out of stock"}})

    assert task.status == TaskStatus.SUCCEEDED  # the model got the error and went on
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "tool_error"
    assert len(mcp_server.calls_of("refuse")) == 1  # a business error is not retried


def test_an_answer_past_the_response_limit_is_not_read(world, mcp_server, settings):
    """The server is the tenant's: its answer is read up to TETHER_MAX_RESPONSE_BYTES
    (an event at a time, on a stream), never whole first, and the call ends then."""
    _register(world, mcp_server)
    _confirm(world, "shop__record", requires_approval=False, max_retries=0, timeout_s=30)
    _agent(world)
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 20_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}

    task = _run(world, {"tool": "shop__record", "args": {"note": "n" * 30_000}})

    step = Step.objects.get(task=task, step_no=1)
    assert step.status != StepStatus.SUCCEEDED, step.error
    assert "larger than 20000 bytes" in json.dumps(step.error), step.error
    assert len(mcp_server.calls_of("record")) == 1  # it answered: what it sent was not read


def test_structured_output_is_checked_against_the_output_schema(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__liar", side_effect="read", requires_approval=False)
    add_agent(world.tenant, "mcp-agent", ["shop__liar"])

    task = _run(world, {"tool": "shop__liar", "args": {"order_id": "A-1"}})

    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "invalid_result"
    assert "refund_id" in json.dumps(step.error["errors"])


@pytest.mark.system  # starts an MCP server of its own
def test_a_server_that_went_away_is_a_transient_error_nothing_was_sent(world, tmp_path,
                                                                     mcp_sessions):
    own = start_mcp_server(tmp_path)  # this test kills its server
    try:
        _register(world, own)
        _confirm(world, "shop__lookup", max_retries=1)
        _agent(world)
    finally:
        own.proc.kill()

    task = _run(world, LOOKUP)

    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "connect_error"
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert [a["outcome"] for a in ledger.attempts] == ["transient", "transient"]  # retried


def test_a_server_that_never_answers_the_handshake_is_transient_and_let_go(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__lookup", timeout_s=1.0, max_retries=1)
    _agent(world)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        assert _admin(world).patch("/api/v1/mcp-servers/shop", {"url": url},
                                   format="json").status_code == 200
        task = _run(world, LOOKUP)

    step = Step.objects.get(task=task, step_no=1)
    assert step.error["type"] == "connect_error" and "handshake" in step.error["message"]
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert [a["outcome"] for a in ledger.attempts] == ["transient", "transient"]


def test_a_plain_write_without_an_answer_in_time_is_uncertain_never_replayed(world, mcp_server,
                                                                             tmp_path):
    _register(world, mcp_server)
    _confirm(world, "shop__record", side_effect="write", requires_approval=False,
             timeout_s=1.0, max_retries=3)
    _agent(world)
    held = {"tool": "shop__record", "args": {"note": "n", "gate": str(tmp_path / "never")}}

    task = _run(world, held)

    assert task.status == TaskStatus.WAITING_FOR_RECONCILIATION
    step = Step.objects.get(task=task, step_no=1)
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == LedgerStatus.UNCERTAIN
    assert len(mcp_server.calls_of("record")) == 1


def test_arguments_are_checked_against_the_servers_schema_before_any_call(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__lookup")
    _agent(world)

    task = _run(world, {"tool": "shop__lookup", "args": {"order": 5}})

    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED
    assert mcp_server.calls_of("lookup") == []


def test_an_unconfirmed_write_waits_for_approval_and_saving_it_confirms(world, mcp_server):
    _register(world, mcp_server)
    _agent(world)

    task = _run(world, RECORD)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    approval = Approval.objects.get(task=task)
    assert approval.tool == "shop__record"
    assert mcp_server.calls_of("record") == []  # nothing reached the server before approval

    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk,
                    actor=actor_of(world.users["reviewer"]), decision="approve", comment="ok",
                    expected_version=task.version)
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_reason
    step = Step.objects.get(task=task, step_no=1)
    assert [c["key"] for c in mcp_server.calls_of("record")] == [step.idempotency_key]

    # The admin saves the settings the hints suggested: now no approval is needed.
    assert _confirm(world, "shop__record")["side_effect"] == "idempotent_write"
    spec = tool_specs(tenant_id=world.tenant.pk)["shop__record"]
    assert spec.side_effect == "idempotent_write" and not spec.requires_approval
    again = _run(world, RECORD)
    assert again.status == TaskStatus.SUCCEEDED
    assert len(mcp_server.calls_of("record")) == 2


def test_a_changed_schema_disables_the_tool_until_an_admin_confirms_it(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__lookup")
    mcp_server.change_lookup_schema()

    response = _admin(world).post("/api/v1/mcp-servers/shop/refresh", format="json")

    assert response.status_code == 200, response.content
    changes = response.json()["changes"]
    assert changes["changed"] == ["shop__lookup"] and changes["new"] == []
    assert "shop__record" in changes["unchanged"] and changes["gone"] == ["shop__refuse"]
    gone = Tool.objects.get(tenant=world.tenant, name="shop__refuse")
    assert not gone.enabled and gone.review == Review.GONE
    refused = _admin(world).patch("/api/v1/tools/shop__refuse", {"enabled": True}, format="json")
    assert refused.status_code == 400 and "enabled" in refused.json()["error"]["details"]
    lookup = Tool.objects.get(tenant=world.tenant, name="shop__lookup")
    assert not lookup.enabled and lookup.review == Review.SCHEMA_CHANGED
    assert lookup.args_schema["required"] == ["order_id", "region"]
    assert "shop__lookup" not in tool_specs(tenant_id=world.tenant.pk)
    _agent(world)
    task = _run(world, LOOKUP)
    assert Step.objects.get(task=task, step_no=1).status == StepStatus.FAILED  # not offered
    assert mcp_server.calls_of("lookup") == []

    confirmed = _confirm(world, "shop__lookup")
    assert confirmed["enabled"] and confirmed["review"] == ""
    task = _run(world, {"tool": "shop__lookup", "args": {"order_id": "A-1", "region": "eu"}})
    assert task.status == TaskStatus.SUCCEEDED
    assert mcp_server.calls_of("lookup")[0]["args"] == {"order_id": "A-1", "region": "eu"}


def test_what_the_server_owns_cannot_be_changed_on_the_tool(world, mcp_server):
    _register(world, mcp_server)
    response = _admin(world).patch("/api/v1/tools/shop__lookup",
                                   {"args_schema": {"type": "object"}}, format="json")
    assert response.status_code == 400
    assert "args_schema" in response.json()["error"]["details"]
    assert Tool.objects.get(name="shop__lookup").review == Review.NEW  # nothing saved
    response = _admin(world).post("/api/v1/tools", {"name": "mine", "kind": "mcp"},
                                  format="json")
    assert response.status_code == 400 and "kind" in response.json()["error"]["details"]


def test_server_changes_are_audit_entries_by_the_admin_who_made_them(world, mcp_server):
    _register(world, mcp_server)
    client = _admin(world)
    assert client.patch("/api/v1/mcp-servers/shop", {"enabled": False},
                        format="json").status_code == 200
    assert client.delete("/api/v1/mcp-servers/shop").status_code == 204

    entries = list(AuditEntry.objects.filter(tenant=world.tenant, kind="mcp_server", name="shop")
                   .order_by("id"))
    assert [e.action for e in entries] == ["created", "updated", "deleted"]
    assert {e.actor for e in entries} == {world.users["admin"].username}
    assert {d["path"] for d in entries[1].diff} == {"enabled"}


def test_a_server_at_a_refused_address_cannot_be_registered(world, mcp_server):
    refused = mcp_server.url.replace("127.0.0.1", "127.0.0.2")  # not in TETHER_EGRESS_ALLOW
    response = _admin(world).post("/api/v1/mcp-servers", {"name": "shop", "url": refused},
                                  format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["url"] == [REFUSED]
    assert not McpServer.objects.exists() and not Tool.objects.filter(kind="mcp").exists()
    assert mcp_server.state()["calls"] == []


def test_the_policy_holds_at_every_connection_not_only_at_registration(world, mcp_server,
                                                                       settings):
    _register(world, mcp_server)
    _confirm(world, "shop__lookup")
    _agent(world)
    settings.TETHER_EGRESS_ALLOW = ["::1"]  # the operator withdraws 127.0.0.1

    task = _run(world, LOOKUP)

    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    step = Step.objects.get(task=task, step_no=1)
    assert step.error["type"] == "egress_refused" and step.error["message"] == REFUSED
    assert mcp_server.calls_of("lookup") == []


def test_secret_headers_reach_the_server_and_never_appear_in_answers(world, mcp_server):
    secret_create(tenant_id=world.tenant.pk, name="shop-token", value=TOKEN, actor=SYSTEM)
    body = _register(world, mcp_server, headers={"Authorization": "Bearer {secret:shop-token}"})
    _confirm(world, "shop__lookup")
    _agent(world)
    task = _run(world, LOOKUP)
    assert task.status == TaskStatus.SUCCEEDED

    seen = mcp_server.state()["headers"]
    assert seen and all(h["authorization"] == f"Bearer {TOKEN}" for h in seen)
    admin = _admin(world)
    answers = [body, admin.get("/api/v1/mcp-servers").json(),
               admin.get("/api/v1/mcp-servers/shop").json(), admin.get("/api/v1/tools").json(),
               admin.get(f"/api/v1/tasks/{task.pk}/steps").json()]
    assert body["server"]["headers"] == {"Authorization": "Bearer {secret:shop-token}"}
    for answer in answers:
        assert TOKEN not in json.dumps(answer)
    assert TOKEN not in json.dumps(list(McpServer.objects.values("secret_headers",
                                                                 "last_changes")))
    in_use = admin.delete("/api/v1/secrets/shop-token")
    assert in_use.status_code == 409
    assert in_use.json()["error"]["details"]["tools"] == ["shop (MCP server)"]


@pytest.mark.django_db  # one thread: no real commits needed
@pytest.mark.parametrize(("payload", "field"), [
    ({"name": "shop", "url": "ftp://127.0.0.1/mcp"}, "url"),
    ({"name": "a__b", "url": "http://127.0.0.1:9/mcp"}, "name"),
    ({"name": "shop"}, "url"),
    ({"name": "shop", "stdio": "nothing-configured"}, "stdio"),
    ({"name": "shop", "url": "http://127.0.0.1:9/mcp",
      "headers": {"Authorization": "Bearer {secret:missing}"}}, "secret_headers"),
    ({"name": "shop", "url": "http://127.0.0.1:9/mcp", "headers": {"Mcp-Session-Id": "x"}},
     "secret_headers"),
])
def test_bad_registrations_are_400s_with_field_errors_and_store_nothing(world, payload, field):
    response = _admin(world).post("/api/v1/mcp-servers", payload, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not McpServer.objects.exists()


@pytest.mark.django_db  # one thread: no real commits needed
def test_a_server_that_cannot_be_listed_is_not_registered(world, mcp_sessions):
    from tests.processes import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    response = _admin(world).post("/api/v1/mcp-servers", {"name": "shop", "url": url},
                                  format="json")
    assert response.status_code == 400
    assert "cannot list" in response.json()["error"]["details"]["url"][0]
    assert not McpServer.objects.exists()


def test_deleting_a_server_removes_its_tools(world, mcp_server):
    _register(world, mcp_server)
    response = _admin(world).delete("/api/v1/mcp-servers/shop")
    assert response.status_code == 204
    assert not Tool.objects.filter(kind="mcp").exists()
    assert _admin(world).get("/api/v1/mcp-servers/shop").status_code == 404


def test_a_disabled_server_offers_no_tools(world, mcp_server):
    _register(world, mcp_server)
    _confirm(world, "shop__lookup")
    response = _admin(world).patch("/api/v1/mcp-servers/shop", {"enabled": False}, format="json")
    assert response.status_code == 200 and response.json()["enabled"] is False
    assert "shop__lookup" not in tool_specs(tenant_id=world.tenant.pk)


@pytest.mark.system  # the stdio server is a process
def test_a_stdio_server_the_operator_configured_is_registered_by_name(world, settings,
                                                                    mcp_sessions):
    settings.TETHER_MCP_STDIO_SERVERS = json.dumps(
        {"local": [sys.executable, "-m", "tests.fakes.mcp_server", "stdio"]})
    admin = _admin(world)
    response = admin.post("/api/v1/mcp-servers", {"name": "local", "stdio": "local"},
                          format="json")
    assert response.status_code == 201, response.content
    assert "local__lookup" in response.json()["changes"]["new"]
    _confirm(world, "local__lookup")
    add_agent(world.tenant, "stdio-agent", ["local__lookup"])

    task = drive(submit(world.tenant, [{"tool": "local__lookup", "args": {"order_id": "B-2"}},
                                       FINAL], agent="stdio-agent").pk)

    assert task.status == TaskStatus.SUCCEEDED, task.failure_reason
    assert Step.objects.get(task=task, step_no=1).output == {"order_id": "B-2",
                                                             "status": "delivered"}
    # A tenant names a configured server; it cannot give a command or headers.
    for payload in ({"name": "other", "stdio": "bash -c id"},
                    {"name": "other", "stdio": "local", "headers": {"X-A": "b"}}):
        refused = admin.post("/api/v1/mcp-servers", payload, format="json")
        assert refused.status_code == 400, refused.content
