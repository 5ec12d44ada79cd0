"""`/mcp` on the server `scripts/start` runs: daphne (no ASGI lifespan
events), SQLite, the embedded runner on daphne's own event loop. An admin
publishes the demo's `support` agent through the REST API; the SDK's client
runs it and gets its result, the task run by the server itself."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import wait_for
from tests.processes import port_open
from tests.system.test_embedded_server import _manage

LOOKUP = [{"tool": "lookup_order", "args": {"order_id": "A-1001"}},
          {"final": {"answer": "delivered"}}]


def test_an_mcp_client_runs_a_published_agent_on_the_embedded_server(embedded_server, tmp_path):
    server = embedded_server(tmp_path / "tether.sqlite3")
    wait_for(lambda: port_open("127.0.0.1", server.port) or not server.proc.alive(),
             timeout=180, interval=0.25, message="scripts/start to serve")
    assert server.proc.alive(), server.proc.log_tail()
    local_env = tmp_path / ".tether" / "local.env"

    def key(username: str, role: str) -> str:
        return _manage(server.database_path, local_env, "create_api_token", "--tenant", "demo",
                       "--username", username, "--role", role)

    admin, requester = key("mcp-admin", "admin"), key("mcp-requester", "requester")

    async def tools_and_run() -> tuple[list[str], dict]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {requester}"},
                                      timeout=httpx2.Timeout(30, read=120)) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                if "run_support" not in names:
                    return names, {}
                result = await client.call_tool("run_support", {
                    "goal": "Where is order A-1001?", "script": LOOKUP, "wait_s": 60})
                return names, result.structured_content

    before, _ = asyncio.run(tools_and_run())
    assert before == ["get_task"]  # nothing is published by default

    published = httpx.patch(f"{server.url}/api/v1/agents/support", json={"published": True},
                            headers={"Authorization": f"Token {admin}"}, timeout=30)
    assert published.status_code == 200, published.text

    after, done = asyncio.run(tools_and_run())
    assert after == ["run_support", "get_task"]
    assert done["status"] == "SUCCEEDED", (done, server.proc.log_tail())
    assert done["result"] == {"answer": "delivered"}
