"""Who calls an A2A agent, and which one: a bearer API key (the keys of the
REST API, `Authorization: Bearer <key>`) and the published agent or workflow
its path names.

A key acts as its user (`foundations.api_access.Access`): the tenant's role policy
decides what it may do, and the user's scope (`RequesterScope.agents`, empty:
no limit) narrowed by the key's (`ApiKey.agents`; `approvals_app.policy`) which
agents it sees (workflows are not in scopes, as on the REST
API). One that is not published, is another tenant's or is outside the scope
is not found, as an unknown one is.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounts_app.models import Membership
from accounts_app.services.accounts import api_key_in_use
from approvals_app.policy import agent_allowed
from foundations.actors import Actor
from foundations.api_access import Access
from tasks_app.models import AgentProfile
from tasks_app.selectors import published_agent_at
from workflows_app.models import Workflow
from workflows_app.selectors import published_workflow_at

AGENT, WORKFLOW = "agent", "workflow"
Target = AgentProfile | Workflow


@dataclass(frozen=True)
class Door:
    """A call of one published agent or workflow, by an authenticated caller."""

    access: Access
    target: Target


class Refused(Exception):
    """The request is answered at the HTTP level, before the protocol: 401 or 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def published_at(tenant: str, kind: str, name: str) -> Target | None:
    return published_workflow_at(tenant, name) if kind == WORKFLOW \
        else published_agent_at(tenant, name)


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
                  actor=Actor(name=user.get_username(), role=membership.role, user_id=user.pk),
                  api_key_id=key.pk)


def door_of(authorization: str | None, *, tenant: str, kind: str, name: str) -> Door:
    """The agent at /a2a/<tenant>/<name> (a workflow at /a2a/<tenant>/workflows/<name>),
    for the caller of `authorization`."""
    access = access_of_bearer(authorization)
    if access is None:
        raise Refused(401, "a valid API key is required: Authorization: Bearer <key>")
    target = published_at(tenant, kind, name)
    if (target is None or target.tenant_id != access.tenant_id
            or (isinstance(target, AgentProfile) and not agent_allowed(
                tenant_id=access.tenant_id, requester_id=access.user_id, agent=target.name,
                api_key_id=access.api_key_id))):
        raise Refused(404, f"no {kind} {name!r} here")
    return Door(access=access, target=target)
