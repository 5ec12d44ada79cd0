"""MkDocs hook: the reference pages' generated parts, built from the code.

A reference page holds a marker such as ``<!-- generated: task-machine -->``;
at build time this hook replaces it with what the code says now: the task and
step state machines (`tasks_app.machine.TRANSITIONS`,
`tasks_app.store.steps.STEP_TRANSITIONS`), the event types the product writes,
the REST API (drf-spectacular's OpenAPI schema), the `TETHER_*` settings and
the management commands. A table in a page can then never disagree with the
code it describes.

Django is set up with `config.settings` and a throwaway environment (keys that
encrypt nothing, `DEBUG` off, no database touched), so the build needs no
secrets, and the defaults shown are the code's, whatever the shell exports.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Variables config.settings reads that would change the defaults shown.
_SETTINGS_PREFIXES = ("TETHER_", "DB_", "CELERY_", "OTEL_", "EMAIL_", "LOG_", "PROMETHEUS_")
_SETTINGS_NAMES = ("DATABASE_URL", "CHANNEL_LAYER_URL", "CACHE_URL", "ALLOWED_HOSTS",
                   "CSRF_TRUSTED_ORIGINS", "API_THROTTLE_RATE", "MAX_REQUEST_BYTES",
                   "DEFAULT_FROM_EMAIL", "TEST_DATABASE_NAME")
# A Fernet key of 32 zero bytes: it is never used to encrypt anything here.
_THROWAWAY_FERNET_KEY = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


def _setup_django() -> None:
    import django
    from django.apps import apps

    if apps.ready:
        return
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for name in list(os.environ):
        if name.startswith(_SETTINGS_PREFIXES) or name in _SETTINGS_NAMES:
            del os.environ[name]
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SECRET_KEY": "docs-build-only-" + "x" * 40,
        "TETHER_SECRETS_KEY": _THROWAWAY_FERNET_KEY,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    })
    django.setup()


def product_packages() -> list[str]:
    """`config`, `foundations` and every installed app that lives in this repository."""
    from django.apps import apps

    ours = [app.name for app in apps.get_app_configs() if Path(app.path).is_relative_to(ROOT)]
    return ["config", "foundations", *sorted(ours)]


# --- small Markdown helpers -------------------------------------------------------------


def _cell(value: Any) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def _code(value: Any) -> str:
    text = _cell(value)
    return f"`{text}`" if text else ""


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- state machines -----------------------------------------------------------------------


def task_machine() -> str:
    from tasks_app.machine import TERMINAL, TRANSITIONS, TaskStatus

    rows = [[_code(event), ", ".join(_code(s) for s in sources), _code(target)]
            for event, (sources, target) in TRANSITIONS.items()]
    states = [[_code(s), "final" if s in TERMINAL else ""] for s in TaskStatus.values]
    return ("**States**\n\n" + _table(["status", ""], states)
            + "\n\n**Transitions** (`tasks_app/machine.py`, `TRANSITIONS`)\n\n"
            + _table(["event", "from", "to"], rows))


def step_machine() -> str:
    from tasks_app.store.steps import BORN_AS, STEP_TRANSITIONS

    rows = [[_code(source),
             ", ".join(_code(t) for t in sorted(targets)) or "— (final)",
             "yes" if source in BORN_AS else ""]
            for source, targets in STEP_TRANSITIONS.items()]
    return ("`tasks_app/store/steps.py`, `STEP_TRANSITIONS`\n\n"
            + _table(["status", "may move to", "a step may be born in it"], rows))


# --- event types ----------------------------------------------------------------------------

# What each event means; an event type the code writes and this does not describe
# is still listed, with where it is written.
EVENT_MEANINGS = {
    "task_created": "the task was submitted (or created as a retry of another)",
    "decision_recorded": "a tool call the model proposed was recorded, before it runs",
    "invalid_decision": "the model's output was not a usable decision, or a rule denied the call "
                        "(`denied_by_rule`); the error goes back to it",
    "approval_recorded": "the first of two approvals an approval rule asks for (the task waits on)",
    "approval_reassigned": "a reviewer handed a pending request to a person or a reviewer group",
    "approval_escalated": "a request's SLA ran out and it moved to its rule's second group",
    "result_discarded": "a result that arrived after a cancel or a version change, kept unapplied",
    "approval_requested": "a call of a multi-call reply got its own approval card; the "
                          "reply's other calls go on",
    "approval_decided": "a card of a multi-call reply was decided while others wait (the last "
                        "decision moves the task: `approval_granted` or `approval_rejected`)",
    "context_summarized": "older steps were folded into a new context summary version",
    "summary_rolled_back": "an operator rolled the context summary back",
    "breaker_opened": "this task's call opened a circuit breaker",
    "breaker_waiting": "the task waits for an open circuit breaker (once per wait)",
    "breaker_closed": "the breaker the task waited for closed; the task goes on",
    "rate_limit_waiting": "a call waits for its model's or tool's rate limit: its slot, the "
                          "expected wait (`wait_s`, `until`); the task holds no worker meanwhile",
    "lease_acquired": "a tool call took the lease of its resource",
    "lease_waiting": "a tool call waits for a resource another call holds",
    "lease_released": "a tool call released its resource",
    "lease_expired": "a resource's holder died; its lease was taken over",
    "lease_settled": "a dead holder's interrupted call was settled through the ledger",
    "compensating": "a failed task chose the steps its compensation undoes",
    "compensation_succeeded": "a compensation call succeeded",
    "compensation_failed": "a compensation call failed (left for a person)",
    "compensation_skipped": "a step was left uncompensated (a retry continues from it)",
    "retried": "an operator retried this task from a step (on the original)",
    "retry_created": "this task was created by a retry (on the new task)",
    "child_started": "a tool step calling an agent started its child task (on the parent)",
    "memory_written": "a `remember` decision saved a memory item (policy `auto`)",
    "memory_proposed": "a `remember` decision proposed a memory write for a reviewer (`propose`)",
    "memory_accepted": "a reviewer accepted a proposed memory write (as it was, or edited)",
    "memory_rejected": "a reviewer rejected a proposed memory write: nothing was saved",
    "completion_check": "a completion check of a final answer passed or failed (with its reason)",
    "model_refused": "the model's reply was blocked by its safety filter or refused; asked again, "
                     "sent to the fallback model, or escalated",
}
_EVENT_KEYWORD_CALLS = {"event_append": "type", "task_transition": "event", "Commit": "event"}
_EVENT_POSITIONAL_CALLS = ("_event", "_info_event")  # (subject, type, ...)


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _event_types_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        candidates: list[ast.expr] = []
        if name in _EVENT_KEYWORD_CALLS:
            candidates += [k.value for k in node.keywords if k.arg == _EVENT_KEYWORD_CALLS[name]]
        if name in _EVENT_POSITIONAL_CALLS:
            candidates += node.args[1:2] + [k.value for k in node.keywords if k.arg == "type"]
        found |= {c.value for c in candidates
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return found


def written_event_types() -> dict[str, set[str]]:
    """Every event type the product writes with a literal name -> the modules writing it."""
    where: dict[str, set[str]] = {}
    for package in product_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for event in _event_types_in(ast.parse(path.read_text(), str(path))):
                where.setdefault(event, set()).add(str(path.relative_to(ROOT)))
    return where


def event_types() -> str:
    from notify_app.models import EventType
    from tasks_app.machine import TRANSITIONS

    where = written_event_types()
    transitions = [[_code(event), ", ".join(_code(s) for s in sources), _code(target)]
                   for event, (sources, target) in TRANSITIONS.items()]
    others = sorted(set(where) - set(TRANSITIONS))
    other_rows = [[_code(e), _cell(EVENT_MEANINGS.get(e, "")),
                   ", ".join(_code(p) for p in sorted(where[e]))] for e in others]
    notify_rows = [[_code(value), _cell(label)] for value, label in EventType.choices]
    return (
        "### Transitions\n\nEach moves the task through the state machine and bumps "
        "its `version` (`tasks_app/machine.py`).\n\n"
        + _table(["event", "from", "to"], transitions)
        + "\n\n### Other events on a task's timeline\n\nRecorded at the task's current "
        "version, without a transition; found in the product's code where it writes them.\n\n"
        + _table(["event", "meaning", "written in"], other_rows)
        + "\n\n### Notification event types\n\nWhat a webhook or an e-mail can subscribe "
        "to (`notify_app/models.py`, `EventType`).\n\n"
        + _table(["type", "label"], notify_rows)
    )


# --- the REST API ---------------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(json.dumps(schema, default=str))


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _unwrap(schema: dict[str, Any]) -> dict[str, Any]:
    """`allOf: [{$ref}]` (how drf-spectacular marks a nullable or read-only ref) -> the ref."""
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
    return schema


def _type_of(schema: dict[str, Any]) -> str:
    schema = _unwrap(schema)
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        text = f"[{name}](#{name.lower()})"
    elif schema.get("type") == "array":
        text = "array of " + _type_of(schema.get("items", {}))
    elif "enum" in schema:
        text = " \\| ".join(f"`{v}`" for v in schema["enum"] if v is not None)
    else:
        text = schema.get("type", "any")
        if schema.get("format"):
            text += f" ({schema['format']})"
    if schema.get("nullable"):
        text += ", nullable"
    return text


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A body's schema, its `$ref` followed into the components."""
    schema = _unwrap(schema)
    if "$ref" in schema:
        return dict(document["components"]["schemas"][_ref_name(schema["$ref"])])
    return schema


