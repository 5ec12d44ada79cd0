"""Settings for the test suite: the production settings module, with the
environment defaulted to this machine's PostgreSQL and Redis. Anything set in
the real environment wins."""
import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tether")
os.environ.setdefault("TEST_DATABASE_NAME", "test_tether")
os.environ.setdefault("CHANNEL_LAYER_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("TETHER_RUNNER", "manual")
os.environ.setdefault("TETHER_BACKOFF_BASE_S", "0.05")
os.environ.setdefault("TETHER_BACKOFF_MAX_S", "0.2")
os.environ.setdefault("TETHER_DEMO_NOTIFY_DELAY_S", "1.5")
os.environ.setdefault("API_THROTTLE_RATE", "100000/min")
# A fixed Fernet key for tenant secrets (test data only); inherited by the
# processes tests/processes.py starts, which copy this environment.
os.environ.setdefault("TETHER_SECRETS_KEY", "RSFTk7m35nceLjOzBRsRS7gUWH7knV1EYNh3fEb_J0A=")
# The suite's HTTP fakes listen on loopback: allowed as an operator would allow an
# internal service. 127.0.0.2 (loopback too) stays refused, for the attackers' listeners.
os.environ.setdefault("TETHER_EGRESS_ALLOW", "127.0.0.1,localhost,::1")
# Production settings refuse to start without keys; the tests serve plain HTTP.
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-never-used-in-production-0123456789")
os.environ.setdefault("TETHER_HTTPS", "false")
# The tests' main tenant ("t-main", tests.factories.world) plays the demo tenant.
os.environ.setdefault("TETHER_PYTHON_TOOL_MODULES", "demo:tools_app.demo.,t-main:tools_app.demo.")

from config.settings import *  # noqa: E402,F401,F403
from config.settings import INSTALLED_APPS  # noqa: E402

# For its `flush` command (tests/management/commands/flush.py), the cheap one
# pytest-django runs after each transactional test.
INSTALLED_APPS = [*INSTALLED_APPS, "tests"]

# Full-strength password hashing costs seconds per test user on this machine;
# the tests check who may do what, not the hash.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]

# Static files come from the finders (WHITENOISE_USE_FINDERS); the suite never
# runs collectstatic, so there is no STATIC_ROOT to serve from.
STATIC_ROOT = None  # type: ignore[assignment]
