"""The model gateway: backends behind one interface that turn a context into a decision.

The gateway never touches the database; the runner persists what it returns.
"""
from .base import (
    CallGuard,
    CallLimiter,
    ContextSnapshot,
    Decision,
    GatewayError,
    ModelBackend,
    ModelRefused,
    ModelReply,
    OpenSteps,
    ToolSpecView,
    parse_decision,
)
from .registry import get_backend, is_instant, register_backend
from .streaming import TokenSink

__all__ = [
    "CallGuard",
    "CallLimiter",
    "ContextSnapshot",
    "Decision",
    "GatewayError",
    "ModelBackend",
    "ModelRefused",
    "ModelReply",
    "OpenSteps",
    "TokenSink",
    "ToolSpecView",
    "get_backend",
    "is_instant",
    "register_backend",
    "parse_decision",
]
