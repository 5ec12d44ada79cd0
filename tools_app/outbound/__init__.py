"""Every HTTP call Tether makes on a tenant's behalf goes through this package.

- `policy`: which addresses may be reached (`TETHER_EGRESS_ALLOW`), checked
  when a URL is registered (`url_problem`) and again at connect time;
- `transport`: httpx2 transports that connect only to checked addresses and
  make a request's timeout the whole call's;
- `clients`: one long-lived client per endpoint per process (sync and async),
  and clients a caller owns (`owned_async_client`, the MCP connections').

A refusal is `EgressRefusedError`: a permission error for a tool step, a
non-retryable error for a model call, never a hint about the target.
"""

from .clients import (
    Registry,
    astream,
    async_client_for,
    client_for,
    close_async_clients,
    owned_async_client,
)
from .policy import REFUSED, EgressRefusedError, current_policy, endpoint_of, url_problem
from .transport import GATHER_EVENTS_S, ResponseRefusedError, ResponseTooLargeError

__all__ = [
    "GATHER_EVENTS_S",
    "REFUSED",
    "EgressRefusedError",
    "Registry",
    "astream",
    "async_client_for",
    "client_for",
    "close_async_clients",
    "current_policy",
    "endpoint_of",
    "owned_async_client",
    "ResponseRefusedError",
    "ResponseTooLargeError",
    "url_problem",
]
