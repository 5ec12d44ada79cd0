"""What accounts sets off in the apps above it, and what it asks them, through
registrations made from their `AppConfig.ready` (never an import of them):

- `on_access_lost`: a user lost access (membership revoked, user deactivated);
  called once the change commits (tasks_app closes the user's live sockets);
- `on_secret_users`: who in a tenant refers to a secret by its name, by kind
  (tools_app: `tools`, its tools and MCP servers; tasks_app: `agents`, its
  agent profiles), so that a secret still in use is not deleted.
"""
from __future__ import annotations

from collections.abc import Callable

AccessLost = Callable[[int], None]  # (user id)
SecretUsers = Callable[[int, str], list[str]]  # (tenant id, secret name) -> their names

_access_lost: list[AccessLost] = []
_secret_users: dict[str, SecretUsers] = {}


def on_access_lost(hook: AccessLost) -> None:
    if hook not in _access_lost:
        _access_lost.append(hook)


def access_lost(user_id: int) -> None:
    for hook in _access_lost:
        hook(user_id)


def on_secret_users(kind: str, finder: SecretUsers) -> None:
    _secret_users[kind] = finder


def secret_users(*, tenant_id: int, name: str) -> dict[str, list[str]]:
    """{kind: names} of what refers to the tenant's secret `name` (every kind, maybe empty)."""
    return {kind: finder(tenant_id, name) for kind, finder in _secret_users.items()}
