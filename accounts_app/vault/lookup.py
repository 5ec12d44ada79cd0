"""Resolution at call time: references to values, for the calling task's tenant only.

This is the only code that decrypts a tenant secret or reads a granted
environment variable. The tenant is always the one of the task being served
(passed by the runner or the tool executor), never one a tenant names, so a
tenant can only ever use its own secrets. What cannot be resolved (a secret
that does not exist or no longer decrypts, a variable not granted or not set)
comes back as a problem naming the reference, never a value.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from foundations.errors import DomainError

from ..models import Tenant, TenantSecret
from .grants import env_granted, not_granted_message
from .keyring import Undecryptable, unseal
from .references import (
    env_ref,
    header_secret_names,
    model_env_names,
    model_secret_names,
    render,
    secret_ref,
    template_errors,
    template_names,
)
from .values import Resolved, Unresolved


def secret_values(*, tenant_id: int, names: Iterable[str]) -> Resolved:
    """The values of the tenant's secrets `names` (`secret:NAME` references)."""
    wanted = set(names)
    if not wanted:
        return Resolved()
    stored = dict(TenantSecret.objects.filter(tenant_id=tenant_id, name__in=wanted)
                  .values_list("name", "ciphertext"))
    values: dict[str, str] = {}
    problems: dict[str, str] = {}
    for name in sorted(wanted):
        ref = secret_ref(name)
        if name not in stored:
            problems[ref] = f"the secret {name!r} does not exist in this tenant"
            continue
        try:
            values[ref] = unseal(stored[name])
        except Undecryptable:
            problems[ref] = (f"the secret {name!r} cannot be decrypted with the keys of "
                             "TETHER_SECRETS_KEY")
        except DomainError as exc:  # no key configured
            problems[ref] = f"the secret {name!r} cannot be read: {exc.message}"
    return Resolved(values=values, problems=problems)


def tool_headers(*, tenant_id: int, secret_headers: dict[str, str]) -> tuple[dict[str, str],
                                                                           Resolved]:
    """A tool's secret headers rendered for the tenant, and what they resolved
    (for redaction). Raises `Unresolved` when a secret is missing."""
    for header, template in secret_headers.items():
        if template_errors(template):  # only a row written around the services
            raise Unresolved(f"the secret header {header} is not a template naming secrets of "
                             "this tenant: register the tool again")
    names = header_secret_names(secret_headers)
    if not names:
        return {}, Resolved()
    resolved = secret_values(tenant_id=tenant_id, names=names)
    headers = {
        header: render(template, {n: resolved.get(secret_ref(n)) for n in template_names(template)})
        for header, template in secret_headers.items()
    }
    return headers, resolved


def model_keys(*, tenant_id: int, model: dict[str, Any]) -> Resolved:
    """The API keys an agent's model settings name (`secret:NAME` and granted
    `env:NAME` references). No query when the model names none."""
    secrets = model_secret_names(model)
    envs = model_env_names(model)
    if not secrets and not envs:
        return Resolved()
    resolved = secret_values(tenant_id=tenant_id, names=secrets.values())
    values, problems = dict(resolved.values), dict(resolved.problems)
    if envs:
        tenant = Tenant.objects.filter(pk=tenant_id).values_list("name", flat=True).first() or ""
        for name in set(envs.values()):
            ref = env_ref(name)
            value = os.environ.get(name, "")
            if not env_granted(name, tenant=tenant):
                problems[ref] = not_granted_message(name)
            elif not value:
                problems[ref] = f"the environment variable {name} is not set on the server"
            else:
                values[ref] = value
    return Resolved(values=values, problems=problems)
