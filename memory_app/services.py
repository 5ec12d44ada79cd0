"""Writing memory, and memory's part in a task's steps.

People write, edit and delete items (the API, the console); a model proposes
a write with the `remember` decision, which its agent's `memory_policy`
writes at once (`auto`) or holds for a reviewer (`propose`: accepted, edited
or rejected in the inbox; the task goes on meanwhile). Every write is checked
by `item_errors`, attributed (the version's author, the item's
created/updated by) and in the audit log (`audit_record`, kind "memory": who,
which item and version, its scope; never the text, which erasure must be able
to remove). A memory write never changes a task's status.

An update writes the next version and keeps the old ones (`MemoryVersion`);
deleting an item deletes its versions; `subject_erase` deletes every item,
version and proposal of a subject.

Bounds: the text, the value and the tags have size limits; a scope holds at
most `TETHER_MEMORY_MAX_ITEMS_PER_SCOPE` items (counted under a lock per scope
on PostgreSQL; SQLite runs one writer at a time).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import conflict, invalid, not_found
from retention_app.erasure_parts import subject_reference
from tasks_app.context.refs import Cite
from tasks_app.gateway.base import ContextItem, Decision
from tasks_app.models import AgentProfile, Task
from tasks_app.snapshot import TaskSnapshot
from tasks_app.store.events import event_append

from . import rerank
from .models import (
    Kind,
    MemoryItem,
    MemoryProposal,
    MemoryVersion,
    ProposalStatus,
    Scope,
    scope_key,
)
from .selectors import memory_of, recall, scope_count, version_in_scopes

MAX_SUBJECT = 200
MAX_URI = 2000
MAX_TAGS = 10
MAX_TAG = 40
MAX_QUERY_CHARS = 2000  # of a task's goal and input, for retrieval
_SUBJECT = re.compile(r"[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")
WRITE_FIELDS = ("text", "kind", "value", "uri", "tags", "expires_at")
MODEL_FIELDS = frozenset({"text", "kind", "scope", "value", "uri", "tags"})
EXPIRED_BATCH = 500


def limits() -> dict[str, int]:
    cfg = settings.TETHER
    return {
        "text": int(cfg.get("MEMORY_MAX_TEXT_CHARS", 2000)),
        "value": int(cfg.get("MEMORY_MAX_VALUE_CHARS", 8000)),
        "per_scope": int(cfg.get("MEMORY_MAX_ITEMS_PER_SCOPE", 1000)),
        "context_items": int(cfg.get("MEMORY_CONTEXT_ITEMS", 8)),
    }


@dataclass(frozen=True)
class SourceRef:
    """The task step (and its event) a write came from."""

    task_id: int
    step_no: int
    event_id: int | None = None


# --- checks ------------------------------------------------------------------------------


def content_errors(fields: dict[str, Any]) -> dict[str, list[str]]:
    """Field errors of an item's content (text, kind, value, uri, tags, expires_at)."""
    errors: dict[str, list[str]] = {}
    bound = limits()

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    text = fields.get("text")
    if not isinstance(text, str) or not text.strip():
        add("text", "a non-empty string")
    elif len(text) > bound["text"]:
        add("text", f"at most {bound['text']} characters")
    elif "\x00" in text:
        add("text", "no NUL characters")
    kind = fields.get("kind")
    if kind not in Kind.values:
        add("kind", f"one of {', '.join(Kind.values)}")
    value = fields.get("value")
    if value is not None:
        try:
            size = len(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError):
            add("value", "a JSON value")
        else:
            if size > bound["value"]:
                add("value", f"at most {bound['value']} characters as JSON")
    uri = fields.get("uri") or ""
    if not isinstance(uri, str):
        add("uri", "a string")
    elif kind == Kind.ARTIFACT and not uri:
        add("uri", "an artifact needs its URI")
    elif uri and kind in (Kind.FACT, Kind.PREFERENCE):
        add("uri", "only an artifact has a URI")
    elif uri and (len(uri) > MAX_URI or not _URI.fullmatch(uri)):
        add("uri", f"a URI with a scheme (scheme:rest), at most {MAX_URI} characters")
    tags = fields.get("tags") or []
    if (not isinstance(tags, list) or len(tags) > MAX_TAGS
            or not all(isinstance(t, str) and 1 <= len(t) <= MAX_TAG and t.strip() == t
                       for t in tags)):
        add("tags", f"at most {MAX_TAGS} strings of 1-{MAX_TAG} characters")
    expires = fields.get("expires_at")
    if expires is not None and (not isinstance(expires, datetime) or expires <= timezone.now()):
        add("expires_at", "a time in the future")
    return errors


