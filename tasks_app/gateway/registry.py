"""Backend lookup by the name on the agent profile."""
from __future__ import annotations

from typing import Any

from ..vault.values import Resolved
from .base import CallGuard, GatewayError, ModelBackend
from .scripted import ScriptedBackend


def get_backend(model: dict[str, Any], keys: Resolved | None = None,
                guard: CallGuard | None = None) -> ModelBackend:
    """The backend of a profile's `model`; `keys` are its API keys, resolved by
    the runner for the task's tenant (`tasks_app.vault.lookup.model_keys`);
    `guard` the circuit breakers around its endpoints."""
    backend = model.get("backend", "scripted")
    if backend == "scripted":
        return ScriptedBackend()
    if backend == "openai":
        # Imported on first use: the OpenAI SDK is heavy, and scripted agents never need it.
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(model, keys, guard)
    raise GatewayError(f"unknown model backend {backend!r}", retryable=False, calls=0)
