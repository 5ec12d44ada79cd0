"""One settings module, driven by the environment.

With no environment at all Tether runs *embedded*: a SQLite file, the in-process
runner on the ASGI server's own event loop and the in-memory channel layer.
Production sets DATABASE_URL, CELERY_BROKER_URL and CHANNEL_LAYER_URL.
"""

from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from config.tether_settings import load as load_tether_settings
from config.tether_settings import tether_dict
from foundations.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
# Every TETHER_* variable, typed and checked (config/tether_settings.py): a wrong
# value stops the process here with ImproperlyConfigured naming the variable.
_tether = load_tether_settings()

SECRET_KEY = env.str("SECRET_KEY", default="")  # required unless DEBUG: see "production hardening"
# Former keys, still accepted when checking signatures (sessions, e-mail decision links)
# while they are rotated out: comma-separated, newest first.
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "config.admin_site.TetherAdminConfig",  # django.contrib.admin, superusers only
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "channels",
    "accounts_app",
    "tasks_app",
    "tools_app",
    "approvals_app",
    "notify_app",
    "audit_app",
    "workflows_app",
    "schedules_app",
    "memory_app",
    "retention_app",
    "evals_app",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "audit_app.request_ids.RequestIdMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.ApiRequestSizeLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database -----------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'tether.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent writers (runner threads + requests) need IMMEDIATE transactions
    # and WAL, or they fail with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL;",
    }
else:
    # Each process holds at most DB_POOL_MAX_SIZE connections: Django's native
    # psycopg pool, shared by the process's threads. A request (or a runner
    # slice) borrows one and gives it back when Django "closes" it; one that
    # waits over DB_POOL_TIMEOUT_S is answered 503 (config/error_pages.py).
    # DB_POOL_MAX_SIZE=0 turns the pool off: a connection per thread, kept
    # DB_CONN_MAX_AGE seconds (unbounded under load; behind PgBouncer only).
    DB_POOL_MAX_SIZE = env.int("DB_POOL_MAX_SIZE", default=10)
    if DB_POOL_MAX_SIZE > 0:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them, not the threads
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env.int("DB_POOL_MIN_SIZE", default=1), DB_POOL_MAX_SIZE),
            "max_size": DB_POOL_MAX_SIZE,
            "timeout": env.float("DB_POOL_TIMEOUT_S", default=10.0),
            # After a database restart (the pool tests each idle connection
            # as it is lent): a reconnection that keeps failing gives its slot up
            # after a few seconds, so the next borrower connects at once. With
            # psycopg's default (5 min) each failed reconnection backs off 1, 2,
            # 4 ... 64 s holding its slot: progress stalled that long after a restart.
            "reconnect_timeout": env.float("DB_POOL_RECONNECT_TIMEOUT_S", default=3.0),
        }
    else:
        DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
    # With the pool: each connection is tested as it is lent, and one found broken
    # has every idle one tested at once (a restart breaks them all: config/db_pool.py).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Django turns psycopg's prepared statements off (for transaction-mode poolers).
    # Its own cursors bind on the client and never prepare anyway; this lets the
    # runner's few hot statements (`tasks_app/prepared.py`) be prepared.
    # Behind a pooler that cannot keep them (PgBouncer < 1.21), set it false.
    # Nor behind a pooler in transaction mode: a statement prepared on one server
    # connection is unknown on the next (TETHER_DB_POOLER).
    if env.bool("DB_PREPARED_STATEMENTS", default=True) and _tether.DB_POOLER == "none":
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 5)
    if "TEST" not in DATABASES["default"]:
        DATABASES["default"]["TEST"] = {
            "NAME": env.str("TEST_DATABASE_NAME", default="test_tether")
        }