def scope_errors(*, tenant_id: int, scope: Any, subject: Any,
                 agent: Any) -> tuple[dict[str, list[str]], AgentProfile | None]:
    """Field errors of an item's scope, and the agent of an agent's scope."""
    errors: dict[str, list[str]] = {}
    profile = None
    if scope not in Scope.values:
        errors["scope"] = [f"one of {', '.join(Scope.values)}"]
        return errors, None
    if scope == Scope.SUBJECT:
        if not isinstance(subject, str) or not _SUBJECT.fullmatch(subject) \
                or len(subject) > MAX_SUBJECT:
            errors["subject"] = [f"1-{MAX_SUBJECT} printable characters, no leading or "
                                 "trailing space (a subject's scope needs one)"]
    elif subject:
        errors["subject"] = ["only an item of the subject scope has a subject"]
    if scope == Scope.AGENT:
        profile = (AgentProfile.objects.filter(tenant_id=tenant_id, name=agent).first()
                   if isinstance(agent, str) and agent else None)
        if profile is None:
            errors["agent"] = ["the name of an agent of this tenant (an agent's scope needs one)"]
    elif agent:
        errors["agent"] = ["only an item of the agent scope has an agent"]
    return errors, profile


def _refuse(errors: dict[str, list[str]]) -> None:
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)


def _scope_room(tenant_id: int, key: str) -> bool:
    """Whether the scope may take one more item (in the caller's transaction;
    on PostgreSQL writers of one scope take turns on a transaction lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                           [f"memory:{tenant_id}:{key}"])
    return scope_count(tenant_id, key) < limits()["per_scope"]


# --- writes --------------------------------------------------------------------------


def _audited(item: MemoryItem) -> dict[str, Any]:
    """What the audit log keeps of an item: never its text or value (erasable data)."""
    return {"scope": item.scope, "subject": item.subject,
            "agent": item.agent.name if item.agent_id and item.agent else None,
            "kind": item.kind, "version": item.version, "tags": list(item.tags or []),
            "expires_at": item.expires_at,
            "source": (None if item.source_task_id is None else
                       {"task": item.source_task_id, "step_no": item.source_step_no,
                        "event": item.source_event_id})}


def _version(item: MemoryItem, actor: Actor) -> MemoryVersion:
    return MemoryVersion.objects.create(
        item=item, version=item.version, kind=item.kind, text=item.text, value=item.value,
        uri=item.uri, tags=list(item.tags or []), expires_at=item.expires_at,
        author=actor.name[:150], author_role=(actor.role or "")[:16],
        source_task_id=item.source_task_id, source_step_no=item.source_step_no,
        source_event_id=item.source_event_id)


def _write(*, tenant_id: int, scope: str, agent: AgentProfile | None, subject: str,
           content: dict[str, Any], actor: Actor, source: SourceRef | None) -> MemoryItem:
    """A new item and its version 1, audited, in the caller's transaction."""
    key = scope_key(scope, agent_id=agent.pk if agent else None, subject=subject)
    if not _scope_room(tenant_id, key):
        raise conflict("memory_full", f"this scope holds {limits()['per_scope']} items already: "
                                      "delete or update one instead", scope=key)
    item = MemoryItem.objects.create(
        tenant_id=tenant_id, scope=scope, agent=agent, subject=subject, scope_key=key,
        kind=content["kind"], text=content["text"], value=content.get("value"),
        uri=content.get("uri") or "", tags=list(content.get("tags") or []),
        expires_at=content.get("expires_at"), created_by=actor.name[:150],
        updated_by=actor.name[:150],
        source_task_id=source.task_id if source else None,
        source_step_no=source.step_no if source else None,
        source_event_id=source.event_id if source else None)
    _version(item, actor)
    audit_record(actor=actor, tenant_id=tenant_id, kind="memory", name=item.cite_id,
                 action="created", before=None, after=_audited(item), object_id=item.pk)
    return item


def item_create(*, tenant_id: int, fields: dict[str, Any], actor: Actor) -> MemoryItem:
    """A person's new item: `fields` are scope, subject, agent (a name), text,
    kind, value, uri, tags, expires_at."""
    errors, profile = scope_errors(tenant_id=tenant_id, scope=fields.get("scope"),
                                   subject=fields.get("subject") or "",
                                   agent=fields.get("agent") or "")
    errors.update(content_errors(fields))
    _refuse(errors)
    with transaction.atomic():
        return _write(tenant_id=tenant_id, scope=fields["scope"], agent=profile,
                      subject=fields.get("subject") or "", content=fields, actor=actor,
                      source=None)