def _fields(schema: dict[str, Any]) -> list[list[str]]:
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        prop = _unwrap(prop)
        notes = [_cell(prop.get("description", ""))]
        if prop.get("readOnly"):
            notes.append("read only")
        rows.append([_code(name), _type_of(prop), "yes" if name in required else "",
                     " ".join(n for n in notes if n)])
    return rows


def _body_schema(content: dict[str, Any]) -> dict[str, Any] | None:
    for media in ("application/json", *content):
        if media in content and "schema" in content[media]:
            return dict(content[media]["schema"])
    return None


def _param_note(parameter: dict[str, Any]) -> str:
    note = _cell(parameter.get("description", ""))
    if "default" in parameter.get("schema", {}):
        note += f" (default `{parameter['schema']['default']}`)"
    return note.strip()


def _generic_description() -> str:
    from foundations.api_base import TenantAPIView

    return " ".join((TenantAPIView.__doc__ or "").split())


def api_reference() -> str:
    schema = openapi_schema()
    generic = _generic_description()
    out: list[str] = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            if method == "parameters":
                continue
            out.append(f"### `{method.upper()} {path}`\n")
            if op.get("summary"):
                out.append(f"**{_cell(op['summary'])}**\n")
            description = " ".join(op.get("description", "").split())
            if description and description != generic:
                out.append(description + "\n")
            params = [[_code(p["name"]), p["in"], _type_of(p.get("schema", {})),
                       "yes" if p.get("required") else "", _param_note(p)]
                      for p in op.get("parameters", [])]
            if params:
                out.append(_table(["parameter", "in", "type", "required", "description"],
                                  params) + "\n")
            body = _body_schema(op.get("requestBody", {}).get("content", {}))
            if body is not None:
                out.append(f"Request body: {_type_of(body)}\n")
                fields = _fields(_resolve(schema, body))
                if fields:
                    out.append(_table(["field", "type", "required", "description"], fields) + "\n")
            answers, errors = [], []
            for status, response in op.get("responses", {}).items():
                answer = _body_schema(response.get("content", {}))
                if answer is not None and answer.get("$ref", "").endswith("/Error"):
                    errors.append(_code(status))
                    continue
                answers.append([_code(status), _cell(response.get("description", "")),
                                _type_of(answer) if answer is not None else ""])
            out.append(_table(["status", "meaning", "body"], answers) + "\n")
            if errors:
                out.append("Errors ([shape](#errors)): " + ", ".join(errors) + "\n")
    out.append("## Schemas\n\nThe request and response bodies named above.\n")
    for name, component in schema["components"]["schemas"].items():
        out.append(f"### {name}\n")
        if component.get("description"):
            out.append(_cell(component["description"]) + "\n")
        if "enum" in component:
            out.append("One of " + ", ".join(f"`{v}`" for v in component["enum"]
                                             if v is not None) + ".\n")
        elif component.get("properties"):
            out.append(_table(["field", "type", "required", "description"],
                              _fields(component)) + "\n")
        else:
            out.append(f"Type: {_type_of(component)}.\n")
    return "\n".join(out)


