"""The ASGI application behind `/a2a/` (`config.asgi` routes the prefix here,
behind the request-body limit): Starlette, as the SDK's server is.

- `GET /a2a/<tenant>/<agent>/.well-known/agent-card.json`: the card of a
  published agent (public; 404 for any other); a published workflow's under
  `/a2a/<tenant>/workflows/<name>`.
- `POST /a2a/<tenant>/<agent>` (`/a2a/<tenant>/workflows/<name>`): JSON-RPC
  2.0, the A2A v1.0 methods, through the SDK's dispatcher
  (`a2a.server.routes.jsonrpc_dispatcher`) and `handler.TetherRequestHandler`.
  Authenticated first: no or a wrong key is a 401 with `WWW-Authenticate:
  Bearer`; one the key may not see, a 404.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import InvalidRequestError
from channels.db import database_sync_to_async
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from .caller import AGENT, WORKFLOW, Door, Refused, door_of, published_at
from .cards import PREFIX, WORKFLOWS, agent_card
from .handler import TetherRequestHandler

DOOR = "tether.a2a.door"


class DoorContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the authenticated call (`caller.Door`) in its state."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["door"] = request.scope[DOOR]
        return context


dispatcher = JsonRpcDispatcher(TetherRequestHandler(), context_builder=DoorContextBuilder())


def _card_of(tenant: str, kind: str, name: str, base_url: str) -> dict[str, Any] | None:
    target = published_at(tenant, kind, name)
    return None if target is None else agent_card_to_dict(agent_card(target, base_url=base_url))


def card_endpoint(kind: str) -> Callable[[Request], Awaitable[Response]]:
    async def card(request: Request) -> Response:
        found = await database_sync_to_async(_card_of)(
            request.path_params["tenant"], kind, request.path_params["name"],
            f"{request.url.scheme}://{request.url.netloc}")
        if found is None:
            return JSONResponse({"error": f"no such {kind}"}, status_code=404)
        return JSONResponse(found)

    return card


def rpc_endpoint(kind: str) -> Callable[[Request], Awaitable[Response]]:
    async def rpc(request: Request) -> Response:
        try:
            door: Door = await database_sync_to_async(door_of)(
                request.headers.get("authorization"), tenant=request.path_params["tenant"],
                kind=kind, name=request.path_params["name"])
        except Refused as refused:
            body = build_error_response(None, InvalidRequestError(message=refused.message))
            headers = {"WWW-Authenticate": 'Bearer realm="tether"'} \
                if refused.status == 401 else {}
            return JSONResponse(body, status_code=refused.status, headers=headers)
        request.scope[DOOR] = door
        return await dispatcher.handle_requests(request)

    return rpc


def _routes(path: str, kind: str) -> list[Route]:
    return [Route(path + AGENT_CARD_WELL_KNOWN_PATH, card_endpoint(kind), methods=["GET"]),
            Route(path, rpc_endpoint(kind), methods=["POST"])]


application = Starlette(routes=[Mount(PREFIX, routes=[
    *_routes("/{tenant}/" + WORKFLOWS + "/{name}", WORKFLOW),
    *_routes("/{tenant}/{name}", AGENT),
])])
