"""Exceptions a python tool raises to say which error layer it hit."""
from __future__ import annotations

from typing import Any


class ToolError(Exception):
    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class ToolBusinessError(ToolError):
    """Bad argument, missing resource: the model gets it back as a structured error."""


class ToolPermissionError(ToolError):
    """The tool refused for lack of authority: the task stops."""


class ToolTransientError(ToolError):
    """Connection reset, 503: safe to retry with the same key."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s