def item_update(*, tenant_id: int, item_id: int, changes: dict[str, Any], actor: Actor,
                expected_version: int | None = None,
                source: SourceRef | None = None) -> MemoryItem:
    """Change an item's content: the next version, the old one kept. The scope
    does not change (write a new item instead). With `expected_version`, an
    item changed meanwhile is a conflict."""
    unknown = sorted(set(changes) - set(WRITE_FIELDS))
    if unknown:
        _refuse({name: ["cannot be changed (the scope is fixed: write a new item)"]
                 for name in unknown})
    with transaction.atomic():
        item = (MemoryItem.objects.select_for_update(of=("self",)).select_related("agent")
                .filter(tenant_id=tenant_id, pk=item_id).first())
        if item is None:
            raise not_found("Memory item")
        if expected_version is not None and item.version != expected_version:
            raise conflict("version_conflict", "the item changed meanwhile: read it again",
                           version=item.version)
        before = _audited(item)
        content = {name: getattr(item, name) for name in WRITE_FIELDS}
        content.update(changes)
        errors = content_errors(content)
        if "expires_at" not in changes:
            errors.pop("expires_at", None)  # checked only when given: a past one stays past
        _refuse(errors)
        if all(content[name] == getattr(item, name) for name in WRITE_FIELDS):
            return item  # nothing changed: no new version
        for name in WRITE_FIELDS:
            setattr(item, name, content[name])
        item.uri = item.uri or ""
        item.version += 1
        item.updated_by = actor.name[:150]
        item.source_task_id = source.task_id if source else None
        item.source_step_no = source.step_no if source else None
        item.source_event_id = source.event_id if source else None
        item.save()
        _version(item, actor)
        audit_record(actor=actor, tenant_id=tenant_id, kind="memory", name=item.cite_id,
                     action="updated", before=before, after=_audited(item), object_id=item.pk)
        return item


def item_delete(*, tenant_id: int, item_id: int, actor: Actor) -> None:
    """Delete an item with its versions; later contexts no longer see it."""
    with transaction.atomic():
        item = (MemoryItem.objects.select_for_update(of=("self",)).select_related("agent")
                .filter(tenant_id=tenant_id, pk=item_id).first())
        if item is None:
            raise not_found("Memory item")
        audit_record(actor=actor, tenant_id=tenant_id, kind="memory", name=item.cite_id,
                     action="deleted", before=_audited(item), after=None, object_id=item.pk)
        item.delete()


def subject_erase(*, tenant_id: int, subject: str, actor: Actor) -> dict[str, int]:
    """Erasure: every item of `subject` with its versions, and its proposals,
    deleted; one audit entry says who erased what, and how much."""
    errors, _ = scope_errors(tenant_id=tenant_id, scope=Scope.SUBJECT, subject=subject, agent="")
    _refuse(errors)
    items, versions, proposals = memory_of(tenant_id, subject)
    with transaction.atomic():
        ids = list(items.values_list("id", flat=True))
        version_count, _ = MemoryVersion.objects.filter(item_id__in=ids).delete()
        MemoryItem.objects.filter(pk__in=ids).delete()
        proposal_count, _ = proposals.delete()
        erased = {"items": len(ids), "versions": version_count, "proposals": proposal_count}
        # Named by a digest: the entry outlives the erasure, the subject's name must not.
        audit_record(actor=actor, tenant_id=tenant_id, kind="memory",
                     name=subject_reference(subject),
                     action="erased", before=None, after=erased)
    return erased


def purge_expired() -> int:
    """The recovery sweep's part: delete a batch of expired items (with their versions)."""
    ids = list(MemoryItem.objects.filter(expires_at__lte=timezone.now())
               .values_list("id", flat=True)[:EXPIRED_BATCH])
    if ids:
        MemoryItem.objects.filter(pk__in=ids).delete()
    return len(ids)


# --- proposals -------------------------------------------------------------------------


def _proposal_event(proposal: MemoryProposal, type: str, actor: Actor,
                    payload: dict[str, Any]) -> None:
    task = Task.objects.filter(pk=proposal.task_id).only("version", "trace_id",
                                                          "tenant_id").first()
    if task is None:
        return
    event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                 task_version=task.version, type=type, actor=actor,
                 payload={"step_no": proposal.step_no, "proposal": proposal.pk, **payload})


