"""Every `TETHER_*` setting, declared once: its environment variable, type,
default, limits and meaning.

Why pydantic-settings: one class gives each setting its type, its default and
its limits together, reads the environment by the same names as before, and
reports every wrong value at once, by field, before the process serves
anything. The same declarations produce the settings reference
(`reference_markdown`), so the documentation cannot drift from the code.

`config/settings.py` builds the object with `load()` (a wrong value raises
`ImproperlyConfigured` naming its variable) and spreads it into Django's
settings as before: the runtime knobs as the `TETHER` dict
(`settings.TETHER["SLICE_S"]`), the others as top-level `TETHER_*` settings.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
import environ
from django.core.exceptions import ImproperlyConfigured
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "TETHER_"


def _absolute(url: str) -> str:
    """An absolute http(s) URL, without its trailing slash."""
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
        raise ValueError("an absolute http:// or https:// URL")
    return url.rstrip("/")
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Parsed as config/settings.py parses them (django-environ): the two non-Tether
# variables some defaults follow.
_env = environ.Env()

# A comma-separated list: items stripped, empty items dropped ("" is the empty list).
CommaList = Annotated[list[str], NoDecode]
Runner = Literal["embedded", "celery", "manual"]


def _default(doc: str) -> dict[str, Any]:
    """How a default computed from other settings reads in the reference."""
    return {"default_doc": doc}


def _runner_default() -> Runner:
    return "celery" if _env.str("CELERY_BROKER_URL", default="") else "embedded"


def _rate_limit_url_default() -> str:
    for name in ("CACHE_URL", "CELERY_BROKER_URL"):
        url = _env.str(name, default="")
        if url.startswith(("redis://", "rediss://", "unix://")):
            return url
    return ""


def _egress_default(data: dict[str, Any]) -> list[str]:
    return list(LOOPBACK) if data.get("RUNNER") == "embedded" else []


class TetherSettings(BaseSettings):
    """The `TETHER_*` environment variables (field `SLICE_S` is `TETHER_SLICE_S`).
    Times are in seconds unless the name says otherwise."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, case_sensitive=True, extra="ignore", frozen=True,
        allow_inf_nan=False)

    # --- runner and broker ---------------------------------------------------------
    RUNNER: Runner = Field(
        default_factory=_runner_default,
        description="Who runs the tasks' slices: Celery workers, the web server's own "
                    "event loop, or nobody (`manual`: the tests drive the runner).",
        json_schema_extra=_default("`celery` when `CELERY_BROKER_URL` is set, else `embedded`"))
    BROKER_TIMEOUT_S: float = Field(
        default=2.0, gt=0,
        description="Bounds connecting to the broker and each socket operation: with the "
                    "publish's two retries, how long an enqueue may hold a request.")
    # Celery's pool aliases (`celery worker -P`).
    WORKER_POOL: Literal["prefork", "threads", "solo", "processes", "eventlet", "gevent",
                         "custom"] = Field(
        default="prefork",
        description="The Celery pool of `celery -A config worker` without `-P`; it only "
                    "hands messages to the driver.")
    WORKER_CONCURRENCY: int = Field(
        default_factory=lambda: os.cpu_count() or 1, ge=1,
        description="Pool processes (threads) of a worker without `-c`; each prefork "
                    "process has its own driver.",
        json_schema_extra=_default("the CPU count"))
    WORKER_SWEEP: bool = Field(
        default=True,
        description="Every Celery worker process runs the recovery sweep on its own timer "
                    "(`false`: only beat does).")
    SWEEP_INTERVAL_S: float = Field(
        default=2.0, gt=0,
        description="How often each worker process (and beat, if run) tries the recovery "
                    "sweep; one runs at a time (advisory lock).")

    DB_POOLER: Literal["none", "transaction"] = Field(
        default="none",
        description="`transaction` when the processes reach PostgreSQL through a pooler in "
                    "transaction mode (PgBouncer `pool_mode = transaction`): no statement is "
                    "prepared on the server and no lock outlives a transaction "
                    "(see [Behind PgBouncer](../how-to/deploy.md#behind-pgbouncer)).")

    # --- leases, slices and the driver -------------------------------------------
    LEASE_TTL_S: float = Field(
        default=10.0, gt=0,
        description="A task lease's lifetime: a live process renews its leases every third "
                    "of it; a dead worker's task is taken over after it (plus the sweep's "
                    "interval).")
    SLICE_S: float = Field(
        default=2.0, gt=0,
        description="Work time a worker spends on one task before re-enqueueing it (time "
                    "awaiting model and tool calls does not count).")
    SLICE_MAX_STEPS: int = Field(default=50, ge=1, description="Steps per slice at most.")
    DRIVER_MAX_TASKS: int = Field(
        default=500, ge=1,
        description="Slices one worker process drives at once; a further message waits in "
                    "the broker.")
    # 8, not 6: each thread holds its slot through its phase's round trips, and
    # with 1,000 tasks waiting on a model single runs measured 202-265 I/O
    # steps/s with 6 (seven of nine below 235), 203-261 with 8 or 12 (eight of
    # twelve above 235): a weak effect on a noisy machine (docs/performance/history.md);
    # 8 stays under the pool's 10 connections.
    DRIVER_DB_THREADS: int = Field(
        default=8, ge=1,
        description="Threads per worker process running the slices' database phases (each "
                    "holds a connection while busy: keep it below `DB_POOL_MAX_SIZE`).")
    DRIVER_DRAIN_S: float = Field(
        default=10.0, ge=0,
        description="On a warm shutdown, how long a worker process lets its slices in "
                    "flight finish; the sweep resumes the rest after their lease.")
    TOOL_THREADS: int = Field(
        default=64, ge=1,
        description="Python tool calls one process runs at once, each in a thread of its "
                    "own.")
    PARALLEL_TOOL_CALLS: int = Field(
        default=8, ge=1, le=50,
        description="Tool calls of one model reply an agent's task runs at once; the "
                    "reply's other calls start as these end. 1: one after another, in the "
                    "reply's order.")

    # --- admission, retries, compensation ----------------------------------------
    MAX_RUNNING_TASKS: int = Field(
        default=200, ge=1,
        description="Global limit on RUNNING tasks (the rest wait in CREATED).")
    MAX_RUNNING_PER_TENANT: int = Field(
        default=50, ge=1, description="Per-tenant limit on RUNNING tasks.")
    BACKOFF_BASE_S: float = Field(
        default=0.5, ge=0, description="First retry delay (exponential, with jitter).")
    BACKOFF_MAX_S: float = Field(default=30.0, ge=0, description="Retry delay ceiling.")
    STEP_ERROR_RETRIES: int = Field(
        default=5, ge=0,
        description="A step that raises an unexpected error is tried again this many times, "
                    "then the task fails (or escalates).")
    COMPENSATION_RESWEEP_S: float = Field(
        default=120.0, gt=0,
        description="A failed task's compensation not finished this long after the failure "
                    "is handed to a worker again by the recovery sweep, and again every as "
                    "long.")
    COMPENSATION_THREADS: int = Field(
        default=2, ge=1,
        description="Compensations one worker process runs at once, in threads beside its "
                    "slices (each holds a database connection while it runs).")

    # --- circuit breakers (tools_app/breakers) -----------------------------------
    BREAKER_FAILURES: int = Field(
        default=5, ge=1,
        description="A circuit breaker opens after this many transient failures in a row; "
                    "a tool's or model's `breaker.failures` overrides it.")
    BREAKER_COOLDOWN_S: float = Field(
        default=10.0, gt=0,
        description="How long an open breaker admits no call before one probe; "
                    "`breaker.cooldown_s` overrides it.")
    BREAKER_MAX_COOLDOWN_S: float = Field(
        default=300.0, gt=0,
        description="The cool-down doubles after each failed probe, up to this; "
                    "`breaker.max_cooldown_s` overrides it.")
    BREAKER_RECHECK_S: float = Field(
        default=1.0, ge=0,
        description="A breaker read as closed with no failures is trusted by a process this "
                    "long (`0`: read before every call).")

    # --- rate limits (tools_app/ratelimits) ---------------------------------------
    RATE_LIMIT_URL: str = Field(
        default_factory=_rate_limit_url_default,
        description="The Redis that keeps the rate limits' buckets, shared by every worker "
                    "process and host; empty: each process keeps its own (one process only).",
        json_schema_extra=_default("`CACHE_URL` when it is a Redis, else `CELERY_BROKER_URL` "
                                   "when it is one, else empty"))
    RATE_LIMIT_PERIOD_S: float = Field(
        default=60.0, gt=0,
        description="The period of `requests_per_minute` and `tokens_per_minute`: a minute; "
                    "shorter only in tests and benches, so a limit's minute passes quickly.")

    # --- sizes and the model's context -------------------------------------------
    MAX_TOOL_RESULT_BYTES: int = Field(
        default=256 * 1024, ge=1, description="A larger tool result is a business error.")
    PAYLOAD_INLINE_MAX_BYTES: int = Field(
        default=64 * 1024, ge=1024,
        description="A tool output (and the tool ledger's copy of it), model log, decision, "
                    "result or task input larger than this, in bytes of JSON, is stored once, "
                    "content-addressed, in the payload blob table, and the row holds a "
                    "reference to it.")
    TASK_PAYLOAD_MAX_BYTES: int = Field(
        default=16 * 1024 * 1024, ge=1024,
        description="The payloads one task stores out of row add up to this at most, in bytes "
                    "of JSON: a larger tool output is a business error (`payload_too_large`), "
                    "a larger input is refused (400).")
    MAX_RESPONSE_BYTES: int = Field(
        default=8 * 1024 * 1024, ge=1,
        description="No response to the runner's outbound calls is read past this (at least "
                    "twice the tool result limit).")
    CONTEXT_WINDOW_STEPS: int = Field(
        default=8, ge=0, description="Steps given to the model verbatim.")
    CONTEXT_RESULT_CHARS: int = Field(
        default=2000, ge=1,
        description="A step result is cut to this many characters in the context.")
    SUMMARY_THRESHOLD_STEPS: int = Field(
        default=8, ge=0,
        description="Older steps beyond the window are folded into a summary past this "
                    "many...")
    SUMMARY_THRESHOLD_CHARS: int = Field(
        default=16000, ge=0, description="...or past this many characters of text.")
    SUMMARY_MAX_CHARS: int = Field(default=4000, ge=1, description="A summary's length at most.")
    READ_SOURCE_MAX_CHARS: int = Field(
        default=8000, ge=100, le=100_000,
        description="What one `read_source` decision returns at most, in characters of JSON "
                    "(a longer original is cut, its full size said).")

    # --- memory (memory_app) -----------------------------------------------------
    MEMORY_CONTEXT_TOKENS: int = Field(
        default=800, ge=0,
        description="The share of a step's context given to memory items, in tokens "
                    "(estimated as 4 characters each).")
    MEMORY_CONTEXT_ITEMS: int = Field(
        default=8, ge=0, le=100, description="Memory items shown to a step at most.")
    MEMORY_MAX_ITEMS_PER_SCOPE: int = Field(
        default=1000, ge=1,
        description="Items a memory scope (the tenant, an agent, a subject) holds at most.")
    MEMORY_MAX_TEXT_CHARS: int = Field(
        default=2000, ge=1, le=20_000, description="A memory item's text, at most.")
    MEMORY_MAX_VALUE_CHARS: int = Field(
        default=8000, ge=0, le=1_000_000,
        description="A memory item's structured value, as JSON, at most.")
    MEMORY_EMBEDDINGS_URL: str = Field(
        default="",
        description="Off when empty. The base URL of an OpenAI-compatible embeddings endpoint "
                    "(`<url>/embeddings`): memory's text matches are reranked by how close their "
                    "embedding is to the task's (one call a context build).")
    MEMORY_EMBEDDINGS_MODEL: str = Field(
        default="", description="The model named in each embeddings request.")
    MEMORY_EMBEDDINGS_API_KEY: SecretStr = Field(
        default=SecretStr(""),
        description="Sent as `Authorization: Bearer <key>` to the embeddings endpoint.")
    MEMORY_EMBEDDINGS_TIMEOUT_S: float = Field(
        default=2.0, gt=0, le=30,
        description="An embeddings call's timeout; a call that fails keeps the full-text order.")
    MEMORY_EMBEDDINGS_WEIGHT: float = Field(
        default=0.5, ge=0, le=1,
        description="The embedding similarity's share of an item's score when reranking (the "
                    "rest is the full-text, scope and recency score).")

    # --- retention and archives (retention_app) ------------------------------------
    RETENTION_DAYS: int = Field(
        default=365, ge=1,
        description="How long a finished task keeps its whole history online before the "
                    "archive sweep moves it to the archive storage, for a tenant that set "
                    "no shorter period of its own.")
    RETENTION_MAX_DAYS: int = Field(
        default=1825, ge=1,
        description="The longest retention a tenant may set (and a cap on "
                    "`TETHER_RETENTION_DAYS`).")
    ARCHIVE_DIR: str = Field(
        default=str(Path(__file__).resolve().parent.parent / ".tether" / "archive"),
        description="Where archive files are written (the `archive` storage's directory) "
                    "unless `STORAGES['archive']` names another backend.",
        json_schema_extra=_default("`.tether/archive` in the checkout"))
    ARCHIVE_BATCH: int = Field(
        default=500, ge=1, le=10_000,
        description="Tasks per archive file (one batch of the archive sweep).")
    ARCHIVE_DELETE_BATCH: int = Field(
        default=50, ge=1, le=1_000,
        description="Archived tasks deleted online per transaction: short transactions "
                    "that never hold the runner up.")
    EXPORT_DIR: str = Field(
        default=str(Path(__file__).resolve().parent.parent / ".tether" / "exports"),
        description="Where export files are written (the `exports` storage's directory) "
                    "unless `STORAGES['exports']` names another backend.",
        json_schema_extra=_default("`.tether/exports` in the checkout"))
    EXPORT_EXPIRY_HOURS: float = Field(
        default=72.0, gt=0, le=24 * 90,
        description="An export's file can be downloaded for this long after it is written; "
                    "then the sweep deletes it (a download after that answers 410).")

    # --- evaluations ---------------------------------------------------------------
    EVALUATION_MAX_RUNNING: int = Field(
        default=20, ge=1,
        description="Evaluation runs (shadow tasks) RUNNING at once, over all tenants: "
                    "admission starts them only after every live task that may start, and "
                    "never more than this, so an evaluation does not delay live work.")
    EVALUATION_MAX_TASKS: int = Field(
        default=1000, ge=1, le=100_000,
        description="Recorded tasks one evaluation replays, at most.")

    # --- ledger, resource leases, live events ------------------------------------
    LEDGER_CLAIM_GRACE_S: float = Field(
        default=10.0, ge=0,
        description="A tool call's ledger claim outlives its timeout by this; then recovery "
                    "may take the key over.")
    LEASE_WAIT_RECHECK_S: float = Field(
        default=30.0, gt=0,
        description="A call waiting for a resource lease looks again at least this often (a "
                    "release wakes it at once).")
    PUBLISH_WINDOW_MS: float = Field(
        default=10.0, ge=0,
        description="Live events committed within this many milliseconds go to the browser "
                    "in one message (`0`: each at once).")
    STREAM_TOKEN_WINDOW_MS: float = Field(
        default=100.0, ge=0,
        description="A streaming model's tokens are sent live at most this often per "
                    "decision, joined (`0`: each piece at once).")
    STREAM_KEEPALIVE_S: float = Field(
        default=15.0, gt=0,
        description="A task's event stream (`GET /api/v1/tasks/{id}/stream`) sends a keep-alive "
                    "comment after this many quiet seconds, so proxies keep it open.")
    STREAM_IDLE_S: float = Field(
        default=600.0, gt=0,
        description="A task's event stream ends after this many seconds without an event or a "
                    "token (the client reconnects with `Last-Event-ID` when it still cares).")
    LIVE_RECHECK_S: float = Field(
        default=10.0, gt=0,
        description="How often an open live socket re-checks its user's membership (closed "
                    "when it is gone).")
    DEMO_NOTIFY_DELAY_S: float = Field(
        default=3.0, ge=0,
        description="The demo's `notify_customer` tool hangs this long after sending, past "
                    "its timeout (simulated provider latency).")

    # --- tools, tenants' secrets, outbound calls ---------------------------------
    PYTHON_TOOL_MODULES: CommaList = Field(
        default=["demo:tools_app.demo."],
        description="Module prefixes python tools must live under: `tenant:prefix` for "
                    "that tenant, a bare `prefix` for every tenant.")
    SECRETS_KEY: SecretStr = Field(
        default=SecretStr(""),
        description="Comma-separated Fernet keys encrypting tenant secrets: the first "
                    "encrypts, all decrypt; required when `DEBUG` is off.")
    ENV_GRANTS: CommaList = Field(
        default=[],
        description="Server environment variables an agent may name in `api_key_env`: "
                    "`NAME` for every tenant, `tenant:NAME` for one.")
    EGRESS_ALLOW: CommaList = Field(
        default_factory=_egress_default,
        description="Non-public addresses tenants' calls may reach anyway: hosts, "
                    "`host:port` pairs or CIDRs (checked by `manage.py check`).",
        json_schema_extra=_default("`127.0.0.1,::1,localhost` when the runner is "
                                   "`embedded`, else empty"))
    EGRESS_CA_BUNDLE: str = Field(
        default="",
        description="A PEM file of CAs trusted by outbound calls besides the default store.")
    MCP_STDIO_SERVERS: str = Field(
        default="{}",
        description="stdio MCP servers tenants may register by name: a JSON object, "
                    "name -> command (a string or an argv list).")

    # --- notifications (notify_app) ----------------------------------------------
    PUBLIC_URL: str = Field(
        default="http://localhost:8000",
        description="The console's public address: links in notifications start with it.")
    WEBHOOK_TIMEOUT_S: float = Field(
        default=10.0, gt=0, description="A webhook attempt's whole call at most.")
    WEBHOOK_BACKOFF_BASE_S: float = Field(
        default=10.0, gt=0,
        description="The wait after a failed webhook attempt: this, doubling per attempt...")
    WEBHOOK_BACKOFF_MAX_S: float = Field(default=3600.0, gt=0, description="...at most this.")
    WEBHOOK_MAX_AGE_S: float = Field(
        default=24 * 3600.0, gt=0,
        description="A webhook delivery is retried until it is this old, then failed.")
    WEBHOOK_RETENTION_DAYS: float = Field(
        default=30.0, ge=0,
        description="Finished notifications (with their deliveries and attempts) are kept "
                    "this many days.")
    APPROVAL_SLA_WARNING_AT: float = Field(
        default=0.8, gt=0, le=1,
        description="The SLA warning fires when this fraction of an approval's SLA has "
                    "passed.")
    DECISION_LINK_MAX_AGE_S: float = Field(
        default=7 * 24 * 3600.0, gt=0,
        description="A signed approve/reject/answer link in an e-mail works at most this "
                    "long (and never after its approval expires); rotate `SECRET_KEY` with "
                    "`SECRET_KEY_FALLBACKS` to keep links sent before the rotation valid.")
    SLACK_API_URL: str = Field(
        default="https://slack.com/api/",
        description="The Slack Web API's base address (a fake Slack server in tests); calls "
                    "to it obey `TETHER_EGRESS_ALLOW` like any outbound call.")

    # --- HTTPS, login throttling -------------------------------------------------
    HTTPS: bool = Field(
        default_factory=lambda: not _env.bool("DEBUG", default=False),
        description="HTTPS enforcement: SSL redirect, HSTS, `Secure` cookies (`false`: plain "
                    "HTTP on loopback or a private network).",
        json_schema_extra=_default("`true` unless `DEBUG` is on"))
    PROXY_SSL_HEADER: str = Field(
        default="",
        description="The header a TLS-terminating proxy sets to `https` "
                    "(`X-Forwarded-Proto`); sets `SECURE_PROXY_SSL_HEADER`.")
    LOGIN_FAILURE_LIMIT: int = Field(
        default=10, ge=1,
        description="Failed sign-ins for one user name from one address before that pair is "
                    "locked out.")
    LOGIN_COOLOFF_MIN: float = Field(
        default=15.0, gt=0,
        description="How long (minutes) a locked-out user name and address are refused.")

    # --- operations --------------------------------------------------------------
    HOST_NAME: str = Field(
        default_factory=socket.gethostname, min_length=1, max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="This host's name in the owners of leases and sweeps (`host:pid:...`), "
                    "which say in the console and the logs which host runs a task.",
        json_schema_extra=_default("the machine's host name"))
    METRICS_TOKEN: SecretStr = Field(
        default=SecretStr(""),
        description="When set, `GET /metrics` asks for `Authorization: Bearer <token>`.")
    WORKER_METRICS_PORT: str = Field(
        default="",
        description="Without `PROMETHEUS_MULTIPROC_DIR`: each worker serves its metrics on "
                    "this port (`PORT` or `HOST:PORT`; pool children on the next ports).")

    @field_validator("PYTHON_TOOL_MODULES", "ENV_GRANTS", "EGRESS_ALLOW", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("PUBLIC_URL")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        return _absolute(value)

    @field_validator("SLACK_API_URL")
    @classmethod
    def _api_base(cls, value: str) -> str:
        return _absolute(value) + "/"  # the SDK appends method names to it

    @field_validator("PROXY_SSL_HEADER")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9-]*", value):
            raise ValueError("a header name: letters, digits and '-'")
        return value

    @field_validator("WORKER_METRICS_PORT")
    @classmethod
    def _port(cls, value: str) -> str:
        port = value.rpartition(":")[2]
        if value and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError("PORT or HOST:PORT, the port from 1 to 65535")
        return value

    @field_validator("MCP_STDIO_SERVERS")
    @classmethod
    def _json_object(cls, value: str) -> str:
        # The commands themselves are checked where they are used (tools_app.mcp.connections).
        try:
            table = json.loads(value or "{}")
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(table, dict):
            raise ValueError("a JSON object, name -> command")
        return value