IS_SQLITE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- runner, broker, channel layer ------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a killed worker's message is delivered again
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# `celery -A config worker` with no flags: one pool process per CPU, each driving
# up to TETHER_DRIVER_MAX_TASKS tasks on its own event loop (tasks_app/runner/driver.py).
# The pool processes only hand messages over: a task waiting on the network holds
# none of them. Change with TETHER_WORKER_POOL / TETHER_WORKER_CONCURRENCY (or -P / -c).
CELERY_WORKER_POOL = _tether.WORKER_POOL
CELERY_WORKER_CONCURRENCY = _tether.WORKER_CONCURRENCY
# Celery's Django fixup closes the DB connection around every task unless told
# to reuse it: a new connection per slice costs more than a step.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=1000)
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="tether")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A publish with the broker down must not hold a request: connecting, each
# socket operation and the publish's own retries are bounded (worst case a few
# times TETHER_BROKER_TIMEOUT_S). A failed enqueue is logged and recovered by
# the recovery sweep (tasks_app/services/dispatch.py).
TETHER_BROKER_TIMEOUT_S = _tether.BROKER_TIMEOUT_S
CELERY_BROKER_CONNECTION_TIMEOUT = TETHER_BROKER_TIMEOUT_S
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
}
# Redis' socket timeouts (a broker that accepts and never answers); the AMQP
# transport ignores them and bounds connecting by the connection timeout.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": TETHER_BROKER_TIMEOUT_S,
    "socket_timeout": TETHER_BROKER_TIMEOUT_S,
}
# Every worker process sweeps on its own timer under an advisory lock
# (tasks_app/runner/sweeper.py): beat is optional. Its entry stays for
# deployments that run it; it takes the same lock, so it adds no second sweep.
TETHER_SWEEP_INTERVAL_S = _tether.SWEEP_INTERVAL_S
# Behind a pooler in transaction mode (read above, where the database is set up).
TETHER_DB_POOLER = _tether.DB_POOLER
CELERY_BEAT_SCHEDULE = {
    "tether-recovery-sweep": {
        "task": "tasks_app.tasks.recovery_sweep",
        "schedule": TETHER_SWEEP_INTERVAL_S,
    },
}
# "celery" when a broker is configured, else the in-process embedded runner.
TETHER_RUNNER = _tether.RUNNER

CHANNEL_LAYER_URL = env.str("CHANNEL_LAYER_URL", default="")
if CHANNEL_LAYER_URL:
    # Redis pub/sub: a group send is one PUBLISH (the list-based core layer makes
    # three round trips and a Lua script per group). Nothing is buffered for a
    # consumer that is away, which the live feed does not need: a subscriber
    # joins the group first, then catches up from the database.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Pub/sub channels are global to the Redis server, whatever the
            # database number: the prefix carries the number, so deployments
            # (or test processes) on separate databases of one server never
            # receive each other's live messages.
            "CONFIG": {"hosts": [CHANNEL_LAYER_URL],
                       "prefix": f"asgi{urlsplit(CHANNEL_LAYER_URL).path.strip('/') or '0'}"},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Runtime knobs (seconds unless named otherwise), read as settings.TETHER["SLICE_S"]:
# declared, with what each does, in config/tether_settings.py.
TETHER = tether_dict(_tether)

# Python tools registered through the API or console must live under these
# module prefixes: registering one makes the server import and run that code.
# `prefix` grants it to every tenant, `tenant:prefix` to that tenant only; the
# demo tools work on global tables, so only the demo tenant gets them.
TETHER_PYTHON_TOOL_MODULES = tuple(_tether.PYTHON_TOOL_MODULES)

# Tenant secrets are encrypted with these Fernet keys (comma-separated: the first
# encrypts, all decrypt; `manage.py rotate_secrets` re-encrypts with the first).
TETHER_SECRETS_KEY = _tether.SECRETS_KEY.get_secret_value()
# Server environment variables a tenant's agent may name in `api_key_env`: NAME
# for every tenant, tenant:NAME for one. Nothing else of the environment is readable.
TETHER_ENV_GRANTS = tuple(_tether.ENV_GRANTS)
# Outbound calls made for a tenant (HTTP tools, status queries, model endpoints)
# reach public addresses only, plus what this lists: hosts, host:port pairs or
# CIDRs (tools_app/outbound/policy.py). The embedded demo (no broker) allows
# loopback, so a local Ollama works; with a broker nothing private is allowed.
TETHER_EGRESS_ALLOW = _tether.EGRESS_ALLOW
# A PEM file of extra CAs trusted by outbound calls (internal services with a private CA).
TETHER_EGRESS_CA_BUNDLE = _tether.EGRESS_CA_BUNDLE
# stdio MCP servers tenants may register by name: a JSON object, name -> command
# (a string or an argv list), started by Tether on the server (tools_app/mcp/connections.py).
TETHER_MCP_STDIO_SERVERS = _tether.MCP_STDIO_SERVERS

