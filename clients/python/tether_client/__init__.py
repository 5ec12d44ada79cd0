"""A typed client for Tether's REST API, sync (`Tether`) and async
(`AsyncTether`), and the `tether` command line (`tether_client.cli`)."""

from ._operations import TERMINAL, StreamDelta, next_cursor
from .aio import AsyncTether
from .client import Tether
from .config import NotConfigured
from .errors import (
    AuthenticationFailed,
    BadRequest,
    Conflict,
    Gone,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    TetherError,
)

__all__ = [
    "TERMINAL", "AsyncTether", "AuthenticationFailed", "BadRequest", "Conflict", "Gone",
    "NotConfigured", "NotFound", "PermissionDenied", "RateLimited", "ServerError",
    "ServiceUnavailable", "StreamDelta", "Tether", "TetherError", "next_cursor",
]
