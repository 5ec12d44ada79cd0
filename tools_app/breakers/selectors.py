"""Reads of breakers for the API and the console, scoped to one tenant."""
from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from ..models import Breaker, BreakerState, BreakerWaiter
from .store import Target

CLOSED_VIEW = {"state": BreakerState.CLOSED.value, "failures": 0, "open_until": None,
               "opened_count": 0, "waiting_tasks": 0}


def breakers_of_tenant(tenant_id: int, *, kind: str = "") -> list[dict[str, Any]]:
    """Every breaker of the tenant whose downstream ever failed, with how many
    tasks wait for it."""
    rows = Breaker.objects.filter(tenant_id=tenant_id)
    if kind:
        rows = rows.filter(kind=kind)
    return [breaker_view(b) for b in _with_waiting(rows).order_by("kind", "name", "target")]


def _with_waiting(rows: QuerySet[Breaker]) -> QuerySet[Breaker]:
    """Annotated with the tasks waiting for each (none once it is closed)."""
    return rows.annotate(waiting=Count("waiters", filter=~Q(state=BreakerState.CLOSED)))


def breaker_view(b: Breaker) -> dict[str, Any]:
    return {
        "kind": b.kind, "name": b.name, "target": b.target, "state": b.state,
        "failures": b.failures, "cooldown_s": b.cooldown_s, "open_until": b.open_until,
        "probe_until": b.probe_until if b.state == BreakerState.HALF_OPEN else None,
        "opened_count": b.opened_count, "last_error": b.last_error, "changed_at": b.changed_at,
        "waiting_tasks": getattr(b, "waiting", 0),
    }


def breakers_by_key(targets: list[Target]) -> dict[str, dict[str, Any]]:
    """The state of each target's breaker (closed when it has no row)."""
    rows = {b.key: b for b in _with_waiting(Breaker.objects.filter(
        key__in=[t.key for t in targets]))}
    return {t.key: breaker_view(rows[t.key]) if t.key in rows else dict(CLOSED_VIEW)
            for t in targets}


def waits_of_task(task_id: int) -> list[dict[str, Any]]:
    """The breakers a task waits for (not closed yet)."""
    waits = (BreakerWaiter.objects.filter(task_id=task_id)
             .exclude(breaker__state=BreakerState.CLOSED).select_related("breaker"))
    return [{**breaker_view(w.breaker), "since": w.since} for w in waits]


def tool_breakers(tools: list[Any]) -> dict[str, dict[str, Any]]:
    """The breaker of each http tool (`Tool` rows), by tool name."""
    targets = {t.name: Target.tool(tenant_id=t.tenant_id, name=t.name)
               for t in tools if t.kind == "http"}
    states = breakers_by_key(list(targets.values()))
    return {name: states[target.key] for name, target in targets.items()}


def model_breakers(tenant_id: int, model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The breakers of an agent's model endpoints: {"primary": .., "fallback": ..}
    ({} for a model that calls no endpoint)."""
    if model.get("backend") != "openai":
        return {}
    endpoints = {"primary": (str(model.get("base_url") or ""), str(model.get("name") or ""))}
    fallback = model.get("fallback")
    if isinstance(fallback, dict) and fallback.get("name"):
        endpoints["fallback"] = (str(fallback.get("base_url") or endpoints["primary"][0]),
                                 str(fallback["name"]))
    targets = {role: Target.model(tenant_id=tenant_id, base_url=url, name=name)
               for role, (url, name) in endpoints.items()}
    states = breakers_by_key(list(targets.values()))
    return {role: states[t.key] for role, t in targets.items()}
