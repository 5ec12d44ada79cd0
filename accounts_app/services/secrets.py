"""Tenant secrets: create, rotate (a new value) and delete, each attributed.

A secret is write-only: these services take a value and encrypt it
(`accounts_app.vault.keyring`), and nothing here or anywhere else returns it;
only `accounts_app.vault.lookup` reads it, at call time, for its own tenant. The
name is the secret's identity (tools and agent profiles refer to it) and
cannot change. Deleting a secret that a tool or an agent profile of the tenant
still refers to is refused (409, with their names: `hooks.secret_users`), so a reference never
dangles by accident; a task already under way that uses it fails its next call
with a permission error naming the secret.

Every change is an audit entry (`audit_app`) with the secret's name and who
set it, never its value.

Values are 1 to `MAX_VALUE_CHARS` printable ASCII characters: they are sent as
HTTP header values and API keys, where nothing else is safely valid.
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import DomainError, conflict, invalid, not_found

from ..hooks import secret_users
from ..models import TenantSecret
from ..vault.keyring import seal
from ..vault.references import SECRET_NAME, SECRET_NAME_RULE

log = logging.getLogger(__name__)

MAX_VALUE_CHARS = 4096


def secret_create(*, tenant_id: int, name: str, value: str, actor: Actor) -> TenantSecret:
    errors = _name_errors(name) | _value_errors(value)
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)
    if TenantSecret.objects.filter(tenant_id=tenant_id, name=name).exists():
        raise _exists(name)
    secret = TenantSecret(tenant_id=tenant_id, name=name, ciphertext=seal(value),
                          created_by=actor.name)
    try:
        with transaction.atomic():
            secret.save()
            _audit(secret, actor, "created", before=None, after=_audited(secret))
    except IntegrityError:  # a concurrent create of the same name won
        raise _exists(name)
    log.info("secret %s of tenant %s created by %s", name, tenant_id, actor.name)
    return secret


def secret_rotate(*, tenant_id: int, name: str, value: str, actor: Actor) -> TenantSecret:
    """Replace the value; the next call that uses the secret sends the new one."""
    errors = _value_errors(value)
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)
    ciphertext = seal(value)  # before the lock: encryption needs no row
    with transaction.atomic():
        secret = (TenantSecret.objects.select_for_update()
                  .filter(tenant_id=tenant_id, name=name).first())
        if secret is None:
            raise not_found("Secret")
        before = _audited(secret)
        secret.ciphertext = ciphertext
        secret.rotated_at = timezone.now()
        secret.rotated_by = actor.name
        secret.save(update_fields=["ciphertext", "rotated_at", "rotated_by"])
        _audit(secret, actor, "rotated", before=before, after=_audited(secret))
    log.info("secret %s of tenant %s rotated by %s", name, tenant_id, actor.name)
    return secret


def secret_delete(*, tenant_id: int, name: str, actor: Actor) -> None:
    with transaction.atomic():
        secret = (TenantSecret.objects.select_for_update()
                  .filter(tenant_id=tenant_id, name=name).first())
        if secret is None:
            raise not_found("Secret")
        users = secret_users(tenant_id=tenant_id, name=name)
        if any(users.values()):
            raise conflict(
                "secret_in_use",
                f"the secret {name!r} is still referenced: change these first",
                **users,
            )
        _audit(secret, actor, "deleted", before=_audited(secret), after=None)
        secret.delete()
    log.info("secret %s of tenant %s deleted by %s", name, tenant_id, actor.name)


def _audited(secret: TenantSecret) -> dict[str, Any]:
    """A secret as the audit log shows it: its name and who set it, never its value."""
    return {"name": secret.name, "created_by": secret.created_by,
            "rotated_at": secret.rotated_at, "rotated_by": secret.rotated_by}


def _audit(secret: TenantSecret, actor: Actor, action: str, *, before: dict[str, Any] | None,
           after: dict[str, Any] | None) -> None:
    audit_record(actor=actor, tenant_id=secret.tenant_id, kind="secret", name=secret.name,
                 action=action, before=before, after=after, object_id=secret.pk)


def _exists(name: str) -> DomainError:
    return conflict("secret_exists", f"a secret named {name!r} already exists: rotate it instead",
                    name=name)


def _name_errors(name: object) -> dict[str, list[str]]:
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
        return {"name": [SECRET_NAME_RULE]}
    return {}


def _value_errors(value: object) -> dict[str, list[str]]:
    # The messages never repeat the value.
    if not isinstance(value, str) or not value:
        return {"value": ["the secret's value, a non-empty string"]}
    if len(value) > MAX_VALUE_CHARS:
        return {"value": [f"at most {MAX_VALUE_CHARS} characters"]}
    if not all(" " <= c <= "~" for c in value):
        return {"value": ["printable ASCII only (no line breaks, tabs or other characters)"]}
    return {}