# --- notifications (notify_app) ------------------------------------------------
# Where links in notifications point: the console's public address.
TETHER_PUBLIC_URL = _tether.PUBLIC_URL
# Webhook deliveries: each attempt's whole call is bounded by TIMEOUT_S; a failed
# attempt (no answer, 5xx, 408, 429) is retried after BACKOFF_BASE_S * 2**(n-1)
# seconds (at most BACKOFF_MAX_S, with jitter) until the delivery is MAX_AGE_S old.
TETHER_WEBHOOK_TIMEOUT_S = _tether.WEBHOOK_TIMEOUT_S
TETHER_WEBHOOK_BACKOFF_BASE_S = _tether.WEBHOOK_BACKOFF_BASE_S
TETHER_WEBHOOK_BACKOFF_MAX_S = _tether.WEBHOOK_BACKOFF_MAX_S
TETHER_WEBHOOK_MAX_AGE_S = _tether.WEBHOOK_MAX_AGE_S
# Finished notifications (and their deliveries and attempts) are kept this long.
TETHER_WEBHOOK_RETENTION_DAYS = _tether.WEBHOOK_RETENTION_DAYS
# The SLA warning fires when this fraction of an approval's SLA has passed.
TETHER_APPROVAL_SLA_WARNING_AT = _tether.APPROVAL_SLA_WARNING_AT
# Signed decision links in e-mails (notify_app.services.links) and the Slack Web API's base.
TETHER_DECISION_LINK_MAX_AGE_S = _tether.DECISION_LINK_MAX_AGE_S
TETHER_SLACK_API_URL = _tether.SLACK_API_URL
# E-mail (for tenants that turn reviewer e-mail on): Django's backend and SMTP settings.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="tether@localhost")

# The cache holds the API throttles' counters: a shared Redis cache makes a
# limit hold across processes (CACHE_URL=redis://...); the default is per process.
CACHE_URL = env.str("CACHE_URL", default="")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# --- auth, API ------------------------------------------------------------------
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts_app.api.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "foundations.api_errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env.str("API_THROTTLE_RATE", default="6000/min")},
    "DEFAULT_PAGINATION_CLASS": None,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tether API",
    "DESCRIPTION": "Submit agent tasks, follow their events, and take the human decisions.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI and Redoc served from our own static files (no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "tasks_app.machine.TaskStatus",
        "UnfinishedTaskStatusEnum": [
            "CREATED",
            "RUNNING",
            "WAITING_FOR_INPUT",
            "WAITING_FOR_APPROVAL",
            "WAITING_FOR_RECONCILIATION",
            "WAITING_FOR_HUMAN",
        ],
        "StepStatusEnum": "tasks_app.models.StepStatus",
        "MemoryKindEnum": "memory_app.models.Kind",
        "MemoryScopeEnum": "memory_app.models.Scope",
        "ExportScopeEnum": "retention_app.models.ExportScope",
        "ExportStatusEnum": "retention_app.models.ExportStatus",
        "ApprovalStatusEnum": "approvals_app.models.Decision",
        "ReconciliationStatusEnum": ["open", "resolved", "canceled"],
        "QuestionStatusEnum": ["open", "answered", "canceled"],
        "ToolKindEnum": "tools_app.models.ToolKind",
        "OpenRequestKindEnum": ["question", "approval", "reconciliation"],
        "RuleActionEnum": "approvals_app.models.RuleAction",
    },
}
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)

