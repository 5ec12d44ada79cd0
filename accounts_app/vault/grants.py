"""Which server environment variables a tenant may use: only those the operator grants.

`TETHER_ENV_GRANTS` lists them, comma-separated: a bare `NAME` is granted to
every tenant, `tenant:NAME` to that tenant only, e.g.
``OLLAMA_API_KEY,acme:OPENAI_API_KEY``. The server's own credentials are never
granted, whatever the setting says. A grant is checked when a profile is saved
and again at every call (a grant can be withdrawn).
"""
from __future__ import annotations

from django.conf import settings

NEVER_GRANTED = frozenset({
    "SECRET_KEY",
    "TETHER_SECRETS_KEY",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CHANNEL_LAYER_URL",
    "CACHE_URL",
})


def env_granted(name: str, *, tenant: str) -> bool:
    """Whether the tenant named `tenant` may use the environment variable `name`."""
    if name in NEVER_GRANTED:
        return False
    for entry in getattr(settings, "TETHER_ENV_GRANTS", ()):
        scope, _, granted = str(entry).strip().rpartition(":")
        if granted == name and scope in ("", tenant):
            return True
    return False


def not_granted_message(name: str) -> str:
    return (f"the environment variable {name} is not granted to this tenant "
            "(the operator grants variables in TETHER_ENV_GRANTS); store the key as a "
            "tenant secret and name it in api_key_secret")
