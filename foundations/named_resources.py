"""A tenant's named resources (tools, agent profiles, MCP servers): the rules
their create and update share, written once.

- The name is the identity within the tenant: it must match the resource's
  pattern, may not be a reserved word (a console route), cannot change, and a
  second resource of the same name is a conflict (also when a concurrent
  create wins the race to the unique constraint).
- Only the editable fields may be given; the merged resource is checked as a
  whole by the resource's own `errors`, and nothing is stored while any field
  error remains.
- An update locks the row, and every change is an audit entry written in the
  change's transaction, with the resource as it was (`before`) and is.

What differs (the field rules, what else a save records, how an audit entry
reads) is passed in. This module imports no app: the apps depend on it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, models, transaction

from foundations.errors import DomainError, conflict, invalid, not_found

M = TypeVar("M", bound=models.Model)
# (resource, actor=, action=, before=): the audit entry of a change, in its transaction
Audit = Callable[..., None]


def refused(**errors: list[str]) -> DomainError:
    return invalid("invalid", "The request is not valid.", **errors)


def model_field_errors(obj: models.Model) -> dict[str, list[str]]:
    """The model's own field checks (lengths, choices) as field errors: the last
    check of a resource, once its own rules found nothing."""
    try:
        obj.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except DjangoValidationError as exc:
        return dict(exc.message_dict)
    return {}


@dataclass(frozen=True)
class NamedResource(Generic[M]):
    model: type[M]
    noun: str  # "tool": in codes (tool_exists) and messages
    article: str  # "a" or "an", before the noun
    editable: tuple[str, ...]
    errors: Callable[[M], dict[str, list[str]]]
    audit: Audit
    audited: Callable[[M], dict[str, Any]]
    name_pattern: re.Pattern[str] | None = None
    name_rule: str = ""  # what the pattern allows, said when a name breaks it
    reserved: frozenset[str] = field(default_factory=frozenset)
    rename_hint: str = ""  # what to do instead of a rename, e.g. "create a new profile instead"

    def refuse_unknown(self, fields: dict[str, Any]) -> None:
        unknown = sorted(set(fields) - set(self.editable))
        if unknown:
            raise refused(**{k: ["unknown field"] for k in unknown})

    def name_problem(self, name: Any) -> str | None:
        if self.name_pattern is not None and not (
            isinstance(name, str) and self.name_pattern.fullmatch(name)
        ):
            return self.name_rule
        if isinstance(name, str) and name.lower() in self.reserved:
            return f"{name!r} is reserved: choose another name"
        return None

    def exists(self, name: str) -> DomainError:
        return conflict(f"{self.noun.lower().replace(' ', '_')}_exists",
                        f"{self.article} {self.noun} named {name!r} already exists", name=name)

    def create(
        self,
        *,
        tenant_id: int,
        name: str,
        fields: dict[str, Any],
        actor: Any,
        defaults: dict[str, Any] | None = None,
        on_save: Callable[[M], object] | None = None,
    ) -> M:
        """Build, check, store; `on_save` records what else the new row brings
        (an agent's first version), before the audit entry."""
        self.refuse_unknown(fields)
        obj = self.model(tenant_id=tenant_id, name=name, **(defaults or {}))
        for key, value in fields.items():
            setattr(obj, key, value)
        errors = self.errors(obj)
        if problem := self.name_problem(name):
            errors.setdefault("name", []).append(problem)
        if errors:
            raise refused(**errors)
        if self.model._default_manager.filter(tenant_id=tenant_id, name=name).exists():
            raise self.exists(name)
        try:
            with transaction.atomic():
                obj.save()
                if on_save is not None:
                    on_save(obj)
                self.audit(obj, actor=actor, action="created", before=None)
        except IntegrityError:  # a concurrent create of the same name won
            raise self.exists(name)
        return obj

    def update(
        self,
        *,
        tenant_id: int,
        name: str,
        changes: dict[str, Any],
        actor: Any,
        prepare: Callable[[M, dict[str, Any]], None] | None = None,
        on_save: Callable[[M], object] | None = None,
    ) -> M:
        """Change some fields of the locked row; the merged resource is checked as
        a whole. `prepare` sees the row and the changes before they are applied."""
        changes = dict(changes)
        if self.rename_hint and "name" in changes and changes.pop("name") != name:
            raise refused(name=[f"{self.article} {self.noun} cannot be renamed: "
                                f"{self.rename_hint}"])
        self.refuse_unknown(changes)
        with transaction.atomic():
            obj = self.locked(tenant_id, name)
            before = self.audited(obj)
            if prepare is not None:
                prepare(obj, changes)
            for key, value in changes.items():
                setattr(obj, key, value)
            errors = self.errors(obj)
            if errors:
                raise refused(**errors)
            obj.save()
            if on_save is not None:
                on_save(obj)
            self.audit(obj, actor=actor, action="updated", before=before)
        return obj

    def locked(self, tenant_id: int, name: str) -> M:
        """The tenant's resource of that name, locked for the caller's transaction."""
        obj = (self.model._default_manager.select_for_update()
               .filter(tenant_id=tenant_id, name=name).first())
        if obj is None:
            raise not_found(self.noun[0].upper() + self.noun[1:])
        return obj
