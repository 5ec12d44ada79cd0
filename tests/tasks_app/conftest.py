"""Runtime test fixtures: see `tests.fakes.runtime`."""
import pytest

from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.runtime import fake_http, quiet_tools  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def _runtime_isolation(quiet_tools, settings):  # noqa: F811
    """No test tool or tool thread outlives its test; users (the `world` fixture)
    are made with a fast hasher, since passwords are not what these tests test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    yield
