"""Rendering a service's `DomainError` in the console: a readable message, the
HTTP status its kind maps to (400/403/404/409), and its field errors.

A stale view's refusal names the state its object is in now, read aloud with
the labels the app owning those states registers (`name_states`, from its
`AppConfig.ready`: tasks_app, a task's statuses)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import HTTP_STATUS, DomainError

_state_labels: dict[str, str] = {}


def name_states(labels: Mapping[str, str]) -> None:
    _state_labels.update(labels)


def error_status(exc: DomainError) -> int:
    return HTTP_STATUS.get(exc.kind, 400)


def error_message(exc: DomainError) -> str:
    d = exc.details or {}
    if exc.code == "stale_version":
        status = d.get("status")
        now = f" It is now {_state_labels.get(status, status)}" if status else ""
        version = (
            f" (version {d['current_version']})" if d.get("current_version") is not None else ""
        )
        return (
            "Not applied: this task has moved on since you loaded this view."
            + now
            + version
            + ". Here is its current state; look again before acting."
        )
    if exc.code in ("already_decided", "already_resolved"):
        return f"Not applied: {exc.message}. Here is its current state."
    if field_errors(exc):
        return "Not applied: please correct the fields below."
    # Every other refusal (illegal transition, stale arguments, no open question,
    # separation of duties, ...) says what the service said.
    return f"Not applied: {exc.message.rstrip('.')}."


def error_line(exc: DomainError) -> str:
    """A refusal in one line, for a page with no form field to put its field errors on."""
    fields = field_errors(exc)
    if fields and exc.code != "stale_version":
        problems = "; ".join(m for ms in fields.values() for m in ms)
        return f"Not applied: {problems.rstrip('.')}."
    return error_message(exc)


def field_errors(exc: DomainError) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in (exc.details or {}).items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = value
    return out


def form_errors(form: Any) -> dict[str, list[str]]:
    return {k: [str(e) for e in v] for k, v in form.errors.items()}
