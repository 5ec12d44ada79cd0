"""Registering workflows and their versions.

Invariants (as for agent profiles' versions):
- a version is the definition as registered, never changed or deleted,
  numbered 1, 2, 3 per workflow under the workflow's row lock;
- a definition is checked against the tenant's enabled tools and agents
  before it is stored: every problem is a field error naming the node (nothing written);
- the first version is current; a later one reaches new runs when it is
  promoted (`workflow_promote`) or through a release (`workflow_release`:
  a share of new runs, a pure function of the run's Idempotency-Key);
  `workflow_rollback` makes an earlier version current again.
"""
from __future__ import annotations

import hashlib
from typing import Any

from django.db import IntegrityError, transaction

from audit_app.diffs import config_diff
from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import conflict, invalid, not_found
from tasks_app.models import AgentProfile
from tools_app.registry import tool_specs

from ..definition import DefinitionError, load, parse_source
from ..models import Workflow, WorkflowVersion

NAME_MAX = 100
RESERVED_NAMES = frozenset({"new"})  # /workflows/new/ is the editor
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def _checked(tenant_id: int, definition: Any) -> tuple[dict[str, Any], str]:
    """(the parsed definition, its YAML text if given as text); 400 on any problem."""
    source = definition if isinstance(definition, str) else ""
    try:
        raw = parse_source(definition)
        load(raw, tools=tool_specs(tenant_id=tenant_id).keys(),
             agents=AgentProfile.objects.filter(tenant_id=tenant_id, enabled=True)
             .values_list("name", flat=True))
    except DefinitionError as exc:
        raise invalid("invalid_definition", "The workflow definition is not valid.",
                      **{f"definition.{k}" if k != "definition" else k: v
                         for k, v in exc.errors.items()}) from exc
    return raw, source


def _name_checked(name: Any) -> str:
    if (not isinstance(name, str) or not name or len(name) > NAME_MAX
            or not set(name) <= _NAME_CHARS):
        raise invalid("invalid", "The request is not valid.",
                      name=[f"1-{NAME_MAX} lowercase letters, digits, '_' or '-'"])
    if name in RESERVED_NAMES:
        raise invalid("invalid", "The request is not valid.",
                      name=[f"{name!r} is reserved (a console page of its own)"])
    return name


def workflow_create(*, tenant_id: int, name: Any, definition: Any, description: str = "",
                    published: bool = False, actor: Actor) -> Workflow:
    name = _name_checked(name)
    raw, source = _checked(tenant_id, definition)
    try:
        with transaction.atomic():
            workflow = Workflow.objects.create(tenant_id=tenant_id, name=name,
                                               description=description[:2000],
                                               published=published)
            _version(workflow, raw, source, previous=None, actor=actor)
            audit_record(actor=actor, tenant_id=tenant_id, kind="workflow", name=name,
                         action="created", after={"definition": raw, "published": published})
    except IntegrityError as exc:
        raise conflict("exists", f"a workflow named {name!r} exists") from exc
    return workflow


def workflow_update(*, tenant_id: int, name: str, actor: Actor, definition: Any = None,
                    description: str | None = None, enabled: bool | None = None,
                    published: bool | None = None) -> Workflow:
    """A new definition records a new version (not current until promoted,
    except while the workflow has only its first); description, enabled and
    published are not versioned (publishing is audited)."""
    checked = _checked(tenant_id, definition) if definition is not None else None
    with transaction.atomic():
        workflow = Workflow.objects.select_for_update().filter(tenant_id=tenant_id,
                                                               name=name).first()
        if workflow is None:
            raise not_found("workflow")
        if description is not None:
            workflow.description = description[:2000]
        if enabled is not None:
            workflow.enabled = enabled
        if published is not None and published != workflow.published:
            workflow.published = published
            audit_record(actor=actor, tenant_id=tenant_id, kind="workflow", name=name,
                         action="published" if published else "unpublished",
                         before={"published": not published}, after={"published": published})
        workflow.save(update_fields=["description", "enabled", "published", "updated_at"])
        if checked is not None:
            latest = WorkflowVersion.objects.filter(workflow=workflow).order_by("-number").first()
            if latest is None or latest.definition != checked[0]:
                _version(workflow, checked[0], checked[1], previous=latest, actor=actor)
                audit_record(actor=actor, tenant_id=tenant_id, kind="workflow", name=name,
                             action="edited", before={"definition": latest.definition
                                                      if latest else None},
                             after={"definition": checked[0]})
    return workflow


