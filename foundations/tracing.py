"""OpenTelemetry traces: one trace per task, whatever process works on it.

On only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
is set and `OTEL_SDK_DISABLED` is not true; every other standard `OTEL_*`
variable is the SDK's and exporters' own (service name, resource attributes,
headers, timeout, sampler, `OTEL_BSP_*`). `setup(kind)` runs once per process:
the ASGI/WSGI application (`web`), each Celery pool process after the fork
(`worker`), beat (`beat`). Off, every hook below is a no-op that costs a check
of one global; the SDK and the exporters are not even imported.

The task's trace id *is* its `trace_id` (32 hex digits, made at submission).
Each step span's parent is a remote span context built from it, so the steps
of one task join one trace across slices, workers and hosts; its span id is
derived from the trace id (`root_span_id`), and the task's root span
(`invoke_agent {agent}`, from submission to the end) is written with that id
by the process whose commit ends the task (`task_ended`). Sampling is decided
on the trace id, the same way in every process (`OTEL_TRACES_SAMPLER`).

Spans: `step {kind}` for each runner step (`step_span`); `chat {model}` for
each request to a model endpoint (`model_call_span`, GenAI semantic
conventions: `gen_ai.operation.name`, `gen_ai.provider.name`,
`gen_ai.request.model`, `gen_ai.usage.input_tokens`,
`gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`);
`execute_tool {tool}` for each tool call (`tool_span`: `gen_ai.tool.name`,
`gen_ai.tool.call.id`). A person's part (approval requested and decided,
question asked and answered, reconciliation opened and settled, escalation and
resume; named by `tasks_app.services.task_traces`) is a span event
(`task_event`): on the step span that asked, or, when a person answers in the
web process, on a short `human {event}` span of the task's trace linked to the
request that carried the answer. Prompts, replies,
arguments and results are never recorded: they are tenants' data.

The span that submits a task (the API request's) links to the task's trace
(`task_submitted`).

`outgoing_headers` gives the W3C `traceparent` of the current span for a
request made for a task (tools, model endpoints), so the downstream service's
spans nest under the very span that called it. Off, it is made from the task's
trace id and a random span id, as before traces existed.

The Django, Celery, psycopg, httpx and httpx2 instrumentations are switched on
with the SDK. Tether's own outbound clients (`tools_app.outbound`) use a
transport of their own (the outbound-address policy), which the httpx2
instrumentation does not wrap; their calls are the `chat` and `execute_tool`
spans above.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from .logs import log_context

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_SERVICE_NAME = "tether"
TRACER_NAME = "tether"

_provider: Any = None  # the SDK's TracerProvider, once `setup` ran in this process
_stopped = False  # `shutdown` ran: no second provider in this process
_setup_lock = threading.Lock()
# The ids the next span gets, when they must be the task's (its root span).
_forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("tether_forced_span_ids",
                                                             default=None)


# --- switching on ----------------------------------------------------------------------


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def enabled() -> bool:
    return _provider is not None


def setup(kind: str) -> bool:
    """Start exporting this process's spans (once; a no-op when not `configured`).
    `kind`: web, worker or beat (the resource's `tether.process.kind`)."""
    global _provider
    if _provider is not None or _stopped or not configured():
        return _provider is not None
    with _setup_lock:
        if _provider is not None or _stopped:
            return _provider is not None
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes: dict[str, Any] = {"tether.process.kind": kind}
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", ""):
            attributes["service.name"] = DEFAULT_SERVICE_NAME
        # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the
        # sampler comes from OTEL_TRACES_SAMPLER, the batch sizes from OTEL_BSP_*.
        provider = TracerProvider(resource=Resource.create(attributes),
                                  id_generator=_task_ids(), shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
        trace.set_tracer_provider(provider)
        _provider = provider
        atexit.register(shutdown)
        _instrument()
    log.info("traces exported over OTLP (%s) as %s", _protocol(), kind)
    return True


def shutdown() -> None:
    """Send what is still queued, then stop (process exit; a pool process's end).
    Once: the exit handler may follow Celery's shutdown signal."""
    global _provider, _stopped
    with _setup_lock:
        provider, _provider, _stopped = _provider, None, True
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # exiting anyway: never fail the exit for traces
            log.exception("could not flush the last spans")


def _protocol() -> str:
    return (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()


def _exporter() -> Any:
    """The OTLP span exporter of the configured protocol; endpoint, headers,
    timeout, compression and certificates are read from the environment by it."""
    protocol = _protocol()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    else:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: Tether exports traces "
                         f"over {' or '.join(PROTOCOLS)}")
    return OTLPSpanExporter()


def _instrument() -> None:
    """The libraries' own instrumentations: requests served (Django), messages
    sent and run (Celery), SQL (psycopg), HTTP clients on their stock transports."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import (
        HTTPX2ClientInstrumentor,
        HTTPXClientInstrumentor,
    )
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument(skip_dep_check=True)
    HTTPXClientInstrumentor().instrument()
    HTTPX2ClientInstrumentor().instrument()


def _task_ids() -> Any:
    """Random ids, except for a span whose ids must be the task's (`_forced_ids`;
    a task's trace id is random too: `secrets.token_hex`)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class TaskIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            forced = _forced_ids.get()
            return forced[1] if forced else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _forced_ids.get()
            return forced[0] if forced else super().generate_trace_id()

    return TaskIds()


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


# --- the task's trace ----------------------------------------------------------------


def trace_id_int(trace_id: str) -> int | None:
    """The task's trace id as OpenTelemetry's integer; None when it is not one."""
    if len(trace_id) != 32:
        return None
    try:
        value = int(trace_id, 16)
    except ValueError:
        return None
    return value or None


def root_span_id(trace_id: str) -> int:
    """The span id of the task's root span: the same in every process."""
    digest = hashlib.sha256(b"tether.task:" + trace_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _sampled(trace_id: int) -> bool:
    """The sampler's decision for a task's trace, as for a root span: a ratio
    sampler decides on the trace id, so every process decides alike."""
    result = _provider.sampler.should_sample(Context(), trace_id, "task")
    return bool(result.decision.is_sampled())


def _task_context(trace_id: str) -> Context | None:
    """A context whose current span is the task's root span (remote: written
    once, by the process that ends the task)."""
    value = trace_id_int(trace_id)
    if value is None:
        return None
    flags = TraceFlags(TraceFlags.SAMPLED if _sampled(value) else TraceFlags.DEFAULT)
    parent = SpanContext(trace_id=value, span_id=root_span_id(trace_id), is_remote=True,
                         trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(parent), Context())


def _link_to_current(trace_id: int | None) -> list[Link]:
    """A link to the span this process was in (a Celery message's, a request's)
    when it belongs to another trace than the task's: it shows what carried the work."""
    context = trace.get_current_span().get_span_context()
    return [Link(context)] if context.is_valid and context.trace_id != trace_id else []


@dataclass
class StepTrace:
    outcome: str = ""  # what the step returned (continue, stop, later)


@contextmanager
def step_span(*, trace_id: str, task_id: int) -> Iterator[StepTrace]:
    """One runner step, in the task's trace (`foundations.metrics.step_scope` opens it
    with the step's log scope). The step's number and kind are read, at its end,
    from the log context the runner binds once per step (`foundations.logs.bind_log`)."""
    handle = StepTrace()
    if _provider is None:
        yield handle
        return
    with _tracer().start_as_current_span(
            "step", context=_task_context(trace_id), links=_link_to_current(trace_id_int(trace_id)),
            attributes={"tether.task.id": task_id}) as span:
        try:
            yield handle
        finally:
            bound = log_context()
            kind = str(bound.get("step_kind") or "")
            if kind:
                span.update_name(f"step {kind}")
            span.set_attributes(_present({
                "tether.step.no": bound.get("step_no"), "tether.step.kind": kind,
                "tether.step.outcome": handle.outcome, "tether.tenant.id": bound.get("tenant"),
                "gen_ai.agent.name": bound.get("agent")}))


@dataclass
class ModelTrace:
    span: Span | None = None
    headers: dict[str, str] = field(default_factory=dict)  # for the request: traceparent

    def reply(self, body: Mapping[str, Any]) -> None:
        """Record what the response says of itself (never its content)."""
        if self.span is None or not self.span.is_recording():
            return
        usage: Mapping[str, Any] = body.get("usage") or {}
        choices: list[Any] = body.get("choices") or []
        if not isinstance(usage, Mapping) or not isinstance(choices, list):
            return  # not a completion: nothing more to say of it
        reasons = [str(c.get("finish_reason")) for c in choices
                   if isinstance(c, Mapping) and c.get("finish_reason")]
        self.span.set_attributes(_present({
            "gen_ai.response.model": body.get("model") or None,
            "gen_ai.response.id": body.get("id") or None,
            "gen_ai.usage.input_tokens": _count(usage.get("prompt_tokens")),
            "gen_ai.usage.output_tokens": _count(usage.get("completion_tokens")),
            "gen_ai.response.finish_reasons": reasons,
        }))


@contextmanager
def model_call_span(*, provider: str, model: str, base_url: str,
                    request: Mapping[str, Any] | None = None) -> Iterator[ModelTrace]:
    """One request to a model endpoint: `chat {model}`. An exception leaving the
    block marks the span failed, with `error.type` from the exception's `kind`."""
    if _provider is None:
        yield ModelTrace()
        return
    request = request or {}
    url = urlsplit(base_url)
    attributes = _present({
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
        "gen_ai.request.model": model, "server.address": url.hostname,
        "server.port": url.port or (443 if url.scheme == "https" else 80),
        "gen_ai.request.temperature": request.get("temperature"),
        "gen_ai.request.top_p": request.get("top_p"),
        "gen_ai.request.max_tokens": request.get("max_tokens"),
    })
    with _tracer().start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT,
                                         attributes=attributes,
                                         record_exception=False,
                                         set_status_on_exception=False) as span:
        handle = ModelTrace(span=span, headers=outgoing_headers(""))
        try:
            yield handle
        except Exception as exc:
            _failed(span, str(getattr(exc, "kind", "") or type(exc).__name__), str(exc))
            raise


@dataclass
class ToolTrace:
    span: Span | None = None

    def outcome(self, kind: str, *, error: Mapping[str, Any] | None = None,
                from_ledger: bool = False) -> None:
        """What came of the call (`tools_app.executor.OutcomeKind`'s value)."""
        if self.span is None or not self.span.is_recording():
            return
        self.span.set_attributes({"tether.tool.outcome": kind,
                                  "tether.tool.from_ledger": from_ledger})
        if kind not in ("ok", "processing"):  # processing: another executor holds the call
            detail = (error or {}).get("type") if isinstance(error, Mapping) else None
            _failed(self.span, str(detail or kind), str((error or {}).get("message") or kind))


@contextmanager
def tool_span(*, tool: str, call_id: str, kind: str, idempotency_key: str = "") -> Iterator[
        ToolTrace]:
    """One tool call through the ledger: `execute_tool {tool}`; `kind` is the
    tool's (python, http, ...). An HTTP tool's request carries this span in its
    `traceparent` (`outgoing_headers`)."""
    if _provider is None:
        yield ToolTrace()
        return
    attributes = _present({
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id,
        # semantic conventions: code run in the agent's process is a function;
        # a call to a service is an extension
        "gen_ai.tool.type": "function" if kind == "python" else "extension",
        "tether.tool.kind": kind, "tether.idempotency_key": idempotency_key or None,
    })
    with _tracer().start_as_current_span(f"execute_tool {tool}", attributes=attributes) as span:
        yield ToolTrace(span=span)


def outgoing_headers(trace_id: str) -> dict[str, str]:
    """`traceparent` (and `tracestate` when there is one) for a request made for a
    task: the current span's; off, or outside any span, the task's trace id
    (`trace_id`) with a random span id."""
    headers: dict[str, str] = {}
    if _provider is not None:
        propagate.inject(headers)
    if "traceparent" not in headers and trace_id:
        trace = (trace_id + "0" * 32)[:32]
        headers["traceparent"] = f"00-{trace}-{secrets.token_hex(8)}-01"
    return headers


def carried_context() -> Context | None:
    """The caller's trace context (None when traces are off), for work it hands to
    a context of its own (a runner slice started from a Celery message: its step
    spans link to the message's span, `_link_to_current`)."""
    if _provider is None:
        return None
    from opentelemetry import context

    return context.get_current()


def adopt_context(carried: Context | None) -> None:
    """Make `carried` (`carried_context`) current in the running context; never
    detached: call it in a context made for the work."""
    if carried is not None:
        from opentelemetry import context

        context.attach(carried)


def task_submitted(*, trace_id: str) -> None:
    """The span that submitted a task (a request's, usually) links to the task's
    trace: from the request, a backend leads to the task's spans."""
    context = _task_context(trace_id) if _provider is not None else None
    current = trace.get_current_span()
    if context is not None and current.is_recording():
        current.add_link(trace.get_current_span(context).get_span_context(),
                         attributes={"tether.link": "task"})


def task_event(*, trace_id: str, name: str, at: datetime | None = None,
               attributes: Mapping[str, Any] | None = None) -> None:
    """A person's part in the task, committed at `at`: an event `name` on the
    current span when it is the task's (a step's), else on a `human {name}`
    span of the task's trace."""
    if _provider is None:
        return
    value = trace_id_int(trace_id)
    when = _ns(at)
    attrs = _present(dict(attributes or {}))
    current = trace.get_current_span()
    if current.is_recording() and current.get_span_context().trace_id == value:
        current.add_event(name, attributes=attrs, timestamp=when)
        return
    span = _tracer().start_span(f"human {name}", context=_task_context(trace_id),
                                links=_link_to_current(value), start_time=when, attributes=attrs)
    span.add_event(name, attributes=attrs, timestamp=when)
    span.end(end_time=when)


def task_ended(*, trace_id: str, task_id: int, agent: str, status: str,
               started_at: datetime | None, ended_at: datetime | None,
               attributes: Mapping[str, Any] | None = None) -> None:
    """The task's root span, `invoke_agent {agent}`, from its submission to its
    end, under the ids every step span named as its parent."""
    value = trace_id_int(trace_id)
    if _provider is None or value is None:
        return
    token = _forced_ids.set((value, root_span_id(trace_id)))
    try:
        span = _tracer().start_span(
            f"invoke_agent {agent}".strip(), context=Context(), links=_link_to_current(value),
            start_time=_ns(started_at or ended_at), attributes=_present({
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent or None,
                "tether.task.id": task_id, "tether.task.status": status,
                **dict(attributes or {})}))
    finally:
        _forced_ids.reset(token)
    if status == "FAILED":  # a cancel is somebody's choice, not an error
        span.set_status(Status(StatusCode.ERROR, status))
    span.end(end_time=_ns(ended_at))


# --- small helpers -------------------------------------------------------------------


def _failed(span: Span, error_type: str, message: str) -> None:
    span.set_attribute("error.type", error_type[:100])
    span.set_status(Status(StatusCode.ERROR, message[:300]))


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes without the unknown ones (OpenTelemetry refuses None)."""
    return {k: v for k, v in values.items() if v is not None and v != "" and v != []}


def _count(value: Any) -> int | None:
    try:
        return max(0, int(value)) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _ns(at: datetime | None) -> int | None:
    return int(at.timestamp() * 1_000_000_000) if at is not None else None
