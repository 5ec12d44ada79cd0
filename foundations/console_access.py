"""Who may see and do what in the console.

Every console view goes through `console_view`: the user is logged in and has
a tenant membership (or gets a clear page saying they have none), the view
receives a `ConsoleUser` carrying the tenant, the role and the `Actor` the
services record, and the response carries a strict Content-Security-Policy
(model and tool output is untrusted; nothing inline may run).

The role rules live here as small predicates, so views, templates (through
`ConsoleUser.can`) and tests ask the same question the same way:

- reviewers and admins decide approvals and reconciliations;
- operators and admins cancel, resume and fail tasks, and cancel in bulk;
- operators and admins roll a task's context summary back (or drop it);
- a requester may cancel and answer its own tasks;
- reviewers and admins answer questions on any task of the tenant;
- admins manage tools, agent profiles and secrets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, Protocol

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render

from accounts_app.models import Membership, Role

from .actors import Actor

DECIDERS = frozenset({Role.REVIEWER, Role.ADMIN})
OPERATORS = frozenset({Role.OPERATOR, Role.ADMIN})
ANSWERERS = frozenset({Role.REVIEWER, Role.ADMIN})
ADMINS = frozenset({Role.ADMIN})
SUMMARY_EDITORS = OPERATORS
INBOX_ROLES = DECIDERS


class Requested(Protocol):
    """What the role rules need of a task: who asked for it."""

    requester_id: int | None


@dataclass(frozen=True)
class ConsoleUser:
    user_id: int
    username: str
    tenant_id: int
    tenant_name: str
    role: str

    @property
    def actor(self) -> Actor:
        return Actor(name=self.username, role=self.role, user_id=self.user_id)

    # --- what the user may do ---------------------------------------------------
    @property
    def can_decide(self) -> bool:
        return self.role in DECIDERS

    @property
    def can_operate(self) -> bool:
        return self.role in OPERATORS

    @property
    def can_roll_back_summary(self) -> bool:
        return self.role in SUMMARY_EDITORS

    @property
    def can_manage(self) -> bool:
        return self.role in ADMINS

    @property
    def sees_inbox(self) -> bool:
        return self.role in INBOX_ROLES

    def can_cancel(self, task: Requested) -> bool:
        return self.can_operate or self._is_requester_of(task)

    def can_answer(self, task: Requested) -> bool:
        return self.role in ANSWERERS or self._is_requester_of(task)

    def can_resume(self, task: Requested) -> bool:
        return self.can_operate

    def _is_requester_of(self, task: Requested) -> bool:
        return task.requester_id is not None and task.requester_id == self.user_id


def console_user_of(request: HttpRequest) -> ConsoleUser | None:
    user = request.user
    if not user.is_authenticated:
        return None
    membership = Membership.objects.select_related("tenant").filter(user_id=user.pk).first()
    if membership is None:
        return None
    return ConsoleUser(
        user_id=user.pk,
        username=user.get_username(),
        tenant_id=membership.tenant_id,
        tenant_name=membership.tenant.name,
        role=membership.role,
    )


def content_security_policy(request: HttpRequest) -> str:
    host = request.get_host()
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src 'self' ws://{host} wss://{host}",
            "frame-ancestors 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "object-src 'none'",
        ]
    )


def with_csp(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.setdefault("Content-Security-Policy", content_security_policy(request))
        response.setdefault("Referrer-Policy", "same-origin")
        response.setdefault("X-Content-Type-Options", "nosniff")
        return response

    return wrapped


def console_view(
    *, roles: frozenset[str] | None = None
) -> Callable[..., Callable[..., HttpResponseBase]]:
    """Login, tenant membership, optional role gate; the view gets `request.console`."""

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            cu = console_user_of(request)
            if cu is None:
                return render(request, "console/no_tenant.html", status=403)
            request.console = cu  # type: ignore[attr-defined]
            if roles is not None and cu.role not in roles:
                return refuse(request, "Your role does not allow this.")
            return view(request, *args, **kwargs)

        return with_csp(wrapped)

    return decorate


def refuse(request: HttpRequest, message: str) -> HttpResponse:
    """A 403 page (or fragment, for htmx) that says why."""
    template = (
        "console/_refused.html" if getattr(request, "htmx", False) else "console/refused.html"
    )
    return render(request, template, {"message": message}, status=403)