def _open_proposal(tenant_id: int, proposal_id: int) -> MemoryProposal:
    proposal = (MemoryProposal.objects.select_for_update(of=("self",)).select_related("agent")
                .filter(tenant_id=tenant_id, pk=proposal_id).first())
    if proposal is None:
        raise not_found("Memory proposal")
    if proposal.status != ProposalStatus.OPEN:
        raise conflict("already_decided", f"this proposal was {proposal.status} already")
    return proposal


def proposal_accept(*, tenant_id: int, proposal_id: int, actor: Actor,
                    edits: dict[str, Any] | None = None) -> MemoryItem:
    """Write what the model proposed, as it is or edited (text, kind, value, uri,
    tags): the item's source is the proposing step; its author, the reviewer."""
    edits = dict(edits or {})
    unknown = sorted(set(edits) - {"text", "kind", "value", "uri", "tags"})
    if unknown:
        _refuse({name: ["cannot be edited"] for name in unknown})
    with transaction.atomic():
        proposal = _open_proposal(tenant_id, proposal_id)
        content = {"text": proposal.text, "kind": proposal.kind, "value": proposal.value,
                   "uri": proposal.uri, "tags": list(proposal.tags or []), **edits}
        _refuse(content_errors(content))
        item = _write(tenant_id=tenant_id, scope=proposal.scope, agent=proposal.agent,
                      subject=proposal.subject, content=content, actor=actor,
                      source=SourceRef(proposal.task_id, proposal.step_no, proposal.event_id))
        proposal.status = ProposalStatus.ACCEPTED
        proposal.item = item
        proposal.decided_by = actor.name[:150]
        proposal.decided_at = timezone.now()
        proposal.save(update_fields=["status", "item", "decided_by", "decided_at"])
        _proposal_event(proposal, "memory_accepted", actor,
                        {"item": item.cite_id, "edited": bool(edits)})
        return item


def proposal_reject(*, tenant_id: int, proposal_id: int, actor: Actor,
                    note: str = "") -> MemoryProposal:
    """Reject a proposed write: nothing is written."""
    with transaction.atomic():
        proposal = _open_proposal(tenant_id, proposal_id)
        proposal.status = ProposalStatus.REJECTED
        proposal.decided_by = actor.name[:150]
        proposal.decided_at = timezone.now()
        proposal.note = note[:1000]
        proposal.save(update_fields=["status", "decided_by", "decided_at", "note"])
        _proposal_event(proposal, "memory_rejected", actor, {"note": proposal.note})
        audit_record(actor=actor, tenant_id=tenant_id, kind="memory",
                     name=f"proposal:{proposal.pk}", action="rejected", before=None,
                     after={"scope": proposal.scope, "subject": proposal.subject,
                            "kind": proposal.kind, "task": proposal.task_id,
                            "step_no": proposal.step_no})
        return proposal


# --- a task's steps: the `remember` decision and the context ----------------------------


def _policy(snap: TaskSnapshot) -> str:
    return str(snap.agent.get("memory_policy") or "off")


def remember_check(snap: TaskSnapshot, decision: Decision) -> list[str]:
    """Why a `remember` decision cannot be taken (empty: it can)."""
    if _policy(snap) not in ("propose", "auto"):
        return ["this agent may not write memory (its memory_policy is "
                f"{_policy(snap)}): do not call remember"]
    memory = decision.memory or {}
    problems = [f"unknown field {name!r}" for name in sorted(set(memory) - MODEL_FIELDS)]
    scope = memory.get("scope")
    if scope == Scope.SUBJECT and not snap.subject:
        problems.append("this task is about no subject: use the scope agent or tenant")
    elif scope == Scope.AGENT and snap.agent_id is None:
        problems.append("this task has no agent: use the scope subject or tenant")
    elif scope not in Scope.values:
        problems.append(f"scope: one of {', '.join(Scope.values)}")
    for name, messages in content_errors({**memory, "expires_at": None}).items():
        problems.extend(f"{name}: {m}" for m in messages)
    return problems


