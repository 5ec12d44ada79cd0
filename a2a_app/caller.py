"""Who calls an A2A agent, and which agent: a bearer API key (the keys of the
REST API, `Authorization: Bearer <key>`) and the published agent its path names.

A key acts as its user (`config.api_access.Access`): the tenant's role policy
decides what it may do, and the user's scope (`RequesterScope.agents`, empty:
no limit) which agents it sees. An agent that is not published, is another
tenant's or is outside the scope is not found, as an unknown one is.
"""
from __future__ import annotations

from dataclasses import dataclass

from approvals_app.policy import agent_allowed
from config.api_access import Access
from tasks_app.actors import Actor
from tasks_app.models import AgentProfile, Membership
from tasks_app.selectors import published_agent_at
from tasks_app.services.accounts import api_key_in_use


@dataclass(frozen=True)
class Door:
    """A call of one published agent, by an authenticated caller."""

    access: Access
    agent: AgentProfile


class Refused(Exception):
    """The request is answered at the HTTP level, before the protocol: 401 or 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def access_of_bearer(authorization: str | None) -> Access | None:
    """The caller an `Authorization: Bearer <API key>` header names; None when it names none."""
    scheme, _, raw = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    key = api_key_in_use(raw.strip())
    if key is None:
        return None
    try:
        membership = key.user.membership
    except Membership.DoesNotExist:
        return None
    user = key.user
    return Access(tenant_id=membership.tenant_id, role=membership.role, user_id=user.pk,
                  actor=Actor(name=user.get_username(), role=membership.role, user_id=user.pk))


def door_of(authorization: str | None, *, tenant: str, agent: str) -> Door:
    """The agent at /a2a/<tenant>/<agent>, for the caller of `authorization`."""
    access = access_of_bearer(authorization)
    if access is None:
        raise Refused(401, "a valid API key is required: Authorization: Bearer <key>")
    profile = published_agent_at(tenant, agent)
    if (profile is None or profile.tenant_id != access.tenant_id
            or not agent_allowed(tenant_id=access.tenant_id, requester_id=access.user_id,
                                 agent=profile.name)):
        raise Refused(404, f"no agent {agent!r} here")
    return Door(access=access, agent=profile)
