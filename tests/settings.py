"""Settings for the test suite: the production settings module, with the
environment defaulted to this machine's PostgreSQL and Redis. Anything set in
the real environment wins.

`TETHER_TEST_DB=sqlite` runs the suite on SQLite instead, configured as the
embedded mode configures it (config/settings.py: WAL, IMMEDIATE transactions,
the busy timeout), on a file named after TEST_DATABASE_NAME in the temporary
directory. `scripts/test` runs the runtime-core tests (`-m core`) that way too;
tests that need PostgreSQL are skipped there (tests/conftest.py says why).
"""
import os
import tempfile
from pathlib import Path

from tests.isolation import per_worker_redis

os.environ.setdefault("TEST_DATABASE_NAME", "test_tether")
TETHER_TEST_DB = os.environ.get("TETHER_TEST_DB", "postgresql")
if TETHER_TEST_DB == "sqlite":
    # Forced, not defaulted: a DATABASE_URL exported for the PostgreSQL run must
    # not turn the SQLite run back into a PostgreSQL one.
    _SQLITE_DIR = Path(tempfile.gettempdir())
    os.environ["DATABASE_URL"] = f"sqlite:///{_SQLITE_DIR / 'tether-tests-unused.sqlite3'}"
elif TETHER_TEST_DB == "postgresql":
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tether")
else:
    raise ValueError(f"TETHER_TEST_DB must be postgresql or sqlite, not {TETHER_TEST_DB!r}")
# Each pytest-xdist worker has a Redis database of its own (tests/isolation.py).
os.environ["CHANNEL_LAYER_URL"] = per_worker_redis(
    os.environ.get("CHANNEL_LAYER_URL", "redis://127.0.0.1:6379/14"), role="layer")
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
from config.settings import DATABASES, INSTALLED_APPS  # noqa: E402

if TETHER_TEST_DB == "sqlite":
    # A file, as the embedded mode uses (an in-memory database has no WAL, and
    # the runner's threads must see each other's commits as separate connections).
    DATABASES["default"]["TEST"] = {
        "NAME": str(_SQLITE_DIR / f"{os.environ['TEST_DATABASE_NAME']}.sqlite3")}

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
