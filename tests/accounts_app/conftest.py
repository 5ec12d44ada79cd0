"""Fixtures of the accounts tests: the REST API tests' (token-authenticated
clients per role, a second tenant, a fast password hasher and a fresh
throttle for each test)."""
from tests.api.conftest import (  # noqa: F401 - fixtures
    _fast_password_hashing,
    _fresh_throttle_cache,
    hanging_url,
    main,
    other,
)
