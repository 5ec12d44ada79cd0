"""Recording configuration changes: the one write path of the audit log.

`audit_record` is called by every service that changes a tenant's
configuration (tools, agents and their releases, secrets, webhooks,
memberships and API keys), inside that service's transaction, so an entry
exists exactly when its change committed. Views never call it.

What is recorded: who (the actor's name and role, and the user), when, the
tenant, the object's kind and name (and id when it has one), the action, the
diff of the object's audited fields (`before` -> `after`, see `diffs`) and the
HTTP request's id (`request_ids`). Callers pass the fields a person would
want to see, never a secret's value; as a second line of defence, any key
named like a credential (`SENSITIVE_KEYS`) is replaced by "[redacted]" at any
depth before the diff is taken.

    audit_record(actor=actor, tenant_id=t, kind="webhook", name=str(hook.pk),
                 action="created", before=None, after={"url": ..., "events": [...]})
"""
from __future__ import annotations

import json
from typing import Any, Protocol

from django.core.serializers.json import DjangoJSONEncoder

from .diffs import config_diff
from .models import AuditEntry
from .request_ids import current_request_id
from .selectors import audit_entries_naming

# Keys whose values are never written into an entry, wherever they appear.
SENSITIVE_KEYS = frozenset({"value", "ciphertext", "secret", "signing_secret", "password",
                            "api_key", "key_hash", "token", "authorization"})
REDACTED = "[redacted]"
# Actions that describe a change of fields: with nothing changed, nothing is recorded.
FIELD_CHANGES = frozenset({"updated"})


class Who(Protocol):
    """The actor of a change (`foundations.actors.Actor` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def user_id(self) -> int | None: ...


def audit_record(*, actor: Who, tenant_id: int, kind: str, name: str, action: str,
                 before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
                 object_id: str | int = "") -> AuditEntry | None:
    """Append one entry in the caller's transaction; None when an `updated`
    changed nothing."""
    diff = config_diff(_clean(before or {}), _clean(after or {}))
    if action in FIELD_CHANGES and not diff:
        return None
    return AuditEntry.objects.create(
        tenant_id=tenant_id, actor=actor.name[:150], actor_role=(actor.role or "")[:16],
        user_id=actor.user_id, kind=kind[:32], name=str(name)[:200],
        object_id=str(object_id)[:64], action=action[:32], diff=diff,
        request_id=current_request_id())


ERASED = [{"path": "", "change": "erased", "old": None, "new": None}]


def audit_redact(*, tenant_id: int, containing: str) -> int:
    """Erasure: blank the diff of every entry of the tenant whose diff or name
    holds `containing` (an erased subject), keeping who did what and when.
    The number of entries redacted."""
    entries = audit_entries_naming(tenant_id, containing)
    return AuditEntry.objects.filter(pk__in=list(entries.values_list("pk", flat=True))).update(
        diff=ERASED, name="[erased]")


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    """JSON values only (decimals and dates as text), credentials redacted."""
    plain = json.loads(json.dumps(data, cls=DjangoJSONEncoder, default=str))
    return _redact(plain)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if str(k).lower() in SENSITIVE_KEYS else _redact(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value