# --- production hardening -------------------------------------------------------
# Without DEBUG the server refuses to start without its keys: a missing key must
# not fall back to a value anyone can read here. `scripts/start` generates both
# once into .tether/local.env (git ignores it) for the embedded mode.
if not DEBUG:
    _keys = {"SECRET_KEY": SECRET_KEY, "TETHER_SECRETS_KEY": TETHER_SECRETS_KEY}
    _missing = [name for name, value in _keys.items() if not value]
    if _missing:
        raise ImproperlyConfigured(
            f"{' and '.join(_missing)} must be set when DEBUG is off: see the README's "
            "Production section (scripts/start generates both for a local run)."
        )
elif not SECRET_KEY:
    SECRET_KEY = "tether-debug-only-" + "insecure-key" * 4  # DEBUG=true on a developer's machine

# HTTPS enforcement: on by default in production; TETHER_HTTPS=false serves plain
# HTTP (loopback or a private network: the tests, scripts/start) with no
# redirect, no HSTS and cookies without Secure.
TETHER_HTTPS = _tether.HTTPS
SECURE_SSL_REDIRECT = TETHER_HTTPS
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if TETHER_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = TETHER_HTTPS
# The `preload` directive only makes the domain eligible for the browsers'
# preload list; submitting it stays the operator's decision.
SECURE_HSTS_PRELOAD = TETHER_HTTPS
SESSION_COOKIE_SECURE = TETHER_HTTPS
CSRF_COOKIE_SECURE = TETHER_HTTPS
# Behind a TLS-terminating proxy, name the header it sets (X-Forwarded-Proto):
# Django then takes `https` in it as a secure request. Only set it when the proxy
# overwrites that header on every request, or clients could forge it.
_proxy_ssl_header = _tether.PROXY_SSL_HEADER
if _proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https")

# Login throttling (django-axes): after LIMIT failed sign-ins for one user name
# from one address, that pair is refused for COOLOFF minutes. The API's keys
# are not passwords and are not throttled by it.
AXES_FAILURE_LIMIT = _tether.LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=_tether.LOGIN_COOLOFF_MIN)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# --- static, i18n -----------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# The console's CSS/JS are served by WhiteNoise straight from the app and static/
# dirs, so every run mode (embedded, daphne, uvicorn) works without collectstatic.
WHITENOISE_USE_FINDERS = True
# Django's defaults, and the archive and export files of retention_app (local
# directories; any storage backend, django-storages' S3 one included, can replace them).
TETHER_ARCHIVE_DIR = _tether.ARCHIVE_DIR
TETHER_EXPORT_DIR = _tether.EXPORT_DIR
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "archive": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": TETHER_ARCHIVE_DIR}},
    "exports": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": TETHER_EXPORT_DIR}},
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- operations: logs and metrics (foundations/logs.py, foundations/metrics.py) ----------------
# "text" for a terminal, "json": one JSON object per line, with the task's context.
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
LOGGING = logging_config(fmt=LOG_FORMAT, level=env.str("LOG_LEVEL", default="INFO"))
# Celery keeps these handlers (config.celery answers its setup_logging signal).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# `/metrics` asks for `Authorization: Bearer <token>` when set.
TETHER_METRICS_TOKEN = _tether.METRICS_TOKEN.get_secret_value()
# memory_app/rerank.py: an optional OpenAI-compatible embeddings endpoint (off when empty).
TETHER_MEMORY_EMBEDDINGS_URL = _tether.MEMORY_EMBEDDINGS_URL
TETHER_MEMORY_EMBEDDINGS_MODEL = _tether.MEMORY_EMBEDDINGS_MODEL
TETHER_MEMORY_EMBEDDINGS_API_KEY = _tether.MEMORY_EMBEDDINGS_API_KEY.get_secret_value()
TETHER_MEMORY_EMBEDDINGS_TIMEOUT_S = _tether.MEMORY_EMBEDDINGS_TIMEOUT_S
TETHER_MEMORY_EMBEDDINGS_WEIGHT = _tether.MEMORY_EMBEDDINGS_WEIGHT
# Without PROMETHEUS_MULTIPROC_DIR, each worker serves its own figures on this
# port ("PORT" or "HOST:PORT"; a prefork pool's children on PORT+1, PORT+2, ...).
TETHER_WORKER_METRICS_PORT = _tether.WORKER_METRICS_PORT
TETHER_HOST_NAME = _tether.HOST_NAME
