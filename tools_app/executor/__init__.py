"""The tool executor: calls python and http tools through the idempotency ledger."""
from .errors import ToolBusinessError, ToolPermissionError, ToolTransientError
from .ledger import execute_through_ledger, settle_with_status_query
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolContext, ToolOutcome, ToolSpec

__all__ = [
    "OutcomeKind",
    "StatusAnswer",
    "ToolBusinessError",
    "ToolCall",
    "ToolContext",
    "ToolOutcome",
    "ToolPermissionError",
    "ToolSpec",
    "ToolTransientError",
    "execute_through_ledger",
    "settle_with_status_query",
]
