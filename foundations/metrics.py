"""Prometheus metrics that processes count: their definitions, the one-line hooks
the choke points call, and where a process's figures are served from.

What each process counts (steps, model calls, tool calls, recoveries, late
results) lives here; what lives in the database (tasks by status, pending human
requests, admission's queue) is computed at scrape time by
`config.metrics_db` and never counted here.

Sharing between processes (docs/how-to/operate.md):
- `PROMETHEUS_MULTIPROC_DIR` set (processes on one host): every process writes
  its values to files there (the library decides at import time), and the web
  process's `/metrics` merges them (`MultiProcessCollector`). A Celery pool
  child that exits is marked dead (`mark_process_dead`) by `config.celery`.
- otherwise each worker serves its own figures on `TETHER_WORKER_METRICS_PORT`
  (`serve_worker_metrics`), and `/metrics` shows the web process's own.

Label values are bounded: tool and model names are chosen by tenants, so they
are normalised (`[A-Za-z0-9_.:/-]`, at most 64 characters) and each label
takes at most `MAX_NAMES` distinct values per process; later names count as
"other". Task ids and trace ids are never labels.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    start_http_server,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from .logs import log_context, log_scope
from .tracing import step_span

step_log = logging.getLogger("tether.step")

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_DIR_ENV):
    # The library writes there as soon as a metric is defined (below): a missing
    # directory would stop the process with a bare FileNotFoundError.
    os.makedirs(os.environ[MULTIPROC_DIR_ENV], exist_ok=True)
MAX_NAMES = 100
OTHER = "other"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/-]+")

# Seconds. A step may wait on a slow model (tens of seconds); a tool call is bounded
# by its timeout.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0)

STEPS = Counter(
    "tether_steps", "Steps the runner took, by the kind of step and how it ended "
    "(continue, stop, later, error).", ["kind", "outcome"])
STEP_DURATION = Histogram(
    "tether_step_duration_seconds", "Wall time of one runner step, model and tool calls included.",
    ["kind"], buckets=DURATION_BUCKETS)
MODEL_CALL_DURATION = Histogram(
    "tether_model_call_duration_seconds", "Latency of one request to a model endpoint "
    "(each attempt, the fallback model's included).", ["model"], buckets=DURATION_BUCKETS)
MODEL_TOKENS = Counter(
    "tether_model_tokens", "Tokens reported in model replies' usage, by direction "
    "(input, output).", ["model", "direction"])
MODEL_COST = Counter(
    "tether_model_cost_dollars", "Cost of model calls at the agent profiles' prices, in "
    "dollars (an unpriced model costs 0).", ["model"])
MODEL_ERRORS = Counter(
    "tether_model_errors", "Failed model requests, by error (timeout, connection, http_4xx, "
    "http_5xx, bad_reply, no_api_key).", ["model", "error"])
TOOL_CALL_DURATION = Histogram(
    "tether_tool_call_duration_seconds", "Latency of one tool call made through the ledger.",
    ["tool"], buckets=DURATION_BUCKETS)
TOOL_CALLS = Counter(
    "tether_tool_calls", "Tool calls made through the ledger, by outcome (ok, business, "
    "permission, transient, uncertain).", ["tool", "outcome"])
TASK_EVENTS = Counter(
    "tether_task_events", "Task events committed, by type (the transitions' names, "
    "step_succeeded, invalid_decision, ...).", ["type"])
TASKS_FINISHED = Counter(
    "tether_tasks_finished", "Tasks that reached a final status (SUCCEEDED, FAILED, CANCELED), "
    "counted as the transition commits.", ["status"])
RECOVERIES = Counter(
    "tether_recoveries", "RUNNING tasks the recovery sweep handed to a worker again "
    "(their lease expired: the worker died, or their message was lost).")
LATE_RESULTS = Counter(
    "tether_late_results_discarded",
    "Tool results that arrived after the task was canceled or moved on: kept, not applied.")
BREAKER_CHANGES = Counter(
    "tether_breaker_transitions", "Circuit breakers' changes of state, by what they guard "
    "(tool, model) and change (opened, half_open, reopened, closed).", ["kind", "change"])
RATE_LIMIT_WAIT = Histogram(
    "tether_rate_limit_wait_seconds", "How long a call waits for its rate limit when it "
    "reserves (0: it goes at once), by what is limited (model, tool) and its name.",
    ["kind", "name"], buckets=(0.0, *DURATION_BUCKETS, 300.0, 600.0))
RATE_LIMIT_TOKENS_RESERVED = Counter(
    "tether_rate_limit_tokens_reserved", "Tokens model calls reserved from their "
    "tokens-per-minute limit before they were sent (the estimate).", ["model"])
RATE_LIMIT_TOKENS_USED = Counter(
    "tether_rate_limit_tokens_used", "Tokens rate-limited model calls used, by their replies' "
    "usage: what the reservations were corrected to.", ["model"])


class _BoundedNames:
    """At most `limit` distinct values of one label in this process."""

    def __init__(self, limit: int = MAX_NAMES) -> None:
        self.limit = limit
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, name: str) -> str:
        value = _UNSAFE.sub("_", name or "")[:64] or "unknown"
        if value in self.seen:
            return value
        with self.lock:
            if len(self.seen) >= self.limit:
                return OTHER
            self.seen.add(value)
        return value


tool_label = _BoundedNames()
model_label = _BoundedNames()
event_label = _BoundedNames()  # written by our code, bounded all the same


# --- the hooks: one line at each choke point ----------------------------------------


def observe_step(*, kind: str, outcome: str, seconds: float) -> None:
    STEPS.labels(kind=kind, outcome=outcome).inc()
    STEP_DURATION.labels(kind=kind).observe(seconds)


@dataclass
class StepScope:
    outcome: str = "error"  # what the step returned; stays "error" when it raised


@contextmanager
def step_scope(*, trace_id: str = "", task_id: int = 0) -> Iterator[StepScope]:
    """One runner step of task `task_id`: its own log context (the step binds
    `step_no` and `step_kind` in it) and its span in the task's trace
    (`foundations.tracing.step_span`), then one count, one duration and one log line
    (within the span: the line carries its id)."""
    scope, started = StepScope(), time.monotonic()
    with log_scope(), step_span(trace_id=trace_id, task_id=task_id) as traced:
        try:
            yield scope
        finally:
            seconds = time.monotonic() - started
            context = log_context()
            kind = str(context.get("step_kind") or "none")
            observe_step(kind=kind, outcome=scope.outcome, seconds=seconds)
            step_log.info("task %s step %s (%s): %s in %d ms", context.get("task_id"),
                          context.get("step_no"), kind, scope.outcome, seconds * 1000,
                          extra={"outcome": scope.outcome, "duration_ms": int(seconds * 1000)})
            traced.outcome = scope.outcome


def observe_model_call(*, model: str, seconds: float, usage: Any = None, error: str = "") -> None:
    """One request to a model endpoint; `usage`: the reply's OpenAI-shaped usage
    (`prompt_tokens`, `completion_tokens`), `error`: a fixed label of what failed."""
    name = model_label(model)
    MODEL_CALL_DURATION.labels(model=name).observe(seconds)
    if error:
        MODEL_ERRORS.labels(model=name, error=error).inc()
    usage = usage if isinstance(usage, dict) else {}
    for direction, key in (("input", "prompt_tokens"), ("output", "completion_tokens")):
        tokens = _count(usage.get(key))
        if tokens:
            MODEL_TOKENS.labels(model=name, direction=direction).inc(tokens)


def count_spend(*, model: str, dollars: float) -> None:
    """A priced model call, after its cost committed (exact amounts live in the database)."""
    if dollars > 0:
        MODEL_COST.labels(model=model_label(model)).inc(dollars)


def _count(value: Any) -> int:
    """A token count as a model server sent it (it may send anything)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


