"""Backend lookup by the name on the agent profile.

`scripted` and `openai` are the gateway's own. Other apps add backends from
their `AppConfig.ready` (`register_backend`): a workflow run's orchestrator is
one (workflows_app). An *instant* backend answers without I/O, from the
database, in the runner's planning phase (as the scripted one does): its
decisions cost no model call and are never awaited on the I/O loop.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accounts_app.vault.values import Resolved

from .base import CallGuard, CallLimiter, GatewayError, ModelBackend
from .scripted import ScriptedBackend
from .streaming import TokenSink

BackendFactory = Callable[[dict[str, Any]], ModelBackend]
_REGISTERED: dict[str, BackendFactory] = {}
INSTANT: set[str] = {"scripted"}


def register_backend(name: str, factory: BackendFactory, *, instant: bool) -> None:
    """Add the backend `name`, built by `factory(model)`."""
    _REGISTERED[name] = factory
    if instant:
        INSTANT.add(name)


def is_instant(backend: str) -> bool:
    return backend in INSTANT


def get_backend(model: dict[str, Any], keys: Resolved | None = None,
                guard: CallGuard | None = None,
                limiter: CallLimiter | None = None,
                tokens: TokenSink | None = None) -> ModelBackend:
    """The backend of a profile's `model`; `keys` are its API keys, resolved by
    the runner for the task's tenant (`accounts_app.vault.lookup.model_keys`);
    `guard` the circuit breakers around its endpoints, `limiter` their rate limits;
    `tokens` where a streamed reply's tokens go (`streaming`)."""
    backend = model.get("backend", "scripted")
    if backend == "scripted":
        return ScriptedBackend()
    if backend == "openai":
        # Imported on first use: the OpenAI SDK is heavy, and scripted agents never need it.
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(model, keys, guard, limiter, tokens)
    factory = _REGISTERED.get(backend)
    if factory is not None:
        return factory(model)
    raise GatewayError(f"unknown model backend {backend!r}", retryable=False, calls=0)