# --- settings ---------------------------------------------------------------------------------

_NEVER_SHOWN = ("TETHER_SECRETS_KEY",)  # set to a throwaway value by this hook


def _default_text(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, list | tuple):
        return _code(",".join(str(v) for v in value)) or "empty"
    if value in ("", None):
        return "unset"
    return _code(value)


def settings_fallback() -> str:
    """The `TETHER_*` settings as `django.conf.settings` holds them, names and
    defaults only: for a tree without `config.tether_settings`, whose typed
    settings describe themselves."""
    from django.conf import settings

    rows = [[_code(f"TETHER_{key}"), _default_text(value)]
            for key, value in settings.TETHER.items()]
    for name in sorted(n for n in dir(settings) if n.startswith("TETHER_")):
        value = "" if name in _NEVER_SHOWN else getattr(settings, name)
        rows.append([_code(name), _default_text(value)])
    return _table(["variable", "default"], rows)


def settings_reference() -> str:
    try:
        from config.tether_settings import reference_markdown
    except ModuleNotFoundError as exc:
        if exc.name != "config.tether_settings":
            raise
        return settings_fallback()
    return str(reference_markdown())


# --- management commands ---------------------------------------------------------------------

_DJANGO_OPTIONS = {"help", "version", "verbosity", "settings", "pythonpath", "traceback",
                   "no_color", "force_color", "skip_checks"}


