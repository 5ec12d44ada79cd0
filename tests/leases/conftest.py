"""Lease test fixtures: the runtime fixtures and the API's tenancy helpers."""
import pytest

from tests.api.conftest import hanging_url, main, other  # noqa: F401 - fixtures
from tests.fakes.runtime import fake_http, quiet_tools  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def _runtime_isolation(quiet_tools, settings):  # noqa: F811
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    yield
