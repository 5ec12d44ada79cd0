"""One settings module, driven by the environment.

With no environment at all Tether runs *embedded*: a SQLite file, the in-process
runner on the ASGI server's own event loop and the in-memory channel layer.
Production sets DATABASE_URL, CELERY_BROKER_URL and CHANNEL_LAYER_URL.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = env.str("SECRET_KEY", default="tether-dev-insecure-key-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
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
    "tasks_app",
    "tools_app",
    "approvals_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.ApiRequestSizeLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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
    # and WAL, or they fail with "database is locked" (see STACK.md).
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
        }
    else:
        DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Django turns psycopg's prepared statements off (for transaction-mode poolers).
    # Its own cursors bind on the client and never prepare anyway; this lets the
    # runner's few hot statements (`tasks_app/runner/prepared.py`) be prepared.
    # Behind a pooler that cannot keep them (PgBouncer < 1.21), set it false.
    if env.bool("DB_PREPARED_STATEMENTS", default=True):
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
# Celery's Django fixup closes the DB connection around every task unless told
# to reuse it: a new connection per slice costs more than a step.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=1000)
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="tether")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A publish with the broker down must not hold a request: connecting, each
# socket operation and the publish's own retries are bounded (worst case a few
# times TETHER_BROKER_TIMEOUT_S). A failed enqueue is logged and recovered by
# the recovery sweep (tasks_app/services/dispatch.py).
TETHER_BROKER_TIMEOUT_S = env.float("TETHER_BROKER_TIMEOUT_S", default=2.0)
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
CELERY_BEAT_SCHEDULE = {
    "tether-recovery-sweep": {
        "task": "tasks_app.tasks.recovery_sweep",
        "schedule": env.float("TETHER_SWEEP_INTERVAL_S", default=5.0),
    },
}
# "celery" when a broker is configured, else the in-process embedded runner.
TETHER_RUNNER = env.str("TETHER_RUNNER", default="celery" if CELERY_BROKER_URL else "embedded")

CHANNEL_LAYER_URL = env.str("CHANNEL_LAYER_URL", default="")
if CHANNEL_LAYER_URL:
    # Redis pub/sub: a group send is one PUBLISH (the list-based core layer makes
    # three round trips and a Lua script per group). Nothing is buffered for a
    # consumer that is away, which the live feed does not need: a subscriber
    # joins the group first, then catches up from the database.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [CHANNEL_LAYER_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Runtime knobs (seconds unless named otherwise).
TETHER = {
    "LEASE_TTL_S": env.float("TETHER_LEASE_TTL_S", default=30.0),
    "SLICE_S": env.float("TETHER_SLICE_S", default=2.0),
    "SLICE_MAX_STEPS": env.int("TETHER_SLICE_MAX_STEPS", default=50),
    "MAX_RUNNING_TASKS": env.int("TETHER_MAX_RUNNING_TASKS", default=200),
    "MAX_RUNNING_PER_TENANT": env.int("TETHER_MAX_RUNNING_PER_TENANT", default=50),
    "BACKOFF_BASE_S": env.float("TETHER_BACKOFF_BASE_S", default=0.5),
    "BACKOFF_MAX_S": env.float("TETHER_BACKOFF_MAX_S", default=30.0),
    "MAX_TOOL_RESULT_BYTES": env.int("TETHER_MAX_TOOL_RESULT_BYTES", default=256 * 1024),
    "CONTEXT_WINDOW_STEPS": env.int("TETHER_CONTEXT_WINDOW_STEPS", default=8),
    "CONTEXT_RESULT_CHARS": env.int("TETHER_CONTEXT_RESULT_CHARS", default=2000),
    # older steps beyond the window are folded into a summary past either threshold
    "SUMMARY_THRESHOLD_STEPS": env.int("TETHER_SUMMARY_THRESHOLD_STEPS", default=8),
    "SUMMARY_THRESHOLD_CHARS": env.int("TETHER_SUMMARY_THRESHOLD_CHARS", default=16000),
    "SUMMARY_MAX_CHARS": env.int("TETHER_SUMMARY_MAX_CHARS", default=4000),
    "LEDGER_CLAIM_GRACE_S": env.float("TETHER_LEDGER_CLAIM_GRACE_S", default=10.0),
    # live events queued within this window of the first go out together (0: no wait)
    "PUBLISH_WINDOW_MS": env.float("TETHER_PUBLISH_WINDOW_MS", default=10.0),
    "DEMO_NOTIFY_DELAY_S": env.float("TETHER_DEMO_NOTIFY_DELAY_S", default=3.0),
}

# Python tools registered through the API or console must live under these
# module prefixes: registering one makes the server import and run that code.
TETHER_PYTHON_TOOL_MODULES = tuple(
    env.list("TETHER_PYTHON_TOOL_MODULES", default=["tools_app.demo."])
)

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
        "tasks_app.api.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.api_errors.api_exception_handler",
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
        "ApprovalStatusEnum": "approvals_app.models.Decision",
        "ReconciliationStatusEnum": ["open", "resolved", "canceled"],
        "QuestionStatusEnum": ["open", "answered", "canceled"],
        "ToolKindEnum": "tools_app.models.ToolKind",
        "OpenRequestKindEnum": ["question", "approval", "reconciliation"],
    },
}
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)

# --- static, i18n -----------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# The console's CSS/JS are served by WhiteNoise straight from the app and static/
# dirs, so every run mode (embedded, daphne, uvicorn) works without collectstatic.
WHITENOISE_USE_FINDERS = True
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # the openai SDK's HTTP client logs every request at INFO
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}
