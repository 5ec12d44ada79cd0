"""Log lines and the context they carry.

`LOG_FORMAT=text` (the default, for a terminal) keeps one readable line per
record; `LOG_FORMAT=json` makes every line of the web, worker and beat
processes one JSON object. Both go through the standard library's `logging`
(Django's, Celery's and our own records alike) and, in JSON, through
structlog's `ProcessorFormatter`, which adds the context bound in this
process's current context (`structlog.contextvars`).

The runner binds the context once per slice (`task_id`, `trace_id`, `tenant`,
`agent`) and per step (`step_no`, `step_kind`) with `log_scope` and `bind_log`;
nothing is passed by hand, and the scope restores what was bound before it on
the way out, so no context leaks from one task to the next in a worker. The
task's `trace_id` is its OpenTelemetry trace id; with traces on, a line also
carries the current span's `span_id` (`add_span`).
`config.celery` stops Celery from replacing the root logger's handlers.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from opentelemetry import trace

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def add_span(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The current OpenTelemetry span's ids (`foundations.tracing`): `span_id` when it
    belongs to the bound `trace_id` (a task's step), both when none is bound (a
    request, a Celery message). Without traces there is no current span."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        trace_id = format(context.trace_id, "032x")
        if event_dict.setdefault("trace_id", trace_id) == trace_id:
            event_dict.setdefault("span_id", format(context.span_id, "016x"))
    return event_dict


# Added to every record: the bound context, the span, the level, the logger's name, a UTC time.
_PRE_CHAIN: list[Any] = [
    structlog.contextvars.merge_contextvars,
    add_span,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.ExtraAdder(),
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """Django's `LOGGING` for `fmt` ("text" or "json")."""
    formatter: dict[str, Any] = (
        {"()": "foundations.logs.json_formatter"} if fmt == "json" else {"format": PLAIN_FORMAT})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "main"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.channels.server": {"level": "WARNING"},
            # the openai SDK's HTTP client logs every request at INFO
            "httpx": {"level": "WARNING"},
            "httpx2": {"level": "WARNING"},
            # the MCP SDK logs every session it opens and closes at INFO
            "mcp": {"level": "WARNING"},
        },
    }


def json_formatter() -> logging.Formatter:
    """One JSON object per record (`logging.config` calls this for the "json" format)."""
    _configure_structlog()
    logging.captureWarnings(True)  # Python's warnings are log lines too, not stray text
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_PRE_CHAIN,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(default=str),
        ],
    )


def _configure_structlog() -> None:
    """structlog's own loggers hand their events to the standard library's handlers."""
    structlog.configure(
        processors=[*_PRE_CHAIN, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


@contextmanager
def log_scope(**fields: Any) -> Iterator[None]:
    """Bind `fields` for the lines logged inside; on the way out, the context is
    what it was before (fields bound inside with `bind_log` included)."""
    before = structlog.contextvars.get_contextvars()
    structlog.contextvars.bind_contextvars(**fields)
    try:
        yield
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**before)


def bind_log(**fields: Any) -> None:
    """Add `fields` to the current scope's context (cleared when the scope ends)."""
    structlog.contextvars.bind_contextvars(**fields)


def log_context() -> dict[str, Any]:
    return structlog.contextvars.get_contextvars()
