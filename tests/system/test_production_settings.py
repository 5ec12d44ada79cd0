"""The production settings as an operator starts them: a fresh process with only
the documented variables (not the tests' environment), DEBUG off."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from tests.processes import ROOT

FERNET_KEY = "dGV0aGVyLXRlc3QtcGxhY2Vob2xkZXIta2V5LTAwMzI="
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "TETHER_SECRETS_KEY": FERNET_KEY,
    "ALLOWED_HOSTS": "tether.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://tether.example.com",
    "DATABASE_URL": "postgres://tether@db.internal:5432/tether",
    "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
    "CHANNEL_LAYER_URL": "redis://redis.internal:6379/1",
    "TETHER_PROXY_SSL_HEADER": "X-Forwarded-Proto",
}
SHOWN = [
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER",
    "AXES_FAILURE_LIMIT",
]


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        **env,
    }
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


def settings_of(env: dict[str, str]) -> dict[str, object]:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n, None) for n in {SHOWN!r}}}, default=str)); "
        "print(json.dumps(s.AXES_COOLOFF_TIME.total_seconds()))"
    )
    done = run(["-c", code], env)
    assert done.returncode == 0, done.stderr
    values, cooloff = done.stdout.strip().splitlines()[-2:]
    return {**json.loads(values), "cooloff_s": json.loads(cooloff)}


def test_check_deploy_has_nothing_to_say_with_the_production_variables():
    done = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout
    assert "WARNINGS" not in done.stdout + done.stderr


def test_https_is_enforced_by_default_and_the_proxy_header_is_trusted_when_named():
    values = settings_of(PRODUCTION)
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 365 * 24 * 3600
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert values["SESSION_COOKIE_SECURE"] is True and values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["AXES_FAILURE_LIMIT"] == 10 and values["cooloff_s"] == 15 * 60


def test_tether_https_false_serves_plain_http():
    values = settings_of(
        {
            **PRODUCTION,
            "TETHER_HTTPS": "false",
            "TETHER_PROXY_SSL_HEADER": "",
            "TETHER_LOGIN_FAILURE_LIMIT": "5",
            "TETHER_LOGIN_COOLOFF_MIN": "3",
        }
    )
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False
    assert values["SESSION_COOKIE_SECURE"] is False and values["CSRF_COOKIE_SECURE"] is False
    assert values["SECURE_PROXY_SSL_HEADER"] is None
    assert values["AXES_FAILURE_LIMIT"] == 5 and values["cooloff_s"] == 3 * 60


def test_the_server_refuses_to_start_without_its_keys():
    for missing in ("SECRET_KEY", "TETHER_SECRETS_KEY"):
        env = {k: v for k, v in PRODUCTION.items() if k != missing}
        done = run(["manage.py", "check"], env)
        assert done.returncode != 0
        assert "ImproperlyConfigured" in done.stderr
        assert f"{missing} must be set when DEBUG is off" in done.stderr
        # and never the public development value in its place
        assert "insecure" not in done.stdout
