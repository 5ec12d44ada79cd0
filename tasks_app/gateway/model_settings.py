"""The `model` settings of an agent profile, parsed and checked.

Shape (JSON on the profile, frozen into `task.agent_snapshot` at submission)::

    {"backend": "openai", "name": "qwen2.5:7b", "base_url": "http://127.0.0.1:11434/v1",
     "api_key_secret": "ollama", "temperature": 0.2, "top_p": 1.0,
     "system_prompt": "...", "timeout_s": 60, "max_retries": 2,
     "prices": {"input_per_mtok": "0.15", "output_per_mtok": "0.60",
                "cached_input_per_mtok": "0.075"},
     "fallback": {"name": "...", "base_url": "...", "api_key_secret": "...",
                  "prices": {...}},
     "breaker": {"failures": 5, "cooldown_s": 10, "max_cooldown_s": 300},
     "max_tokens": 1024, "stream": true,
     "rate_limit": {"requests_per_minute": 500, "tokens_per_minute": 90000}}

`stream` asks the endpoint for the reply as Server-Sent Events: its tokens go
live to the task page and the stream endpoint while they arrive
(`gateway.streaming`); the decision is the same, recorded once it is complete.

`rate_limit` (the primary's; the fallback may have its own) is applied before
each call, shared by every agent calling the same endpoint and model with the
same key (`tools_app.ratelimits`); `max_tokens` bounds each reply, and is
what a call reserves for it.

`prices` (dollars per million tokens, `tasks_app.pricing`) are optional; a
model without them costs nothing, so when the primary has prices its fallback
must have its own (a different model has a different price).
`breaker` sets the thresholds of the circuit breakers of the model's
endpoints (primary and fallback each have their own; `tools_app.breakers`).

Keys are never stored on a profile: it names a secret of its tenant
(`api_key_secret`, see `accounts_app.vault`) or an environment variable the
operator granted (`api_key_env`), and the runner resolves it at call time.
A fallback that names no key uses the primary's. `model_settings_errors` is
what an API or console form calls before saving (the service then checks that
the secret exists and the variable is granted, which needs the tenant).
`base_url` (and the fallback's) is checked with the outbound-address policy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accounts_app.vault.references import SECRET_NAME, SECRET_NAME_RULE, env_ref, secret_ref
from tools_app.breakers import breaker_errors
from tools_app.outbound import url_problem
from tools_app.ratelimits import NO_LIMIT, RateLimit, parse_rate_limit, rate_limit_errors

from ..pricing import prices_errors

BACKENDS = ("scripted", "openai")
# Keys that would put a secret in the database in clear.
FORBIDDEN_KEYS = ("api_key", "key", "secret", "token", "password", "authorization")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
# Longest pause the gateway takes inside one step (a longer Retry-After hands
# the task back to the scheduler instead of holding a worker).
DEFAULT_MAX_WAIT_S = 10.0
# A key for local servers (Ollama, llama.cpp) that ignore it; the SDK needs one.
NO_KEY = "no-key"


@dataclass(frozen=True)
class ModelTarget:
    """One endpoint and model: the primary or the fallback."""

    name: str
    base_url: str
    api_key_env: str = ""
    api_key_secret: str = ""
    rate_limit: RateLimit = NO_LIMIT

    @property
    def key_ref(self) -> str:
        """Where the key comes from (`secret:NAME`, `env:NAME`), or "" for no key."""
        if self.api_key_secret:
            return secret_ref(self.api_key_secret)
        if self.api_key_env:
            return env_ref(self.api_key_env)
        return ""


@dataclass(frozen=True)
class ModelSettings:
    primary: ModelTarget
    fallback: ModelTarget | None
    temperature: float | None
    top_p: float | None
    system_prompt: str
    timeout_s: float
    max_retries: int
    max_wait_s: float
    max_tokens: int | None = None
    stream: bool = False


def parse_model_settings(model: dict[str, Any]) -> ModelSettings:
    """Settings with defaults filled in; call `model_settings_errors` first to
    reject bad input with field errors."""
    base_url = str(model.get("base_url") or "")
    primary = ModelTarget(name=str(model.get("name") or ""), base_url=base_url,
                          api_key_env=str(model.get("api_key_env") or ""),
                          api_key_secret=str(model.get("api_key_secret") or ""),
                          rate_limit=parse_rate_limit(model.get("rate_limit")))
    fb = model.get("fallback") or None
    fallback = None
    if isinstance(fb, dict) and fb.get("name"):
        names_key = bool(fb.get("api_key_env") or fb.get("api_key_secret"))
        key = fb if names_key else {"api_key_env": primary.api_key_env,
                                    "api_key_secret": primary.api_key_secret}
        fallback = ModelTarget(name=str(fb["name"]), base_url=str(fb.get("base_url") or base_url),
                               api_key_env=str(key.get("api_key_env") or ""),
                               api_key_secret=str(key.get("api_key_secret") or ""),
                               rate_limit=parse_rate_limit(fb.get("rate_limit")))
    return ModelSettings(
        primary=primary,
        fallback=fallback,
        temperature=_float_or_none(model.get("temperature")),
        top_p=_float_or_none(model.get("top_p")),
        system_prompt=str(model.get("system_prompt") or ""),
        timeout_s=float(model.get("timeout_s") or DEFAULT_TIMEOUT_S),
        max_retries=int(model.get("max_retries", DEFAULT_MAX_RETRIES)),
        max_wait_s=float(model.get("max_wait_s", DEFAULT_MAX_WAIT_S)),
        max_tokens=int(model["max_tokens"]) if model.get("max_tokens") else None,
        stream=model.get("stream") is True,
    )


def _float_or_none(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def model_settings_errors(model: Any) -> dict[str, list[str]]:
    """Field errors of a profile's `model` JSON (empty when it is valid)."""
    if not isinstance(model, dict):
        return {"model": ["must be a JSON object"]}
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    for key in model:
        if str(key).lower() in FORBIDDEN_KEYS:
            add(key, "secrets are not stored on a profile: store the key as a tenant "
                     "secret and name it in api_key_secret")
    backend = model.get("backend", "scripted")
    if backend not in BACKENDS:
        add("backend", f"one of {', '.join(BACKENDS)}")
    if backend == "openai":
        if not isinstance(model.get("name"), str) or not model["name"].strip():
            add("name", "the model name is required")
        if not _is_http_url(model.get("base_url")):
            add("base_url", "an http(s) URL, e.g. http://127.0.0.1:11434/v1")
        elif problem := url_problem(model["base_url"]):
            add("base_url", problem)
    for field, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0), ("timeout_s", 0.1, 600.0),
                          ("max_wait_s", 0.0, 600.0)):
        value = model.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            add(field, f"a number from {lo:g} to {hi:g}")
    retries = model.get("max_retries")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                or not 0 <= retries <= 10):
        add("max_retries", "an integer from 0 to 10")
    max_tokens = model.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or not 1 <= max_tokens <= 1_000_000):
        add("max_tokens", "an integer from 1 to 1000000")
    for problem in rate_limit_errors(model.get("rate_limit")):
        add("rate_limit", problem)
    if "stream" in model and not isinstance(model["stream"], bool):
        add("stream", "true or false")
    script = model.get("script")  # a scripted agent's tasks that come with none: child tasks
    if script is not None and (backend != "scripted" or not isinstance(script, list)
                               or len(script) > 5000):
        add("script", "a scripted agent's list of decisions (at most 5000)")
    if "system_prompt" in model and not isinstance(model["system_prompt"], str):
        add("system_prompt", "a string")
    for problem in breaker_errors(model.get("breaker")):
        add("breaker", problem)
    _key_errors(model, "", add)
    if model.get("prices") is not None:
        errors.update(prices_errors(model["prices"]))
    fb = model.get("fallback")
    if fb is not None:
        if not isinstance(fb, dict):
            add("fallback", "a JSON object {name, base_url?, api_key_env?}")
        else:
            for key in fb:
                if str(key).lower() in FORBIDDEN_KEYS:
                    add(f"fallback.{key}", "secrets are not stored on a profile")
            if not isinstance(fb.get("name"), str) or not fb["name"].strip():
                add("fallback.name", "the fallback model name is required")
            if fb.get("base_url") is not None:
                if not _is_http_url(fb["base_url"]):
                    add("fallback.base_url", "an http(s) URL")
                elif problem := url_problem(fb["base_url"]):
                    add("fallback.base_url", problem)
            _key_errors(fb, "fallback.", add)
            for problem in rate_limit_errors(fb.get("rate_limit")):
                add("fallback.rate_limit", problem)
            if fb.get("prices") is not None:
                errors.update(prices_errors(fb["prices"], "fallback.prices"))
            elif model.get("prices") is not None:
                add("fallback.prices", "required when the model has prices: the fallback is "
                                       "another model, with its own price")
    return errors


def _key_errors(target: dict[str, Any], prefix: str, add: Any) -> None:
    """A model's key reference: a secret name or a variable name, not both."""
    env, secret = target.get("api_key_env"), target.get("api_key_secret")
    if env is not None and not _is_env_name(env):
        add(f"{prefix}api_key_env", "the name of an environment variable (letters, digits, _)")
    if secret is not None and (not isinstance(secret, str) or not SECRET_NAME.fullmatch(secret)):
        add(f"{prefix}api_key_secret", f"the name of a secret of this tenant: {SECRET_NAME_RULE}")
    if env and secret:
        add(f"{prefix}api_key_secret", "name the key as a secret or a variable, not both")


def _is_http_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) > 8


def _is_env_name(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 128 and not value[0].isdigit()
            and all(c.isalnum() or c == "_" for c in value))
