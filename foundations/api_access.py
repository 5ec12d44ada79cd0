"""Who may do what through the REST API: the role policy, checked on every endpoint.

Every user belongs to exactly one tenant with one role (`accounts_app.Membership`);
every query the API makes is scoped to that tenant, so another tenant's objects
are 404 and never appear in a list. On top of that, each endpoint names an
*action*, and the action's role set below decides (403 otherwise):

=======================  ====================================  ============================
action                   roles                                 notes
=======================  ====================================  ============================
task.read                requester, operator, reviewer, admin  all tasks of the tenant
task.submit              requester, admin
task.cancel              requester, operator, admin            a requester: own tasks only
task.cancel_many         operator, admin                       bulk cancel by filter
task.input               requester, reviewer, admin            a requester: own tasks only
task.resume, task.fail   operator, admin                       escalated / waiting tasks
task.retry               operator, admin                       FAILED/CANCELED, one or many
task.summary_rollback    operator, admin                       restore a context summary
question.read            requester, operator, reviewer, admin
approval.read            operator, reviewer, admin
approval.decide          reviewer, admin                       approve / reject / respond
reconciliation.read      operator, reviewer, admin
reconciliation.resolve   reviewer, admin                       resolve / re-run the query
lease.read               operator, admin                       resource leases
tool.*, agent.*          admin                                 read and write
secret.*                 admin                                 names only; values write-only
webhook.*                admin                                 webhooks, deliveries, e-mail
agent.versions           operator, admin                       an agent's versions (read)
agent.release            admin                                 release, promote, roll back
audit.read               admin                                 the configuration audit log
workflow.read            requester, operator, reviewer, admin  definitions and versions
workflow.write           admin                                 register and change workflows
workflow.release         admin                                 release, promote, roll back
schedule.read            requester, operator, reviewer, admin  schedules and their runs
schedule.write           operator, admin                       create, change, pause, delete
memory.read              operator, reviewer, admin             items, versions, proposals
memory.write             operator, admin                       write, change, delete items
memory.review            reviewer, admin                       accept or reject a proposal
memory.erase             admin                                 erase a subject's memory
retention.read           operator, admin                       retention period, archive files
retention.write          admin                                 set the retention period
retention.erase          admin                                 erase a subject
retention.export         admin                                 export the tenant or a subject
policy.read              operator, reviewer, admin             approval rules, groups, scopes
policy.write             admin                                 change them (audited)
=======================  ====================================  ============================

Separation of duties (a task's requester may not decide on its own task's
approvals unless the agent profile allows it) is enforced by the decision
service itself, so the console and the API behave the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

from accounts_app.models import ApiKey, Membership, Role
from foundations.errors import forbidden

from .actors import Actor

R = Role
ALL_ROLES = frozenset(Role.values)

POLICY: dict[str, frozenset[str]] = {
    "task.read": ALL_ROLES,
    "task.submit": frozenset({R.REQUESTER, R.ADMIN}),
    "task.cancel": frozenset({R.REQUESTER, R.OPERATOR, R.ADMIN}),
    "task.cancel_many": frozenset({R.OPERATOR, R.ADMIN}),
    "task.input": frozenset({R.REQUESTER, R.REVIEWER, R.ADMIN}),
    "task.resume": frozenset({R.OPERATOR, R.ADMIN}),
    "task.fail": frozenset({R.OPERATOR, R.ADMIN}),
    "task.retry": frozenset({R.OPERATOR, R.ADMIN}),
    "lease.read": frozenset({R.OPERATOR, R.ADMIN}),
    "task.summary_rollback": frozenset({R.OPERATOR, R.ADMIN}),
    "question.read": ALL_ROLES,
    "inbox.read": ALL_ROLES,
    "member.read": frozenset({R.ADMIN}),
    "member.write": frozenset({R.ADMIN}),
    # every member manages their own keys; an admin, the tenant's (`accounts_app.services.accounts`)
    "api_key.read": ALL_ROLES,
    "api_key.write": ALL_ROLES,
    "approval.read": frozenset({R.OPERATOR, R.REVIEWER, R.ADMIN}),
    "approval.decide": frozenset({R.REVIEWER, R.ADMIN}),
    "reconciliation.read": frozenset({R.OPERATOR, R.REVIEWER, R.ADMIN}),
    "reconciliation.resolve": frozenset({R.REVIEWER, R.ADMIN}),
    "tool.read": frozenset({R.ADMIN}),
    "breaker.read": frozenset({R.OPERATOR, R.ADMIN}),
    "tool.write": frozenset({R.ADMIN}),
    "agent.read": frozenset({R.ADMIN}),
    "agent.write": frozenset({R.ADMIN}),
    "secret.read": frozenset({R.ADMIN}),
    "secret.write": frozenset({R.ADMIN}),
    "webhook.read": frozenset({R.ADMIN}),
    "webhook.write": frozenset({R.ADMIN}),
    "agent.versions": frozenset({R.OPERATOR, R.ADMIN}),
    "agent.release": frozenset({R.ADMIN}),
    "audit.read": frozenset({R.ADMIN}),
    "workflow.read": ALL_ROLES,
    "workflow.write": frozenset({R.ADMIN}),
    "workflow.release": frozenset({R.ADMIN}),
    "schedule.read": ALL_ROLES,
    "schedule.write": frozenset({R.OPERATOR, R.ADMIN}),
    "memory.read": frozenset({R.OPERATOR, R.REVIEWER, R.ADMIN}),
    "memory.write": frozenset({R.OPERATOR, R.ADMIN}),
    "memory.review": frozenset({R.REVIEWER, R.ADMIN}),
    "memory.erase": frozenset({R.ADMIN}),
    "retention.read": frozenset({R.OPERATOR, R.ADMIN}),
    "retention.write": frozenset({R.ADMIN}),
    "retention.erase": frozenset({R.ADMIN}),
    "retention.export": frozenset({R.ADMIN}),
    "evaluation.read": frozenset({R.OPERATOR, R.ADMIN}),
    "evaluation.write": frozenset({R.OPERATOR, R.ADMIN}),
    "policy.read": frozenset({R.OPERATOR, R.REVIEWER, R.ADMIN}),
    "policy.write": frozenset({R.ADMIN}),
}
# Actions a requester may take only on the tasks it submitted itself.
OWN_TASKS_ONLY: dict[str, frozenset[str]] = {
    "task.cancel": frozenset({R.REQUESTER}),
    "task.input": frozenset({R.REQUESTER}),
}


@dataclass(frozen=True)
class Access:
    """The caller, as the services see it: tenant, role, and the actor recorded on events."""

    tenant_id: int
    role: str
    user_id: int
    actor: Actor
    api_key_id: int | None = None  # the key it authenticated with (None: a session)


def access_of(request: Request) -> Access:
    user_id = request.user.pk
    # An API key's user comes with its membership (`accounts_app.api.auth`): no read here.
    state = getattr(request.user, "_state", None)  # (an anonymous user has none)
    cached = state.fields_cache.get("membership") if state is not None else None
    membership = cached or (
        None
        if user_id is None
        else Membership.objects.filter(user_id=user_id).only("tenant_id", "role").first()
    )
    if membership is None or user_id is None:
        raise forbidden("no_tenant", "this user belongs to no tenant")
    actor = Actor(name=request.user.get_username(), role=membership.role, user_id=user_id)
    return Access(
        tenant_id=membership.tenant_id, role=membership.role, user_id=user_id, actor=actor,
        api_key_id=request.auth.pk if isinstance(request.auth, ApiKey) else None,
    )


def may(role: str, action: str) -> bool:
    return role in POLICY[action]


def require_own_task(access: Access, action: str, *, requester_id: int | None) -> None:
    """A requester acts only on its own tasks (others of the tenant it may only read)."""
    if access.role in OWN_TASKS_ONLY.get(action, ()) and requester_id != access.user_id:
        raise forbidden("not_your_task", "a requester may only act on the tasks it submitted")


class HasRole(permissions.BasePermission):
    """The view's `policy` maps each HTTP method to an action of `POLICY`."""

    code = "role_required"

    def has_permission(self, request: Request, view: Any) -> bool:
        method = "GET" if request.method == "HEAD" else request.method
        action = view.policy.get(method)
        if action is None:
            return True  # DRF answers 405 for a method the view does not have
        access = view.access
        if may(access.role, action):
            return True
        self.message = f"the {access.role} role may not do {action}"
        return False


class TokenRateThrottle(UserRateThrottle):
    """Per API key (per user for session calls), at `API_THROTTLE_RATE`.

    The rate is read on each request (not at import) so tests can override it.
    """

    scope = "user"

    def get_rate(self) -> str | None:
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return None if rate is None else str(rate)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if isinstance(request.auth, ApiKey):
            ident = f"key{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