def remember_record(snap: TaskSnapshot, step_no: int, decision: Decision,
                    actor: Actor) -> dict[str, Any]:
    """Write (`auto`) or propose (`propose`) the item, with the task's event, in
    the decision's transaction; the step's output says which, for the model."""
    memory = decision.memory or {}
    scope = str(memory["scope"])
    subject = snap.subject if scope == Scope.SUBJECT else ""
    agent_id = snap.agent_id if scope == Scope.AGENT else None
    content = {"text": memory["text"], "kind": memory["kind"], "value": memory.get("value"),
               "uri": memory.get("uri") or "", "tags": list(memory.get("tags") or [])}
    shown = {"step_no": step_no, "scope": scope, "kind": content["kind"]}
    if _policy(snap) == "propose":
        proposal = MemoryProposal.objects.create(
            tenant_id=snap.tenant_id, task_id=snap.id, step_no=step_no, scope=scope,
            agent_id=agent_id, subject=subject, **content)
        event = event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                             task_version=snap.version, type="memory_proposed", actor=actor,
                             payload={**shown, "proposal": proposal.pk})
        proposal.event_id = event.pk
        proposal.save(update_fields=["event_id"])
        return {"status": "proposed", "proposal": proposal.pk,
                "note": "a reviewer decides whether it is saved; go on with the task"}
    key = scope_key(scope, agent_id=agent_id, subject=subject)
    if not _scope_room(snap.tenant_id, key):
        return {"status": "not_saved", "error": f"this scope's memory is full "
                                                f"({limits()['per_scope']} items)"}
    agent = AgentProfile.objects.filter(pk=agent_id).first() if agent_id else None
    item = _write(tenant_id=snap.tenant_id, scope=scope, agent=agent, subject=subject,
                  content=content, actor=actor, source=SourceRef(snap.id, step_no))
    event = event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                         task_version=snap.version, type="memory_written", actor=actor,
                         payload={**shown, "item": item.cite_id})
    MemoryItem.objects.filter(pk=item.pk).update(source_event_id=event.pk)
    MemoryVersion.objects.filter(item_id=item.pk, version=item.version).update(
        source_event_id=event.pk)
    return {"status": "saved", "id": item.cite_id}


def query_text(snap: TaskSnapshot) -> str:
    """What a task's memory is looked up by: its goal and its input's text."""
    text = snap.goal
    if snap.input:
        text += " " + json.dumps(snap.input, ensure_ascii=False, default=str)
    return text[:MAX_QUERY_CHARS]


def memory_context(snap: TaskSnapshot, budget_chars: int) -> list[ContextItem]:
    """The context source: the task's best items, each with its citation id
    (`mem:<id>@<version>`), as many as fit in `budget_chars`."""
    cap = limits()
    wanted = cap["context_items"]
    query = query_text(snap)
    found = recall(tenant_id=snap.tenant_id, agent_id=snap.agent_id, subject=snap.subject,
                   text=query, limit=wanted * (rerank.POOL if rerank.enabled() else 1),
                   now=timezone.now(), per_scope=cap["per_scope"])
    found = rerank.rerank(query, found)[:wanted]  # as found when the rerank is off
    items: list[ContextItem] = []
    left = budget_chars
    for hit in found:
        item = hit.item
        data: dict[str, Any] = {"kind": item.kind, "scope": item.scope}
        if item.value is not None:
            data["value"] = item.value
        if item.uri:
            data["uri"] = item.uri
        if item.tags:
            data["tags"] = list(item.tags)
        size = len(item.text) + len(json.dumps(data, default=str))
        if size > left:
            continue  # a smaller one further down may still fit
        left -= size
        items.append(ContextItem(id=item.cite_id, role="memory", text=item.text, data=data))
    return items


def memory_source(snap: TaskSnapshot, cite: Cite) -> dict[str, Any] | None:
    """The reader of `read_source` for `mem:<id>@<version>`: that version as it
    was written, with its source, if the item is in the task's scopes."""
    if cite.number is None or cite.version is None:
        return None
    found = version_in_scopes(tenant_id=snap.tenant_id, item_id=cite.number,
                              version=cite.version, agent_id=snap.agent_id,
                              subject=snap.subject, now=timezone.now())
    if found is None:
        return None
    original: dict[str, Any] = {
        "id": f"mem:{found.item_id}@{found.version}", "kind": found.kind,
        "scope": found.item.scope, "text": found.text, "author": found.author,
        "written_at": found.created_at.isoformat(), "latest_version": found.item.version}
    if found.value is not None:
        original["value"] = found.value
    if found.uri:
        original["uri"] = found.uri
    if found.source_task_id:
        original["source"] = {"task": found.source_task_id, "step_no": found.source_step_no,
                              "event_id": found.source_event_id}
    return original
