"""An MCP server for the tests, built with the SDK's own server (`MCPServer`,
the 2.x name of FastMCP) over Streamable HTTP: the edge of the process, faked.

Run as a process of its own (`python -m tests.fakes.mcp_server PORT`), so a
test can kill the Celery worker that calls it and the server keeps its count;
`python -m tests.fakes.mcp_server stdio` serves the same tools over stdio.
Tools:

- `lookup(order_id)`: a read (`readOnlyHint`), with structured output;
- `record(note, gate="")`: a counting write that honours the idempotency key
  Tether sends in the request's `_meta` (`tether/idempotency_key`): one effect
  per key however often it is called (`idempotentHint`). With a `gate` it
  blocks until that file exists (the slow downstream of the crash test);
- `refuse(reason)`: answers with `isError`;
- `odd.name`: a name Tether cannot give to a model; `hostile`: an input schema
  Tether refuses (a backreference, which RE2 cannot run); `liar`: structured
  output that does not match the output schema it lists;
- `verify(order_id, customer)`: a completion check (`readOnlyHint`), listed
  only once a test queued its answers (`POST /verdicts`): each call answers the
  next, `{"pass": ..., "reason": ...}` as structured content, `{"text": ...}`
  as a text block only, `{"error": ...}` with `isError`; none left is an error.

Plain HTTP routes for the test: `GET /state` (effects per key, calls, the
headers seen), `POST /variant` (`lookup` takes a second, required argument:
a changed schema; `refuse` is gone), `POST /verdicts` (a list of `verify`'s
answers, queued), `POST /reset` (back to the start).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

KEY = "tether/idempotency_key"
GATE_DEADLINE_S = 60.0

server = MCPServer("tether-test-server")
state: dict[str, Any] = {"effects": {}, "calls": [], "headers": [], "verdicts": []}


class Order(BaseModel):
    order_id: str
    status: str


class Receipt(BaseModel):
    receipt: str
    note: str


def _seen(ctx: Context, tool: str, args: dict[str, Any]) -> str:
    meta = ctx.request_context.meta or {}
    key = str(meta.get(KEY, ""))
    state["calls"].append({"tool": tool, "args": args, "key": key})
    state["headers"].append(dict(ctx.headers or {}))
    return key


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(order_id: str, ctx: Context) -> Order:
    """Look an order up."""
    _seen(ctx, "lookup", {"order_id": order_id})
    return Order(order_id=order_id, status="delivered")


def lookup_v2(order_id: str, region: str, ctx: Context) -> Order:
    """Look an order up, in a region."""
    _seen(ctx, "lookup", {"order_id": order_id, "region": region})
    return Order(order_id=order_id, status="delivered")


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
async def record(note: str, ctx: Context, gate: str = "") -> Receipt:
    """Record a note (one per idempotency key)."""
    key = _seen(ctx, "record", {"note": note})
    effects = state["effects"]
    effects[key] = effects.get(key, 0) or 1  # the effect happens once per key
    deadline = time.monotonic() + GATE_DEADLINE_S
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return Receipt(receipt=f"r-{key[:8]}", note=note)


@server.tool()
def refuse(reason: str, ctx: Context) -> str:
    """Always refuses."""
    _seen(ctx, "refuse", {"reason": reason})
    raise ValueError(f"refused: {reason}")


@server.tool(name="odd.name")
def odd(ctx: Context) -> str:
    """A name with a dot."""
    return "odd"


@server.tool()
def hostile(text: str) -> str:
    """An input schema with a pattern RE2 cannot run."""
    return text


@server.tool()
def liar(order_id: str) -> Order:
    """Its output schema (below) promises what it does not send."""
    return Order(order_id=order_id, status="delivered")


def verify(order_id: str, customer: str, ctx: Context) -> CallToolResult:
    """Whether the order was handled for the customer (the next queued answer)."""
    _seen(ctx, "verify", {"order_id": order_id, "customer": customer})
    queued = state["verdicts"]
    answer = queued.pop(0) if queued else {"error": "no verdict queued"}
    if "error" in answer:
        return CallToolResult(is_error=True, content=[TextContent(text=answer["error"])])
    if "text" in answer:
        return CallToolResult(content=[TextContent(text=json.dumps(answer["text"]))])
    return CallToolResult(content=[TextContent(text=json.dumps(answer))],
                          structured_content=answer)


# The server's own listing, doctored: a hostile input schema, a lying output schema.
server._tool_manager._tools["liar"].__dict__["output_schema"] = {
    "type": "object", "required": ["refund_id"], "properties": {"refund_id": {"type": "string"}}}
server._tool_manager._tools["hostile"].parameters = {
    "type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+\\1$"}}}


@server.custom_route("/state", methods=["GET"])
async def get_state(request: Request) -> Response:
    return JSONResponse(state)


@server.custom_route("/variant", methods=["POST"])
async def variant(request: Request) -> Response:
    _use_lookup(lookup_v2)
    if "refuse" in {t.name for t in server._tool_manager.list_tools()}:
        server.remove_tool("refuse")
    return JSONResponse({"ok": True})


@server.custom_route("/verdicts", methods=["POST"])
async def verdicts(request: Request) -> Response:
    state["verdicts"].extend(await request.json())
    if "verify" not in {t.name for t in server._tool_manager.list_tools()}:
        server.add_tool(verify, name="verify", structured_output=False,
                        annotations=ToolAnnotations(read_only_hint=True))
    return JSONResponse({"ok": True})


@server.custom_route("/reset", methods=["POST"])
async def reset(request: Request) -> Response:
    """Back to the start, for the next test: no calls seen, the first `lookup`,
    no `verify`."""
    state.update({"effects": {}, "calls": [], "headers": [], "verdicts": []})
    if "verify" in {t.name for t in server._tool_manager.list_tools()}:
        server.remove_tool("verify")
    _use_lookup(lookup)
    if "refuse" not in {t.name for t in server._tool_manager.list_tools()}:
        server.add_tool(refuse, name="refuse")
    return JSONResponse({"ok": True})


def _use_lookup(fn: Any) -> None:
    server.remove_tool("lookup")
    server.add_tool(fn, name="lookup", annotations=ToolAnnotations(read_only_hint=True))


def main() -> None:
    if sys.argv[1] == "stdio":  # an operator-configured stdio server
        server.run("stdio")
        return
    port = int(sys.argv[1])
    print(json.dumps({"port": port}), flush=True)
    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=port))


if __name__ == "__main__":
    main()