# The fields read as `settings.TETHER[key]`: the runtime's knobs. The others
# are top-level Django settings named after their variable (`settings.TETHER_RUNNER`).
TETHER_DICT_KEYS = frozenset({
    "LEASE_TTL_S", "SWEEP_INTERVAL_S", "WORKER_SWEEP", "SLICE_S", "SLICE_MAX_STEPS",
    "DRIVER_MAX_TASKS", "DRIVER_DB_THREADS", "DRIVER_DRAIN_S", "TOOL_THREADS",
    "PARALLEL_TOOL_CALLS",
    "MAX_RUNNING_TASKS", "MAX_RUNNING_PER_TENANT", "BACKOFF_BASE_S", "BACKOFF_MAX_S",
    "STEP_ERROR_RETRIES", "COMPENSATION_RESWEEP_S", "COMPENSATION_THREADS",
    "BREAKER_FAILURES", "BREAKER_COOLDOWN_S", "BREAKER_MAX_COOLDOWN_S", "BREAKER_RECHECK_S",
    "RATE_LIMIT_URL", "RATE_LIMIT_PERIOD_S",
    "MAX_TOOL_RESULT_BYTES", "MAX_RESPONSE_BYTES", "CONTEXT_WINDOW_STEPS",
    "PAYLOAD_INLINE_MAX_BYTES", "TASK_PAYLOAD_MAX_BYTES",
    "CONTEXT_RESULT_CHARS", "SUMMARY_THRESHOLD_STEPS", "SUMMARY_THRESHOLD_CHARS",
    "SUMMARY_MAX_CHARS", "READ_SOURCE_MAX_CHARS", "LEDGER_CLAIM_GRACE_S",
    "LEASE_WAIT_RECHECK_S", "PUBLISH_WINDOW_MS",
    "DEMO_NOTIFY_DELAY_S", "LIVE_RECHECK_S", "MEMORY_CONTEXT_TOKENS", "MEMORY_CONTEXT_ITEMS",
    "STREAM_TOKEN_WINDOW_MS", "STREAM_KEEPALIVE_S", "STREAM_IDLE_S",
    "MEMORY_MAX_ITEMS_PER_SCOPE", "MEMORY_MAX_TEXT_CHARS", "MEMORY_MAX_VALUE_CHARS",
    "RETENTION_DAYS", "RETENTION_MAX_DAYS", "ARCHIVE_BATCH", "ARCHIVE_DELETE_BATCH",
    "EXPORT_EXPIRY_HOURS",
    "EVALUATION_MAX_RUNNING", "EVALUATION_MAX_TASKS",
})


