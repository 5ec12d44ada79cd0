"""The `TETHER_*` settings (issue 38): one typed declaration each
(`config.tether_settings`), today's defaults kept, a wrong value refused at
start naming its variable, the combinations that cannot work reported by
`manage.py check`, and a reference generated from the declarations."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from config import settings as settings_module
from config.checks import check_tether_settings
from config.tether_settings import (
    TETHER_DICT_KEYS,
    TetherSettings,
    env_name,
    load,
    reference_markdown,
)

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("config", "foundations", "tasks_app", "tools_app", "approvals_app", "notify_app",
           "audit_app")
FIELDS = set(TetherSettings.model_fields)

# The defaults as config/settings.py had them before they were declared here.
DEFAULTS = {
    "RUNNER": "embedded", "BROKER_TIMEOUT_S": 2.0, "WORKER_POOL": "prefork",
    "WORKER_CONCURRENCY": os.cpu_count() or 1, "WORKER_SWEEP": True, "SWEEP_INTERVAL_S": 2.0,
    "DB_POOLER": "none", "RETENTION_DAYS": 365, "RETENTION_MAX_DAYS": 1825,
    "ARCHIVE_DIR": str(Path(__file__).resolve().parents[2] / ".tether" / "archive"),
    "ARCHIVE_BATCH": 500, "ARCHIVE_DELETE_BATCH": 50,
    "EXPORT_DIR": str(Path(__file__).resolve().parents[2] / ".tether" / "exports"),
    "EXPORT_EXPIRY_HOURS": 72.0,
    "LEASE_TTL_S": 10.0, "SLICE_S": 2.0, "SLICE_MAX_STEPS": 50, "DRIVER_MAX_TASKS": 500,
    "DRIVER_DB_THREADS": 8, "DRIVER_DRAIN_S": 10.0, "TOOL_THREADS": 64,
    "PARALLEL_TOOL_CALLS": 8,
    "MAX_RUNNING_TASKS": 200, "MAX_RUNNING_PER_TENANT": 50, "BACKOFF_BASE_S": 0.5,
    "BACKOFF_MAX_S": 30.0, "STEP_ERROR_RETRIES": 5, "COMPENSATION_RESWEEP_S": 120.0,
    "COMPENSATION_THREADS": 2, "BREAKER_FAILURES": 5, "BREAKER_COOLDOWN_S": 10.0,
    "BREAKER_MAX_COOLDOWN_S": 300.0, "BREAKER_RECHECK_S": 1.0,
    "MAX_TOOL_RESULT_BYTES": 262144, "MAX_RESPONSE_BYTES": 8388608,
    "PAYLOAD_INLINE_MAX_BYTES": 65536, "TASK_PAYLOAD_MAX_BYTES": 16777216,
    "CONTEXT_WINDOW_STEPS": 8, "CONTEXT_RESULT_CHARS": 2000, "SUMMARY_THRESHOLD_STEPS": 8,
    "SUMMARY_THRESHOLD_CHARS": 16000, "SUMMARY_MAX_CHARS": 4000,
    "LEDGER_CLAIM_GRACE_S": 10.0, "LEASE_WAIT_RECHECK_S": 30.0, "PUBLISH_WINDOW_MS": 10.0,
    "LIVE_RECHECK_S": 10.0, "DEMO_NOTIFY_DELAY_S": 3.0,
    "STREAM_TOKEN_WINDOW_MS": 100.0, "STREAM_KEEPALIVE_S": 15.0, "STREAM_IDLE_S": 600.0,
    "PYTHON_TOOL_MODULES": ["demo:tools_app.demo."], "SECRETS_KEY": "", "ENV_GRANTS": [],
    "EGRESS_ALLOW": ["127.0.0.1", "::1", "localhost"], "EGRESS_CA_BUNDLE": "",
    "MCP_STDIO_SERVERS": "{}", "PUBLIC_URL": "http://localhost:8000",
    "WEBHOOK_TIMEOUT_S": 10.0, "WEBHOOK_BACKOFF_BASE_S": 10.0, "WEBHOOK_BACKOFF_MAX_S": 3600.0,
    "WEBHOOK_MAX_AGE_S": 86400.0, "WEBHOOK_RETENTION_DAYS": 30.0,
    "APPROVAL_SLA_WARNING_AT": 0.8, "HTTPS": True, "PROXY_SSL_HEADER": "",
    "LOGIN_FAILURE_LIMIT": 10, "LOGIN_COOLOFF_MIN": 15.0, "METRICS_TOKEN": "",
    "WORKER_METRICS_PORT": "",
    "HOST_NAME": socket.gethostname(),
    # memory (memory_app), declared here from the start
    "MEMORY_CONTEXT_TOKENS": 800, "MEMORY_CONTEXT_ITEMS": 8, "MEMORY_MAX_ITEMS_PER_SCOPE": 1000,
    "MEMORY_MAX_TEXT_CHARS": 2000, "MEMORY_MAX_VALUE_CHARS": 8000,
    # a summary's originals read back, memory's optional embeddings rerank (off)
    "READ_SOURCE_MAX_CHARS": 8000, "MEMORY_EMBEDDINGS_URL": "", "MEMORY_EMBEDDINGS_MODEL": "",
    "MEMORY_EMBEDDINGS_API_KEY": "", "MEMORY_EMBEDDINGS_TIMEOUT_S": 2.0,
    "MEMORY_EMBEDDINGS_WEIGHT": 0.5,
    # deciding from e-mail and Slack (notify_app), declared here from the start
    "DECISION_LINK_MAX_AGE_S": 604800.0, "SLACK_API_URL": "https://slack.com/api/",
    # rate limits (tools_app.ratelimits): no Redis named here, a minute
    "RATE_LIMIT_URL": "", "RATE_LIMIT_PERIOD_S": 60.0,
    "EVALUATION_MAX_RUNNING": 20, "EVALUATION_MAX_TASKS": 1000,
}
# Fields that reach Django under another name than TETHER_<field>.
WIRED_AS = {"WORKER_POOL": "CELERY_WORKER_POOL", "WORKER_CONCURRENCY": "CELERY_WORKER_CONCURRENCY",
            "PROXY_SSL_HEADER": "SECURE_PROXY_SSL_HEADER",
            "LOGIN_FAILURE_LIMIT": "AXES_FAILURE_LIMIT", "LOGIN_COOLOFF_MIN": "AXES_COOLOFF_TIME"}


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No TETHER_* variable, no broker, DEBUG unset: the defaults apply."""
    for name in [n for n in os.environ if n.startswith("TETHER_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.delenv("DEBUG", raising=False)
    return monkeypatch


def _plain(values: TetherSettings) -> dict[str, object]:
    dumped = values.model_dump()
    for name in ("SECRETS_KEY", "METRICS_TOKEN", "MEMORY_EMBEDDINGS_API_KEY"):
        dumped[name] = dumped[name].get_secret_value()
    return dumped


def test_every_default_is_the_one_the_settings_had(bare_env: pytest.MonkeyPatch) -> None:
    assert set(DEFAULTS) == FIELDS
    assert _plain(load()) == DEFAULTS


def test_the_defaults_that_follow_other_settings(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("CELERY_BROKER_URL", "redis://broker.internal:6379/0")
    bare_env.setenv("DEBUG", "true")
    values = load()
    assert values.RUNNER == "celery"
    assert values.EGRESS_ALLOW == []  # with a broker nothing private is allowed
    assert values.HTTPS is False
    bare_env.setenv("TETHER_RUNNER", "embedded")
    assert load().EGRESS_ALLOW == ["127.0.0.1", "::1", "localhost"]


def test_values_are_read_by_the_same_variable_names(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("TETHER_SLICE_S", "0.75")
    bare_env.setenv("TETHER_WORKER_SWEEP", "false")
    bare_env.setenv("TETHER_EGRESS_ALLOW", "ollama.internal, 10.0.0.0/8,,[::1]:8000")
    bare_env.setenv("TETHER_EGRESS_ALLOW_TYPO", "ignored")
    bare_env.setenv("TETHER_PUBLIC_URL", "https://tether.example.com/")
    bare_env.setenv("TETHER_METRICS_TOKEN", "scrape-token")
    bare_env.setenv("tether_slice_s", "9")  # names are case-sensitive, as before
    values = load()
    assert values.SLICE_S == 0.75 and values.WORKER_SWEEP is False
    assert values.EGRESS_ALLOW == ["ollama.internal", "10.0.0.0/8", "[::1]:8000"]
    assert values.PUBLIC_URL == "https://tether.example.com"
    assert values.METRICS_TOKEN.get_secret_value() == "scrape-token"
    assert "scrape-token" not in repr(values)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("TETHER_RUNNER", "celery2",
     "TETHER_RUNNER: Input should be 'embedded', 'celery' or 'manual' (got 'celery2')"),
    ("TETHER_SLICE_S", "0", "TETHER_SLICE_S: Input should be greater than 0 (got '0')"),
    ("TETHER_SLICE_S", "2s", "TETHER_SLICE_S: Input should be a valid number"),
    ("TETHER_LEASE_TTL_S", "nan", "TETHER_LEASE_TTL_S: Input should be a finite number"),
    ("TETHER_DRIVER_DB_THREADS", "1.5",
     "TETHER_DRIVER_DB_THREADS: Input should be a valid integer"),
    ("TETHER_WORKER_SWEEP", "maybe", "TETHER_WORKER_SWEEP: Input should be a valid boolean"),
    ("TETHER_WORKER_POOL", "forked", "TETHER_WORKER_POOL: Input should be 'prefork', 'threads'"),
    ("TETHER_APPROVAL_SLA_WARNING_AT", "80", "TETHER_APPROVAL_SLA_WARNING_AT: Input should be "
     "less than or equal to 1 (got '80')"),
    ("TETHER_PUBLIC_URL", "tether.example.com",
     "TETHER_PUBLIC_URL: an absolute http:// or https:// URL (got 'tether.example.com')"),
    ("TETHER_PROXY_SSL_HEADER", "X_Forwarded Proto", "TETHER_PROXY_SSL_HEADER: a header name"),
    ("TETHER_WORKER_METRICS_PORT", "0.0.0.0:metrics",
     "TETHER_WORKER_METRICS_PORT: PORT or HOST:PORT"),
    ("TETHER_HOST_NAME", "host a", "TETHER_HOST_NAME: String should match pattern"),
    ("TETHER_MCP_STDIO_SERVERS", '["fs"]', "TETHER_MCP_STDIO_SERVERS: a JSON object"),
    ("TETHER_MCP_STDIO_SERVERS", "{fs: 1}", "TETHER_MCP_STDIO_SERVERS: not JSON"),
])
def test_a_wrong_value_is_refused_naming_its_variable(
        bare_env: pytest.MonkeyPatch, name: str, value: str, message: str) -> None:
    bare_env.setenv(name, value)
    with pytest.raises(ImproperlyConfigured) as refused:
        load()
    assert message in str(refused.value)


def test_every_wrong_value_is_reported_at_once(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("TETHER_SLICE_S", "-1")
    bare_env.setenv("TETHER_TOOL_THREADS", "0")
    with pytest.raises(ImproperlyConfigured) as refused:
        load()
    assert "TETHER_SLICE_S:" in str(refused.value)
    assert "TETHER_TOOL_THREADS:" in str(refused.value)


def test_django_settings_keep_their_names_and_values() -> None:
    values = load()  # the test process's own environment, as config/settings.py read it
    assert set(settings.TETHER) == TETHER_DICT_KEYS
    assert {key: getattr(values, key) for key in TETHER_DICT_KEYS} == settings.TETHER
    assert settings.TETHER_RUNNER == values.RUNNER
    assert values.SECRETS_KEY.get_secret_value() == settings.TETHER_SECRETS_KEY
    assert tuple(values.PYTHON_TOOL_MODULES) == settings.TETHER_PYTHON_TOOL_MODULES
    assert settings.TETHER_EGRESS_ALLOW == values.EGRESS_ALLOW
    assert settings.CELERY_WORKER_POOL == values.WORKER_POOL
    for name in sorted(FIELDS - TETHER_DICT_KEYS):
        wired = WIRED_AS.get(name, env_name(name))
        assert hasattr(settings, wired), f"{name} is declared but no Django setting reads it"


def test_the_reference_lists_every_setting() -> None:
    reference = reference_markdown()
    rows = [line for line in reference.splitlines() if line.startswith("| `TETHER_")]
    assert len(rows) == len(FIELDS)
    for name, info in TetherSettings.model_fields.items():
        assert info.description, f"{name} has no description"
        [row] = [r for r in rows if r.startswith(f"| `{env_name(name)}` |")]
        assert info.description in row
    assert "| `TETHER_RUNNER` | one of `embedded`, `celery`, `manual` | `celery` when" in reference
    assert "| `TETHER_SLICE_S` | number, > 0 | `2` |" in reference


ENV_READ = re.compile(r"""(?:\benv\.\w+\(|os\.getenv\(|os\.environ(?:\.get|\.setdefault)?[\[(])"""
                      r"""\s*["'](TETHER_\w+)""")
SETTING_READ = re.compile(r"""settings\.(TETHER_\w+)|getattr\(settings,\s*["'](TETHER_\w+)""")
KNOB_READ = re.compile(r"""settings\.TETHER\[["'](\w+)["']\]""")


def names_read(source: str) -> tuple[set[str], set[str]]:
    """The TETHER_* variables and settings a source reads, and the keys of
    settings.TETHER it subscripts."""
    variables = set(ENV_READ.findall(source))
    variables |= {a or b for a, b in SETTING_READ.findall(source)}
    return variables, set(KNOB_READ.findall(source))


def test_the_scan_finds_each_way_of_reading_a_setting() -> None:
    source = """
TETHER_NEW_S = env.float("TETHER_NEW_S", default=1.0)
flag = os.environ.get("TETHER_FLAG", "")
other = os.environ["TETHER_OTHER"]
late = os.getenv('TETHER_LATE')
url = settings.TETHER_URL + getattr(settings, "TETHER_MAYBE", "")
window = settings.TETHER["WINDOW_S"]
"""
    assert names_read(source) == ({"TETHER_NEW_S", "TETHER_FLAG", "TETHER_OTHER", "TETHER_LATE",
                                   "TETHER_URL", "TETHER_MAYBE"}, {"WINDOW_S"})


def test_every_tether_variable_the_product_reads_is_declared() -> None:
    variables: set[str] = set()
    knobs: set[str] = set()
    for path in [path for package in PRODUCT for path in (ROOT / package).rglob("*.py")]:
        found, subscripts = names_read(path.read_text())
        variables |= found
        knobs |= subscripts
    # and every TETHER_* setting config/settings.py defines
    variables |= {name for name in vars(settings_module) if name.startswith("TETHER_")}
    assert {"TETHER_RUNNER", "TETHER_PUBLIC_URL", "TETHER_HTTPS"} <= variables  # the scan works
    assert {"LEASE_TTL_S", "LIVE_RECHECK_S"} <= knobs
    undeclared = sorted(v for v in variables if v.removeprefix("TETHER_") not in FIELDS)
    assert undeclared == [], f"read but not declared in config/tether_settings.py: {undeclared}"
    assert knobs <= TETHER_DICT_KEYS, knobs - TETHER_DICT_KEYS


# --- system checks ------------------------------------------------------------------


def test_the_checks_say_nothing_of_a_working_configuration() -> None:
    with override_settings(TETHER_RUNNER="celery", CELERY_BROKER_URL="redis://x:6379/0"):
        assert check_tether_settings() == []
    with override_settings(TETHER_RUNNER="manual", CELERY_BROKER_URL=""):
        assert check_tether_settings() == []


def test_the_celery_runner_without_a_broker_is_an_error() -> None:
    with override_settings(TETHER_RUNNER="celery", CELERY_BROKER_URL=""):
        [error] = check_tether_settings()
    assert error.id == "tether.E002" and error.is_serious()
    assert "CELERY_BROKER_URL" in error.msg


def _manage(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
             "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "true", **env}
    return subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.system  # runs manage.py
def test_manage_py_check_refuses_a_bogus_runner_and_passes_a_valid_environment() -> None:
    refused = _manage("check", TETHER_RUNNER="bogus")
    assert refused.returncode != 0
    assert ("TETHER_RUNNER: Input should be 'embedded', 'celery' or 'manual' (got 'bogus')"
            in refused.stderr)
    passed = _manage("check", TETHER_RUNNER="embedded", TETHER_SLICE_S="1.5")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "System check identified no issues" in passed.stdout


@pytest.mark.system  # runs manage.py
def test_manage_py_check_reports_the_combinations_that_cannot_work() -> None:
    done = _manage("check", TETHER_RUNNER="celery", DB_POOL_MAX_SIZE="4",
                   TETHER_DRIVER_DB_THREADS="4", DATABASE_URL="postgres://u@db.internal/tether")
    assert done.returncode != 0
    assert "(tether.E002) TETHER_RUNNER is 'celery' but CELERY_BROKER_URL is not set" in done.stderr
    assert "(tether.W001) TETHER_DRIVER_DB_THREADS (4) is not below DB_POOL_MAX_SIZE (4)" in (
        done.stderr)