def observe_tool_call(*, tool: str, outcome: str, seconds: float) -> None:
    name = tool_label(tool)
    TOOL_CALLS.labels(tool=name, outcome=outcome).inc()
    TOOL_CALL_DURATION.labels(tool=name).observe(seconds)


def count_task_event(type: str, *, final_status: str = "") -> None:
    """A committed event; `final_status` when its transition ended the task."""
    TASK_EVENTS.labels(type=event_label(type)).inc()
    if final_status:
        TASKS_FINISHED.labels(status=final_status).inc()


def count_recoveries(n: int) -> None:
    if n:
        RECOVERIES.inc(n)


def count_breaker_change(*, kind: str, change: str) -> None:
    BREAKER_CHANGES.labels(kind=kind, change=change).inc()


def observe_rate_limit_wait(*, kind: str, name: str, seconds: float) -> None:
    label = (model_label if kind == "model" else tool_label)(name)
    RATE_LIMIT_WAIT.labels(kind=kind, name=label).observe(seconds)


def count_rate_limit_tokens(*, model: str, reserved: int = 0, used: int = 0) -> None:
    name = model_label(model)
    if reserved:
        RATE_LIMIT_TOKENS_RESERVED.labels(model=name).inc(reserved)
    if used:
        RATE_LIMIT_TOKENS_USED.labels(model=name).inc(used)


def count_late_result() -> None:
    LATE_RESULTS.inc()


# --- where the figures are served from ------------------------------------------------


def multiprocess_dir() -> str:
    return os.environ.get(MULTIPROC_DIR_ENV, "")


def scrape_registry(extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """A registry for one scrape of `/metrics`: every process's counters (merged from
    the multiprocess directory) or this process's own, plus `extra` collectors."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_Delegate(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Delegate(Collector):
    """This process's default registry, seen as one collector of a scrape registry."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self):  # type: ignore[no-untyped-def]
        return self.source.collect()


def serve_worker_metrics(port: int, *, addr: str = "0.0.0.0") -> None:
    """Serve this process's own figures on `port` (no multiprocess directory)."""
    start_http_server(port, addr=addr)


def process_exited(pid: int) -> None:
    """Bookkeeping for a process that wrote to the multiprocess directory and exited."""
    if multiprocess_dir():
        mark_process_dead(pid)
