"""The `openai` backend: any OpenAI-compatible chat-completions endpoint
(OpenAI, vLLM, Ollama, llama.cpp server, DeepSeek, Qwen) through the official
`openai` SDK.

Retries are ours, not the SDK's (the client has ``max_retries=0``), so they
are bounded, logged and deterministic:

- every call has the profile's `timeout_s`, which bounds the whole call
  (connect to last byte);
- calls are async (`adecide`; the runner awaits them on the process's I/O
  loop, holding no thread); the SDK client of a base URL is built once per
  loop, on the long-lived httpx2 async client of
  `tools_app.outbound` (the outbound-address policy, no redirects, the total
  deadline); an address the policy refuses is not retried;
- the waits between retries are `asyncio.sleep`: they hold no thread either;
- transient errors (timeout, connection error, 408, 409, 429, 5xx, a reply
  with no choices) are retried up to `max_retries` times with exponential
  backoff and full jitter; `Retry-After` / `retry-after-ms` is honoured;
- other errors (400, 401, 403, 404, 422) are not retried on the same model;
- with ``"stream": true`` in the model settings the reply is asked for as a
  stream (`streaming`): each chunk is told to the caller's `TokenSink` (the
  live tokens) and the chunks are assembled into the body the plain call
  returns, so everything after the call (retries, refusals, the decision,
  its price) is the same; a stream cut short is a failed attempt like any other;
- when the primary model keeps failing (or asks to wait longer than
  `max_wait_s`), the profile's `fallback` model gets the same treatment;
- a reply the provider's safety filter blocked (`finish_reason`
  "content_filter") or the model refused (`message.refusal`) is asked once
  more of the same model, then of the fallback; each is in
  the reply's `refusals`; when every one refuses, `ModelRefused` (the runner
  escalates the task to a person);
- when both fail, `GatewayError` tells the runner whether to come back later
  (`retryable`, with the server's `retry_after_s`; the runner's backoff grows
  across slices) or to fail the task;
- with a `guard` (the runner's circuit breakers, per endpoint and model), a
  target whose breaker is open is not called (the fallback is tried instead)
  and every call's outcome is reported to it; when the last word is a
  breaker's, `GatewayError.held` says so;
- with a `limiter` (the runner's rate limits, `tools_app.ratelimits`), a
  target with a `rate_limit` reserves the call's estimated tokens
  (`estimate_tokens`) before each request and settles them with the reply's
  usage after it; a call that must wait is not made and the runner is told to
  come back at its slot (`GatewayError.rate_limited`), without trying the
  fallback (a wait is not a failure, and the slot is kept for this task); a 429
  holds the target's limit for its `Retry-After`, and the next attempt waits
  for it there rather than in the step.

The API key of each model is resolved by the runner for the task's tenant
(`accounts_app.vault.lookup.model_keys`) and handed in as `keys`; the gateway
reads no secret itself. An endpoint may echo the key back: every reply and
every error message is redacted of it before it is logged or returned.

Token usage comes from each reply's `usage`. The reply's raw JSON, the
failed attempts before it and a one-line summary of the input go into the
step's decision log.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx2
import openai
from django.conf import settings
from openai._base_client import make_request_options
from openai._httpx2 import request_exceptions, timeout_exceptions
from openai._models import FinalRequestOptions

from accounts_app.vault.values import Resolved, Unresolved
from foundations.ioloop import run_io
from foundations.metrics import observe_model_call
from foundations.tracing import model_call_span
from tools_app.outbound import (
    GATHER_EVENTS_S,
    REFUSED,
    EgressRefusedError,
    Registry,
    ResponseRefusedError,
    ResponseTooLargeError,
    async_client_for,
)
from tools_app.outbound.clients import MAX_ENDPOINTS
from tools_app.outbound.retry_after import retry_after_s
from tools_app.ratelimits import estimate_tokens

from ..pricing import TokenUsage
from .base import (
    CallGuard,
    CallLimiter,
    ContextSnapshot,
    GatewayError,
    ModelRefused,
    ModelReply,
    Summarized,
)
from .messages import build_messages, input_summary, tool_catalogue, tool_names_back
from .model_settings import NO_KEY, ModelSettings, ModelTarget, parse_model_settings
from .replies import decisions_from_message, refusal_of
from .streaming import GATHER_S, Assembler, NoSink, TokenSink, sse_data

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({408, 409, 429})
# What says the endpoint is down (a breaker counts it), and what never reached it.
OUTAGE_KINDS = frozenset({"timeout", "connection"})
NOT_SENT_KINDS = frozenset({"no_api_key", "invalid_url", "egress_refused"})
SUMMARY_MAX_TOKENS = 800
SUMMARY_SYSTEM = (
    "You keep the running notes of an agent working on a task. Merge the previous notes and the "
    "new steps into new notes: keep every fact needed to finish the goal (ids, amounts, names, "
    "results, errors, what a person decided, what is still to do) and drop chatter. Refer to "
    "steps as step:N. Plain text, at most {chars} characters."
)


@dataclass(frozen=True)
class _Completed:
    body: dict[str, Any]
    target: ModelTarget
    used_fallback: bool
    attempts: int
    latency_ms: int
    failures: tuple[dict[str, Any], ...]


class _Failure(Exception):
    def __init__(self, message: str, *, retryable: bool, retry_after_s: float | None = None,
                 status: int | None = None, kind: str = "bad_reply") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.status = status
        # the error's label in metrics: a few fixed values, never the message
        self.kind = f"http_{status // 100}xx" if status else kind


class OpenAIBackend:
    name = "openai"

    def __init__(self, model: dict[str, Any], keys: Resolved | None = None,
                 guard: CallGuard | None = None, limiter: CallLimiter | None = None,
                 tokens: TokenSink | None = None) -> None:
        self.settings: ModelSettings = parse_model_settings(model)
        self.keys = keys or Resolved()
        self.guard = guard
        self.limiter = limiter
        self.tokens: TokenSink = tokens or NoSink()
        if not self.settings.primary.name or not self.settings.primary.base_url:
            raise GatewayError("the openai backend needs a model name and a base_url",
                               retryable=False, calls=0)

    # --- the backend interface ------------------------------------------------

    def decide(self, context: ContextSnapshot) -> ModelReply:
        """`adecide` for a synchronous caller (it waits on the process's I/O loop)."""
        return run_io(self.adecide(context))

    async def adecide(self, context: ContextSnapshot) -> ModelReply:
        messages = build_messages(context)
        tools = tool_catalogue(context.tools, context.offers)
        request: dict[str, Any] = {"messages": messages, "tools": tools}
        request.update(self._sampling())
        try:
            done, refused = await self._answered(request, stream=self.settings.stream)
        finally:
            self.tokens.finished()
        choice = _choice(done.body)
        decisions = decisions_from_message(choice.get("message") or {},
                                           finish_reason=choice.get("finish_reason"),
                                           names=tool_names_back(context.tools))
        return ModelReply(
            decisions=decisions,
            model=done.target.name,
            tokens=_tokens(done.body) + sum(_tokens(r.body) for r in refused),
            latency_ms=done.latency_ms,
            raw=json.dumps({"response": done.body, "failed_attempts": list(done.failures),
                            **({"refused": [r.body for r in refused]} if refused else {})},
                           default=str),
            input_summary=input_summary(context, messages, tools),
            used_fallback=done.used_fallback,
            attempts=done.attempts + sum(r.attempts for r in refused),
            usage=TokenUsage.from_openai(done.body.get("usage")),
            refusals=_refusals(refused, answered=done),
        )

    async def _answered(self, request: dict[str, Any], *,
                        stream: bool = False) -> tuple[_Completed, list[_Completed]]:
        """A reply that is not a refusal, and the refused ones before it. A
        refused reply (`refusal_of`: a safety filter, or the model's refusal) is
        asked once more of the same model, then of the fallback model; when
        every one refuses, `ModelRefused`: a person decides."""
        refused: list[_Completed] = []
        done = await self._complete(request, stream=stream)
        fallback = self.settings.fallback
        plan = [done.target]  # the model that answered, once more
        if fallback is not None and not done.used_fallback:
            plan.append(fallback)
        for target in plan:
            if refusal_of(_choice(done.body)) is None:
                return done, refused
            refused.append(done)
            again = await self._complete(request, targets=[target], stream=stream)
            done = replace(again, used_fallback=again.used_fallback or target is fallback)
        if refusal_of(_choice(done.body)) is None:
            return done, refused
        refused.append(done)
        refusals = _refusals(refused, answered=None)
        raise ModelRefused(
            f"every model asked refused to answer: {refusals[-1]['reason']}",
            refusals=refusals, calls=sum(r.attempts for r in refused))

    def summarize(self, *, goal: str, previous: str, steps: list[dict[str, Any]],
                  max_chars: int) -> Summarized:
        """New running notes from the previous ones and older steps, with the
        call's usage. Raises `GatewayError`."""
        user = (f"Goal: {goal}\n\nPrevious notes:\n{previous or '(none)'}\n\n"
                "New steps (JSON, one a line):\n"
                + "\n".join(json.dumps(s, default=str) for s in steps))
        request: dict[str, Any] = {
            "messages": [{"role": "system", "content": SUMMARY_SYSTEM.format(chars=max_chars)},
                         {"role": "user", "content": user}],
            "max_tokens": SUMMARY_MAX_TOKENS,
        }
        if self.settings.temperature is not None:
            request["temperature"] = 0.0
        done = run_io(self._complete(request))
        choice = (done.body.get("choices") or [{}])[0]
        text = str((choice.get("message") or {}).get("content") or "").strip()
        if not text:
            raise GatewayError("the model returned an empty summary", retryable=False)
        return Summarized(text=text[:max_chars], tokens=_tokens(done.body), model=done.target.name,
                          usage=TokenUsage.from_openai(done.body.get("usage")),
                          used_fallback=done.used_fallback)

    # --- calling with retries and fallback ------------------------------------

    def _sampling(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.settings.temperature is not None:
            out["temperature"] = self.settings.temperature
        if self.settings.top_p is not None:
            out["top_p"] = self.settings.top_p
        if self.settings.max_tokens is not None:
            out["max_tokens"] = self.settings.max_tokens
        return out

    async def _complete(self, request: dict[str, Any],
                        targets: list[ModelTarget] | None = None, *,
                        stream: bool = False) -> _Completed:
        """`request` answered by the first of `targets` (default: the primary,
        then the fallback) that does, with retries (`stream`: asked for as a
        stream, its tokens told to `self.tokens`); raises `GatewayError`."""
        s = self.settings
        if targets is None:
            targets = [s.primary] + ([s.fallback] if s.fallback else [])
        failures: list[dict[str, Any]] = []
        attempts = 0
        last: _Failure | None = None
        held_s: float | None = None  # set while the latest word is a breaker's
        tokens = estimate_tokens(request, request.get("max_tokens"))
        for index, target in enumerate(targets):
            for attempt in range(1, s.max_retries + 2):
                wait = await self._admit(target)
                if wait is not None:
                    held_s = wait if held_s is None else min(held_s, wait)
                    break  # its breaker is open: the fallback, or come back later
                held_s = None
                await self._reserve(target, tokens, calls=attempts)
                attempts += 1
                started = time.monotonic()
                try:
                    with model_call_span(provider=self.name, model=target.name,
                                         base_url=target.base_url, request=request) as traced:
                        body = self.keys.redact(
                            await self._call_once(target, request, traced.headers, stream))
                        traced.reply(body)
                except _Failure as raw:
                    exc = last = _Failure(self.keys.redact(str(raw)), retryable=raw.retryable,
                                          retry_after_s=raw.retry_after_s, status=raw.status,
                                          kind=raw.kind)
                    observe_model_call(model=target.name, seconds=time.monotonic() - started,
                                       error=exc.kind)
                    failures.append({"model": target.name, "attempt": attempt, "error": str(exc),
                                     "status": exc.status,
                                     "latency_ms": int((time.monotonic() - started) * 1000)})
                    log.warning("model %s attempt %s failed: %s", target.name, attempt, exc)
                    await self._record(target, exc)
                    throttled = await self._settle(target, None, exc)
                    if not exc.retryable or attempt > s.max_retries:
                        break
                    if throttled:
                        continue  # its limit now holds the Retry-After: the next reserve waits
                    delay = _backoff_s(attempt, exc.retry_after_s)
                    if delay > s.max_wait_s:
                        break  # too long to wait in the step: the fallback, or come back later
                    await asyncio.sleep(delay)  # holds no thread
                    continue
                observe_model_call(model=target.name, seconds=time.monotonic() - started,
                                   usage=body.get("usage"))
                await self._record(target, None)
                await self._settle(target, body, None)
                return _Completed(body=body, target=target, used_fallback=index > 0,
                                  attempts=attempts, failures=tuple(failures),
                                  latency_ms=int((time.monotonic() - started) * 1000))
        names = " and ".join(t.name for t in targets)
        if held_s is not None or last is None:
            raise GatewayError(f"the circuit breaker of {names} is open", retryable=True,
                               retry_after_s=held_s or 0.0, calls=attempts, held=True)
        raise GatewayError(f"{names} failed after {attempts} attempts: {last}",
                           retryable=last.retryable, retry_after_s=last.retry_after_s,
                           calls=attempts)

    async def _admit(self, target: ModelTarget) -> float | None:
        if self.guard is None:
            return None
        return await self.guard.admit(target.base_url, target.name,
                                      timeout_s=self.settings.timeout_s)

    async def _reserve(self, target: ModelTarget, tokens: int, *, calls: int) -> None:
        """Take the call's tokens from the target's rate limit; raise when it must
        wait (its breaker's probe, if one was taken, is given back: nothing sent)."""
        if self.limiter is None or not target.rate_limit.enabled:
            return
        wait = await self.limiter.reserve(target, tokens)
        if wait is None:
            return
        if self.guard is not None:
            await self.guard.record(target.base_url, target.name, failed=None, error="")
        raise GatewayError(f"waiting for the rate limit of {target.name}", retryable=True,
                           retry_after_s=wait, calls=calls, rate_limited=True)

    async def _settle(self, target: ModelTarget, body: dict[str, Any] | None,
                      failure: _Failure | None) -> bool:
        """Correct the target's reservation with the reply's usage; whether the
        endpoint said it was over its limit (429)."""
        if self.limiter is None or not target.rate_limit.enabled:
            return False
        if failure is None:
            used = _tokens(body) if body and body.get("usage") else None  # none: keep it all
            await self.limiter.settle(target, used=used, sent=True)
            return False
        throttled = failure.status == 429
        await self.limiter.settle(target, used=None, sent=failure.kind not in NOT_SENT_KINDS,
                                  throttled=throttled, retry_after_s=failure.retry_after_s)
        return throttled

    async def _record(self, target: ModelTarget, failure: _Failure | None) -> None:
        if self.guard is None:
            return
        if failure is None:
            await self.guard.record(target.base_url, target.name, failed=False, error="")
            return
        outage: bool | None = failure.kind in OUTAGE_KINDS or (
            failure.status is not None and (failure.status in (408, 429) or failure.status >= 500))
        if failure.kind in NOT_SENT_KINDS:
            outage = None
        await self.guard.record(target.base_url, target.name, failed=outage,
                                error=str(failure)[:500])

    async def _call_once(self, target: ModelTarget, request: dict[str, Any],
                         headers: dict[str, str], stream: bool = False) -> dict[str, Any]:
        try:
            key = self.keys.get(target.key_ref) if target.key_ref else NO_KEY
        except Unresolved as exc:
            raise _Failure(f"no API key for {target.name}: {exc}", retryable=False,
                           kind="no_api_key")
        try:
            client = sdk_client(target.base_url, key=key, timeout_s=self.settings.timeout_s)
        except (httpx2.InvalidURL, httpx2.UnsupportedProtocol):
            raise _Failure(f"{target.base_url!r} is not an http(s) URL", retryable=False,
                           kind="invalid_url")
        try:
            # The raw endpoint: `chat.completions.create` transforms the request
            # against its TypedDicts and parses the reply into pydantic models,
            # three times the CPU of the call itself (8.6 vs 2.8 ms measured, a
            # 16-step context); the reply is wanted as plain data anyway.
            # `headers`: the trace context of the call's span (`traceparent`).
            options = (make_request_options(security=_BEARER_AUTH, extra_headers=headers)
                       if headers else _BEARER)
            if stream:
                body = await self._streamed(client, target, request, options)
            else:
                body = await client.post("/chat/completions",
                                         body={"model": target.name, **request},
                                         cast_to=object, options=options)
        except openai.APITimeoutError:
            raise _Failure(f"no reply within {self.settings.timeout_s:g}s", retryable=True,
                           kind="timeout")
        except openai.APIConnectionError as exc:
            if isinstance(exc.__cause__, EgressRefusedError):
                raise _Failure(REFUSED, retryable=False, kind="egress_refused")
            if isinstance(exc.__cause__, ResponseRefusedError):  # asking again gets as much
                kind = ("reply_too_large" if isinstance(exc.__cause__, ResponseTooLargeError)
                        else "reply_refused")
                raise _Failure(f"bad reply: {exc.__cause__}", retryable=False, kind=kind)
            raise _Failure(f"connection failed: {exc}", retryable=True, kind="connection")
        except openai.APIStatusError as exc:
            status = exc.status_code
            retryable = status in TRANSIENT_STATUS or status >= 500
            raise _Failure(f"HTTP {status}: {_short(exc.message)}", retryable=retryable,
                           retry_after_s=retry_after_s(exc.response.headers), status=status)
        except openai.APIError as exc:  # e.g. a body that is not a completion
            raise _Failure(f"bad reply: {_short(str(exc))}", retryable=True)
        if not isinstance(body, dict):
            raise _Failure("bad reply: not a JSON object", retryable=True)
        body = _without_nulls(body)
        if not body.get("choices"):
            raise _Failure("the reply has no choices", retryable=True)
        return body

    async def _streamed(self, client: openai.AsyncOpenAI, target: ModelTarget,
                        request: dict[str, Any], options: Any) -> Any:
        """The reply asked for as a stream, its chunks told to `self.tokens` and
        assembled (`streaming.Assembler`); the SDK's errors propagate as in a
        plain call. The usage comes in a last chunk (`include_usage`)."""
        self.tokens.call_started()
        chunks = await client.post(
            "/chat/completions",
            body={"model": target.name, **request, "stream": True,
                  "stream_options": {"include_usage": True}},
            cast_to=object, options=options, stream=True, stream_cls=_Chunks)
        assembler = Assembler(self.tokens)
        async with chunks:
            async for chunk in chunks:
                assembler.add(chunk)
        if not assembler.chunks:
            raise _Failure("the stream ended before its first chunk", retryable=True)
        return assembler.body()


class _Chunks(openai.AsyncStream[object]):
    """The SDK's stream of a chat completion, its events read by `sse_data` (the
    SDK's errors as the SDK raises them: an `error` object in an event, a
    timeout or a broken connection mid-stream)."""

    async def __stream__(self) -> AsyncIterator[object]:  # type: ignore[override]
        response = self.response
        pieces = response.aiter_bytes()  # held here: closed once the body is drained
        try:
            async for data in sse_data(pieces):
                if isinstance(data, dict) and data.get("error"):
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(message=message if isinstance(message, str) else
                                          "An error occurred during streaming",
                                          request=response.request, body=error)
                yield data
            await _drained(pieces)
        except ValueError as exc:
            raise openai.APIError(message=f"bad event in the stream: {exc}",
                                  request=response.request, body=None) from exc
        except timeout_exceptions() as exc:
            raise openai.APITimeoutError(request=response.request) from exc
        except request_exceptions() as exc:
            raise openai.APIConnectionError(request=response.request) from exc
        finally:
            await pieces.aclose()
            await response.aclose()


# How long the end of a body is waited for after `[DONE]` (the SDK's wait).
DRAIN_S = 0.1


async def _drained(pieces: AsyncIterator[bytes]) -> None:
    """What is left of a streamed body after `[DONE]` (its end, normally at
    once) read, so that its connection is kept for the next call: closed
    unread, every streamed reply opened a connection of its own. Given up
    after `DRAIN_S`: the reply is complete either way."""
    with contextlib.suppress(TimeoutError, *request_exceptions()):
        async with asyncio.timeout(DRAIN_S):
            async for _ in pieces:
                pass


_BEARER_AUTH: Any = {"bearer_auth": True}  # the key as a bearer token
_BEARER = make_request_options(security=_BEARER_AUTH)


def _without_nulls(value: Any) -> Any:
    """The reply as the SDK's models dumped it (`exclude_none`): no null fields."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class _SDKClient(openai.AsyncOpenAI):
    """The SDK's client, each request path joined to its base URL once and its
    default headers built once: the SDK did both anew at every request, a
    twentieth of an I/O worker's CPU (py-spy). A kept client's settings never
    change (`with_options` makes a new one, with memos of its own)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prepared_urls: dict[str, httpx2.URL] = {}

    @functools.cached_property
    def default_headers(self) -> dict[str, Any]:  # type: ignore[override]
        return dict(super().default_headers)

    def _prepare_url(self, url: str) -> httpx2.URL:
        prepared = self._prepared_urls.get(url)
        if prepared is None:
            prepared = self._prepared_urls[url] = super()._prepare_url(url)
        return prepared

    def _build_request(self, options: FinalRequestOptions, *,
                       retries_taken: int = 0) -> httpx2.Request:
        """The request; a streamed reply's events read in gathered pieces
        (`streaming.GATHER_S`)."""
        request = super()._build_request(options, retries_taken=retries_taken)
        if isinstance(options.json_data, dict) and options.json_data.get("stream") is True:
            request.extensions[GATHER_EVENTS_S] = GATHER_S
        return request


# one per (base URL, outbound client, key, timeout): a few per endpoint
_sdk_clients: Registry[openai.AsyncOpenAI] = Registry(MAX_ENDPOINTS * 4)


def sdk_client(base_url: str, *, key: str = NO_KEY,
               timeout_s: float | None = None) -> openai.AsyncOpenAI:
    """The SDK client of `base_url` with `key` and `timeout_s`, on the outbound
    async client of its endpoint (a new one when that client was replaced).
    Kept, not derived per call (`with_options`): a fresh SDK client looks up
    the platform in a thread on its first request, a thread hop per model call.
    The SDK's own retries are off: ours are bounded, logged and deterministic."""
    http = async_client_for(base_url)

    def build() -> openai.AsyncOpenAI:
        client = _SDKClient(base_url=base_url, api_key=key, max_retries=0, http_client=http)
        return client if timeout_s is None else client.with_options(timeout=timeout_s)

    return _sdk_clients.get((base_url, http, key, timeout_s), build)


def _choice(body: dict[str, Any]) -> dict[str, Any]:
    return (body.get("choices") or [{}])[0]


def _refusals(refused: list[_Completed], *,
              answered: _Completed | None) -> tuple[dict[str, Any], ...]:
    """Each refused reply, and what came after it: the same model asked again,
    the fallback, or (none answered) a person."""
    out = []
    for index, done in enumerate(refused):
        after = refused[index + 1] if index + 1 < len(refused) else answered
        then = ("person" if after is None
                else "fallback" if after.target is not done.target else "again")
        out.append({"model": done.target.name, "reason": refusal_of(_choice(done.body)),
                    "then": then})
    return tuple(out)


def _tokens(body: dict[str, Any]) -> int:
    usage = body.get("usage") or {}
    total = usage.get("total_tokens")
    if total is None:
        total = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return max(0, int(total or 0))


def _backoff_s(attempt: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter, bounded; a server's Retry-After wins when larger."""
    cfg = settings.TETHER
    base, cap = float(cfg["BACKOFF_BASE_S"]), float(cfg["BACKOFF_MAX_S"])
    ceiling = min(cap, base * 2 ** max(0, attempt - 1))
    return max(random.uniform(0.0, ceiling), retry_after or 0.0)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