def _command_section(name: str, command: Any, note: str = "") -> str:
    parser = command.create_parser("manage.py", name)
    rows = []
    for action in parser._actions:
        if action.dest in _DJANGO_OPTIONS:
            continue
        flag = ", ".join(action.option_strings) or action.dest
        if action.choices:
            flag += " {" + ",".join(map(str, action.choices)) + "}"
        default = action.default if action.default not in (None, False, "") else ""
        rows.append([_code(flag), "yes" if action.required or not action.option_strings else "",
                     _code(default), _cell(action.help or "")])
    text = f"### `{name}`\n\n{_cell(command.help)}{note}\n\n"
    return text + (_table(["argument", "required", "default", "what"], rows)
                   if rows else "No arguments.")


def management_commands() -> str:
    from django.core.management import get_commands, load_command_class

    product = product_packages()
    ours = sorted((name, app) for name, app in get_commands().items() if app in product)
    sections = [_command_section(name, load_command_class(app, name)) for name, app in ours]
    from benchmarks.management.commands.bench import Command as Bench

    sections.append(_command_section(
        "bench", Bench(), " No part of the product: see [Performance](../performance/index.md)."))
    return "\n\n".join(sections)


# --- the hook ---------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {
    "task-machine": task_machine,
    "step-machine": step_machine,
    "event-types": event_types,
    "rest-api": api_reference,
    "settings": settings_reference,
    "management-commands": management_commands,
}
_cache: dict[str, str] = {}


def on_pre_build(config: Any) -> None:
    _cache.clear()  # `mkdocs serve` rebuilds: read the code again
    _setup_django()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for key, generate in GENERATORS.items():
        marker = f"<!-- generated: {key} -->"
        if marker in markdown:
            if key not in _cache:
                _cache[key] = generate()
            markdown = markdown.replace(marker, _cache[key])
    return markdown
