"""Submitting many tasks at once (`POST /api/v1/tasks/batch`), for clients
that enqueue a day's work in one go.

A batch is up to `MAX_BATCH` agent tasks, each with its own Idempotency-Key,
each checked by the rules of a single submission (`services.tasks`: the
agent, the script, the key's earlier use). A batch is all or nothing: when
any task is refused, nothing is written and the answer lists each refused
task's field errors by its index; otherwise every new task is written in one
transaction (two bulk inserts: the tasks and their `task_created` events) and
admission runs once. A task whose key was used before with the same body is
the task it made, as with a single submission, so a client that lost the
answer sends the same batch again.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from foundations.actors import Actor
from foundations.errors import DomainError, invalid

from ..keys import canonical_json, sha256_hex
from ..models import AgentProfile, AgentVersion, Task
from ..store.creation import tasks_create_many
from .admission import admission_after_submission
from .agent_versions import version_number_for, versions_ensure
from .quotas import spend_refusal
from .tasks import input_check, script_check, submission_body, submitted_profile

MAX_BATCH = 1000
BATCH_REFUSED = "Some tasks of the batch are not valid; none was submitted."


@dataclass(frozen=True)
class BatchEntry:
    index: int
    task_id: int
    created: bool


def tasks_submit_batch(*, tenant_id: int, requester_id: int | None,
                       items: list[dict[str, Any]], actor: Actor,
                       api_key_id: int | None = None) -> list[BatchEntry]:
    """Submit `items` (each: agent, goal, input, script, subject, idempotency_key),
    all or none; returns each one's task in the order given. `api_key_id`: the
    request's key, recorded on each task (its scope narrows the requester's)."""
    try:
        return _submit(tenant_id, requester_id, items, actor, api_key_id)
    except IntegrityError:
        # A concurrent submission took one of the keys first: nothing of this
        # batch was written; once more, that key reads as an earlier submission.
        return _submit(tenant_id, requester_id, items, actor, api_key_id)


def _submit(tenant_id: int, requester_id: int | None, items: list[dict[str, Any]],
            actor: Actor, api_key_id: int | None) -> list[BatchEntry]:
    errors: dict[int, dict[str, Any]] = {}
    hashes = [sha256_hex(canonical_json(submission_body(
        agent=it["agent"], goal=it["goal"], input=it["input"], script=it["script"],
        subject=it["subject"]))) for it in items]
    keys = [it["idempotency_key"] for it in items]
    first_with: dict[str, int] = {}
    for index, key in enumerate(keys):
        if key in first_with:
            errors[index] = {"idempotency_key": [
                f"the same key as task {first_with[key]} of this batch"]}
        first_with.setdefault(key, index)

    earlier = {key: (task_id, request_hash) for key, task_id, request_hash in
               Task.objects.filter(tenant_id=tenant_id, idempotency_key__in=keys)
               .values_list("idempotency_key", "id", "request_hash")}
    entries: dict[int, BatchEntry] = {}
    new: list[int] = []
    for index, key in enumerate(keys):
        if index in errors:
            continue
        if key in earlier:
            task_id, request_hash = earlier[key]
            if request_hash == hashes[index]:
                entries[index] = BatchEntry(index, task_id, created=False)
            else:
                errors[index] = {"idempotency_key": [
                    f"used for a different request (task {task_id})"]}
        else:
            new.append(index)

    rows: list[tuple[str, dict[str, Any]]] = []
    if new:
        spend_refusal(tenant_id)
        version_of = _versions(tenant_id, requester_id, api_key_id,
                               {items[i]["agent"] for i in new})
        for index in new:
            item = items[index]
            trace_id = secrets.token_hex(16)
            try:
                profile, version = version_of(item["agent"], item["idempotency_key"])
                script_check(version.config, item["agent"], item["script"])
                input_check(item["input"])
            except DomainError as refused:
                errors[index] = refused.details
                continue
            rows.append((item["agent"], {
                "tenant_id": tenant_id, "requester_id": requester_id,
                "api_key_id": api_key_id, "agent": profile,
                "agent_snapshot": version.config, "agent_version": version.number,
                "goal": item["goal"], "input": item["input"] or {}, "subject": item["subject"],
                "script": item["script"], "trace_id": trace_id,
                "idempotency_key": item["idempotency_key"], "request_hash": hashes[index]}))
    if errors:
        raise invalid("invalid", BATCH_REFUSED,
                      tasks=[{"index": i, "errors": errors[i]} for i in sorted(errors)])
    if rows:
        with transaction.atomic():
            tasks = tasks_create_many(actor=actor, rows=rows)
            admission_after_submission()
        for index, task in zip(new, tasks, strict=True):
            entries[index] = BatchEntry(index, task.pk, created=True)
    return [entries[i] for i in range(len(items))]


def _versions(tenant_id: int, requester_id: int | None, api_key_id: int | None, names: set[str]
              ) -> Callable[[str, str], tuple[AgentProfile, AgentVersion]]:
    """(profile, version) of a batch's task, by agent name and key: the profiles
    read once, each version once."""
    profiles = {p.name: p for p in AgentProfile.objects.filter(tenant_id=tenant_id,
                                                                 name__in=names)}
    ensured: dict[str, AgentProfile] = {}
    versions: dict[tuple[int, int], AgentVersion] = {}

    def version_of(name: str, key: str) -> tuple[AgentProfile, AgentVersion]:
        if name not in ensured:
            ensured[name] = versions_ensure(submitted_profile(
                profiles.get(name), name, tenant_id=tenant_id, requester_id=requester_id,
                api_key_id=api_key_id))
        profile = ensured[name]
        number = version_number_for(profile, salt=key)
        if (profile.pk, number) not in versions:
            versions[profile.pk, number] = AgentVersion.objects.get(agent_id=profile.pk,
                                                                    number=number)
        return profile, versions[profile.pk, number]

    return version_of
