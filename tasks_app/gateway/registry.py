"""Backend lookup by the name on the agent profile."""
from __future__ import annotations

from typing import Any

from .base import GatewayError, ModelBackend
from .scripted import ScriptedBackend


def get_backend(model: dict[str, Any]) -> ModelBackend:
    backend = model.get("backend", "scripted")
    if backend == "scripted":
        return ScriptedBackend()
    if backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(model)
    raise GatewayError(f"unknown model backend {backend!r}", retryable=False)
