"""Tools and agent profiles through the API (admins): create, read, update,
enable/disable, every field checked, schemas validated as JSON Schema, and an
http tool registered and used end to end without writing Python."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Step
from tools_app.models import Tool

from .conftest import Tenancy, drive

ADM = Role.ADMIN
HTTP_TOOL = {
    "name": "check_stock",
    "description": "How many units of a SKU are in stock.",
    "kind": "http",
    "url": "http://127.0.0.1:9/stock",
    "status_url": "http://127.0.0.1:9/stock/status/{key}",
    "args_schema": {
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
        "additionalProperties": False,
    },
    "result_schema": {
        "type": "object",
        "properties": {"units": {"type": "integer"}},
        "required": ["units"],
    },
    "side_effect": "read",
    "risk": "low",
    "requires_approval": False,
    "timeout_s": 2.5,
    "max_retries": 1,
    "secret_headers": {"X-Api-Key": "{secret:stock-key}"},
}
TOOL_FIELDS = {
    "name",
    "description",
    "kind",
    "url",
    "status_url",
    "args_schema",
    "result_schema",
    "side_effect",
    "risk",
    "requires_approval",
    "timeout_s",
    "max_retries",
    "enabled",
}


class StockServer:
    """A local HTTP endpoint standing in for a downstream service (the process edge)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls.append(
                    {
                        "body": body,
                        "key": self.headers["Idempotency-Key"],
                        "task": self.headers["X-Tether-Task"],
                    }
                )
                data = json.dumps({"units": 7}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stock_server() -> Iterator[StockServer]:
    server = StockServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _secrets(main: Tenancy) -> None:
    """The secrets HTTP_TOOL and AGENT refer to, stored in the main tenant."""
    for name in ("stock-key", "llm-key"):
        secret_create(tenant_id=main.tenant.pk, name=name, value=f"{name}-value", actor=SYSTEM)


# --- tools ---------------------------------------------------------------------------------


def test_an_http_tool_is_fully_registrable(main: Tenancy) -> None:
    client = main.client(ADM)
    response = client.post("/api/v1/tools", HTTP_TOOL, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) >= TOOL_FIELDS
    assert {k: body[k] for k in HTTP_TOOL} == HTTP_TOOL
    assert client.get("/api/v1/tools/check_stock").json() == body
    assert "check_stock" in [t["name"] for t in client.get("/api/v1/tools").json()]


def test_a_registered_http_tool_runs_end_to_end(main: Tenancy, stock_server: StockServer) -> None:
    client = main.client(ADM)
    tool = {
        **HTTP_TOOL,
        "url": f"{stock_server.url}/stock",
        "status_url": f"{stock_server.url}/s/{{key}}",
    }
    assert client.post("/api/v1/tools", tool, format="json").status_code == 201
    assert (
        client.post(
            "/api/v1/agents", {"name": "stock", "tools": ["check_stock"]}, format="json"
        ).status_code
        == 201
    )
    submitted = main.client(Role.REQUESTER).post(
        "/api/v1/tasks",
        {
            "goal": "How many of SKU-1?",
            "agent": "stock",
            "script": [{"tool": "check_stock", "args": {"sku": "SKU-1"}}, {"final": {"units": 7}}],
        },
        format="json",
    )
    assert submitted.status_code == 201
    task = drive(submitted.json()["id"])
    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.output == {"units": 7}
    assert stock_server.calls == [
        {"body": {"sku": "SKU-1"}, "key": step.idempotency_key, "task": str(task.pk)}
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"args_schema": {"type": "nonsense"}}, "args_schema"),
        ({"args_schema": {"type": "string"}}, "args_schema"),
        (
            {"args_schema": {"properties": {"a": {"minimum": "zero"}}, "type": "object"}},
            "args_schema",
        ),
        ({"result_schema": {"type": 12}}, "result_schema"),
        ({"url": ""}, "url"),
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"status_url": "http://127.0.0.1:9/status"}, "status_url"),
        ({"secret_headers": {"X-Api-Key": "sk-live-1234"}}, "secret_headers"),
        ({"secret_headers": {"Idempotency-Key": "SOME_ENV"}}, "secret_headers"),
        # only templates naming the tenant's own secrets: never an environment variable
        ({"secret_headers": {"X-Api-Key": "SECRET_KEY"}}, "secret_headers"),
        ({"secret_headers": {"X-Api-Key": "TETHER_SECRET_STOCK"}}, "secret_headers"),
        ({"secret_headers": {"X-Api-Key": "{secret:no-such-secret}"}}, "secret_headers"),
        ({"secret_headers": {"X-Api-Key": "Bearer {secret:Stock Key}"}}, "secret_headers"),
        ({"secret_headers": {"X-Api-Key": "Bearer {secret:stock-key"}}, "secret_headers"),
        ({"kind": "python", "target": "os.system", "url": ""}, "target"),
        ({"kind": "python", "target": "tools_app.demo.tools.nothing_here", "url": ""}, "target"),
        ({"kind": "shell"}, "kind"),
        ({"name": "has space"}, "name"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": 99}, "max_retries"),
        ({"risk": "extreme"}, "risk"),
        ({"compensation_tool": "nope"}, "compensation_tool"),
    ],
)
def test_a_bad_registration_is_a_400_with_field_errors(
    main: Tenancy, change: dict, field: str
) -> None:
    response = main.client(ADM).post("/api/v1/tools", {**HTTP_TOOL, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not Tool.objects.filter(
        tenant=main.tenant, name__in=["check_stock", "has space"]
    ).exists()


def test_a_python_tool_may_point_at_an_allowed_module(main: Tenancy) -> None:
    response = main.client(ADM).post(
        "/api/v1/tools",
        {
            "name": "lookup_again",
            "kind": "python",
            "target": "tools_app.demo.tools.lookup_order",
            "args_schema": {"type": "object"},
        },
        format="json",
    )
    assert response.status_code == 201


def test_a_duplicate_name_is_a_409(main: Tenancy) -> None:
    response = main.client(ADM).post(
        "/api/v1/tools", {**HTTP_TOOL, "name": "lookup_order"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "tool_exists"


def test_update_disable_and_no_rename(main: Tenancy) -> None:
    client = main.client(ADM)
    client.post("/api/v1/tools", HTTP_TOOL, format="json")
    response = client.patch(
        "/api/v1/tools/check_stock", {"enabled": False, "risk": "medium"}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["enabled"], response.json()["risk"]) == (False, "medium")
    rename = client.patch("/api/v1/tools/check_stock", {"name": "other"}, format="json")
    assert rename.status_code == 400 and "name" in rename.json()["error"]["details"]
    bad = client.patch(
        "/api/v1/tools/check_stock",
        {"args_schema": {"type": "nonsense"}, "risk": "high"},
        format="json",
    )
    assert bad.status_code == 400
    tool = Tool.objects.get(tenant=main.tenant, name="check_stock")
    assert (tool.risk, tool.args_schema) == ("medium", HTTP_TOOL["args_schema"])  # no partial write
    assert (
        client.patch("/api/v1/tools/missing", {"enabled": False}, format="json").status_code == 404
    )


def test_a_disabled_tool_is_not_run(main: Tenancy) -> None:
    main.client(ADM).patch("/api/v1/tools/lookup_order", {"enabled": False}, format="json")
    task = main.finished_task(
        [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": 1}}]
    )
    step = Step.objects.get(task=task, step_no=1)
    assert step.error["type"] == "unknown_tool"


# --- agents ---------------------------------------------------------------------------------


AGENT = {
    "name": "refunds",
    "description": "Refunds, with approval.",
    "model": {
        "backend": "openai",
        "name": "qwen2.5:7b",
        "base_url": "http://127.0.0.1:11434/v1",
        "api_key_secret": "llm-key",
        "temperature": 0.2,
        "top_p": 0.9,
        "system_prompt": "Be careful.",
        "fallback": {"name": "qwen2.5:3b"},
    },
    "tools": ["lookup_order", "issue_refund"],
    "budget": {
        "max_steps": 12,
        "max_model_calls": 15,
        "max_tool_calls": 8,
        "max_tokens": 50000,
        "max_duration_s": 600,
        "per_tool": {"issue_refund": 1},
        "max_concurrent_tasks": 3,
    },
    "on_exhaustion": "escalate",
    "approval_sla_s": 3600,
}


def test_an_agent_profile_round_trips_in_the_contract_shape(main: Tenancy) -> None:
    client = main.client(ADM)
    response = client.post("/api/v1/agents", AGENT, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert {"name", "model", "tools", "budget", "on_exhaustion", "approval_sla_s"} <= set(body)
    assert body["budget"] == {**AGENT["budget"], "max_cost": None}  # no cost budget given
    assert {k: body["model"][k] for k in AGENT["model"]} == AGENT["model"]
    assert set(body["model"]) >= {
        "backend",
        "name",
        "base_url",
        "temperature",
        "top_p",
        "system_prompt",
        "fallback",
    }
    assert client.get("/api/v1/agents/refunds").json() == body
    stored = AgentProfile.objects.get(tenant=main.tenant, name="refunds")
    assert (stored.max_steps, stored.per_tool) == (12, {"issue_refund": 1})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tools": ["lookup_order", "no_such_tool"]}, "tools"),
        ({"tools": ["lookup_order", "lookup_order"]}, "tools"),
        ({"budget": {"per_tool": {"notify_customer": 1}}}, "budget.per_tool"),
        ({"budget": {"max_steps": 0}}, "budget"),
        ({"model": {"backend": "magic"}}, "model.backend"),
        (
            {
                "model": {
                    "backend": "openai",
                    "name": "m",
                    "base_url": "http://x.test",
                    "api_key": "sk-123",
                }
            },
            "model.api_key",
        ),
        ({"model": {"backend": "openai", "name": "m"}}, "model.base_url"),
        ({"result_schema": {"type": "nonsense"}}, "result_schema"),
        ({"on_exhaustion": "explode"}, "on_exhaustion"),
        ({"name": "no spaces please"}, "name"),
    ],
)
def test_a_bad_profile_is_a_400_with_field_errors(main: Tenancy, change: dict, field: str) -> None:
    response = main.client(ADM).post("/api/v1/agents", {**AGENT, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not AgentProfile.objects.filter(tenant=main.tenant).exclude(name="support").exists()


def test_update_an_agent_and_disable_it(main: Tenancy) -> None:
    client = main.client(ADM)
    client.post(
        "/api/v1/agents",
        {**AGENT, "model": {"backend": "scripted", "name": "scripted"}},
        format="json",
    )
    response = client.patch(
        "/api/v1/agents/refunds", {"budget": {"max_steps": 30}, "approval_sla_s": 60}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["budget"]["max_steps"], response.json()["approval_sla_s"]) == (30, 60)
    assert response.json()["budget"]["max_model_calls"] == 15  # untouched
    rename = client.patch("/api/v1/agents/refunds", {"name": "refunds-2"}, format="json")
    assert rename.status_code == 400 and "name" in rename.json()["error"]["details"]
    assert (
        client.patch("/api/v1/agents/refunds", {"enabled": False}, format="json").json()["enabled"]
        is False
    )
    refused = main.client(Role.REQUESTER).post(
        "/api/v1/tasks", {"goal": "g", "agent": "refunds", "script": [{"final": {}}]}, format="json"
    )
    assert refused.status_code == 400
    assert client.post("/api/v1/agents", AGENT, format="json").status_code == 409


PY_TOOL = {"name": "lookup_mine", "kind": "python", "args_schema": {"type": "object"}}


@pytest.mark.parametrize("target", ["target", "status_tool"])
def test_the_demo_tools_are_granted_to_the_demo_tenant_only(
    db: None, settings: Any, hanging_url: str, target: str
) -> None:
    """They read and write the demo store's global tables: another tenant that
    registered them would reach the demo tenant's data."""
    from .conftest import make_tenancy

    settings.TETHER_PYTHON_TOOL_MODULES = ("demo:tools_app.demo.",)  # the default
    fields = {"target": "tools_app.demo.tools.lookup_order"}
    if target == "status_tool":
        fields = {"target": "tools_app.demo.tools.notify_customer",
                  "status_tool": "tools_app.demo.tools.notification_status"}
    intruder = make_tenancy("t-intruder", hanging_url)
    refused = intruder.client(ADM).post("/api/v1/tools", {**PY_TOOL, **fields}, format="json")
    assert refused.status_code == 400, refused.content
    assert "TETHER_PYTHON_TOOL_MODULES" in refused.json()["error"]["details"][target][0]
    assert not Tool.objects.filter(tenant=intruder.tenant, name="lookup_mine").exists()

    demo = make_tenancy("demo", hanging_url)
    allowed = demo.client(ADM).post("/api/v1/tools", {**PY_TOOL, **fields}, format="json")
    assert allowed.status_code == 201, allowed.content


def test_a_grant_without_a_tenant_is_for_every_tenant(settings: Any, main: Tenancy) -> None:
    settings.TETHER_PYTHON_TOOL_MODULES = ("demo:tools_app.demo.", "tests.fakes.")
    ok = main.client(ADM).post(
        "/api/v1/tools", {**PY_TOOL, "target": "tests.fakes.python_tools.echo"}, format="json"
    )
    demo_tool = main.client(ADM).post(
        "/api/v1/tools",
        {**PY_TOOL, "name": "lookup_x", "target": "tools_app.demo.tools.lookup_order"},
        format="json",
    )
    assert (ok.status_code, demo_tool.status_code) == (201, 400), (ok.content, demo_tool.content)