def env_name(field: str) -> str:
    """The environment variable of a field: `SLICE_S` -> `TETHER_SLICE_S`."""
    return ENV_PREFIX + field


def load() -> TetherSettings:
    """The settings from the environment. A wrong value raises `ImproperlyConfigured`
    naming its variable, one line per problem."""
    try:
        return TetherSettings()
    except ValidationError as exc:
        raise ImproperlyConfigured(
            "invalid Tether settings:\n" + "\n".join(problems(exc))) from None


def problems(exc: ValidationError) -> list[str]:
    """Pydantic's errors as `TETHER_NAME: what is wrong (got 'value')` lines; a
    secret's value is never repeated."""
    lines = []
    for error in exc.errors(include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        secret = _is_secret(field)
        if not secret and isinstance(error.get("input"), str):
            message += f" (got {error['input']!r})"
        lines.append(f"{env_name(field)}: {message}")
    return lines


def tether_dict(values: TetherSettings) -> dict[str, Any]:
    """`settings.TETHER`: the runtime's knobs, by their key."""
    return values.model_dump(include=set(TETHER_DICT_KEYS))


def _is_secret(field: str) -> bool:
    info = TetherSettings.model_fields.get(field)
    return info is not None and info.annotation is SecretStr


# --- the settings reference ----------------------------------------------------------


def reference_markdown() -> str:
    """A Markdown table of every setting: variable, type, default, description."""
    rows = ["| variable | type | default | description |", "|---|---|---|---|"]
    for name, info in TetherSettings.model_fields.items():
        cells = [f"`{env_name(name)}`", _type_of(info), _default_of(info),
                 info.description or ""]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def _type_of(info: Any) -> str:
    annotation = info.annotation
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{choice}`" for choice in get_args(annotation))
    kind = {int: "integer", float: "number", bool: "boolean", str: "string",
            SecretStr: "string (secret)"}.get(annotation)
    if kind is None and get_origin(annotation) is list:
        kind = "comma-separated list"
    limits = []
    for meta in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            bound = getattr(meta, attr, None)
            if isinstance(meta, annotated_types.BaseMetadata) and bound is not None:
                limits.append(f"{sign} {_number(bound)}")
    return ", ".join([kind or str(annotation), *limits])


def _default_of(info: Any) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "default_doc" in extra:
        return str(extra["default_doc"])
    value = info.get_default(call_default_factory=False)
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    if isinstance(value, list):
        return f"`{','.join(value)}`" if value else "empty"
    return f"`{value}`" if value else "unset"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