def _version(workflow: Workflow, raw: dict[str, Any], source: str, *,
             previous: WorkflowVersion | None, actor: Actor) -> WorkflowVersion:
    number = previous.number + 1 if previous else 1
    return WorkflowVersion.objects.create(
        workflow=workflow, number=number, definition=raw, source=source,
        diff=config_diff(previous.definition if previous else None, raw),
        actor=actor.name, actor_role=actor.role, user_id=actor.user_id)


def _locked(tenant_id: int, name: str) -> Workflow:
    workflow = Workflow.objects.select_for_update().filter(tenant_id=tenant_id, name=name).first()
    if workflow is None:
        raise not_found("workflow")
    return workflow


def _existing(workflow: Workflow, number: Any, field: str) -> int:
    if (not isinstance(number, int) or isinstance(number, bool)
            or not WorkflowVersion.objects.filter(workflow=workflow, number=number).exists()):
        raise invalid("invalid", "The request is not valid.",
                      **{field: [f"no version {number!r} of {workflow.name!r}"]})
    return number


def _not_current(workflow: Workflow, number: int, field: str) -> int:
    """A release or promotion of the current version is a request made on a
    stale view (someone promoted it meanwhile): refused, with the reason."""
    if number == workflow.current_version:
        raise invalid("invalid", "The request is not valid.",
                      **{field: [f"version {number} is already the current version"]})
    return number


def workflow_release(*, tenant_id: int, name: str, candidate: Any, percent: Any,
                     actor: Actor) -> Workflow:
    """Send `percent` of new runs to version `candidate` (0 or None ends it)."""
    with transaction.atomic():
        workflow = _locked(tenant_id, name)
        if not percent:
            workflow.release_candidate = workflow.release_percent = None
        else:
            if not isinstance(percent, int) or isinstance(percent, bool) or not 1 <= percent <= 100:
                raise invalid("invalid", "The request is not valid.",
                              percent=["a whole number from 0 to 100"])
            workflow.release_candidate = _not_current(
                workflow, _existing(workflow, candidate, "candidate"), "candidate")
            workflow.release_percent = percent
        workflow.save(update_fields=["release_candidate", "release_percent", "updated_at"])
        audit_record(actor=actor, tenant_id=tenant_id, kind="workflow", name=name,
                     action="released", after={"candidate": workflow.release_candidate,
                                               "percent": workflow.release_percent})
    return workflow


def workflow_promote(*, tenant_id: int, name: str, version: Any, actor: Actor,
                     action: str = "promoted") -> Workflow:
    """Make `version` current (a promotion, or a rollback to an earlier one);
    any release ends."""
    with transaction.atomic():
        workflow = _locked(tenant_id, name)
        before = workflow.current_version
        workflow.current_version = _not_current(
            workflow, _existing(workflow, version, "version"), "version")
        workflow.release_candidate = workflow.release_percent = None
        workflow.save(update_fields=["current_version", "release_candidate", "release_percent",
                                     "updated_at"])
        audit_record(actor=actor, tenant_id=tenant_id, kind="workflow", name=name,
                     action=action, before={"current_version": before},
                     after={"current_version": workflow.current_version})
    return workflow


def release_bucket(*, workflow_id: int, candidate: int, salt: str) -> int:
    digest = hashlib.sha256(f"workflow:{workflow_id}:{candidate}:{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def version_for_run(workflow: Workflow, *, salt: str) -> WorkflowVersion:
    number = workflow.current_version
    candidate, percent = workflow.release_candidate, workflow.release_percent
    if candidate and percent and release_bucket(workflow_id=workflow.pk, candidate=candidate,
                                                salt=salt) < percent:
        number = candidate
    return WorkflowVersion.objects.get(workflow=workflow, number=number)
