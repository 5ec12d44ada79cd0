"""Agent profile versions: recording them, diffing them, and which one a new task gets.

Invariants:
- a version is the profile's `snapshot()` (the JSON a task runs with) after one
  change; it is never changed or deleted. Numbers are 1, 2, 3 per profile,
  given under the profile's row lock (the unique constraint is the fence);
- a change that leaves the configuration as it was records no version
  (`enabled` and `description` are not configuration: a disabled profile
  refuses new tasks at once, with no release);
- the first version of a profile is current; a later one reaches new tasks
  only through a release or a promotion (`services.releases`);
- which version a submission gets is a pure function of the profile's release
  state and the submission's salt (`release_bucket`): the same
  `Idempotency-Key` always lands on the same side of a given release.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction

from audit_app.diffs import config_diff
from foundations.actors import SYSTEM, Actor

from ..models import AgentProfile, AgentVersion, VersionKind


def config_apply(agent: AgentProfile, config: dict[str, Any]) -> None:
    """Set the profile's fields to a version's configuration (not saved): the
    snapshot's keys are the profile's fields, the budget's flattened."""
    fields = {f.name for f in AgentProfile._meta.concrete_fields} - {"id", "tenant", "name"}
    flat = {**{k: v for k, v in config.items() if k != "budget"}, **(config.get("budget") or {})}
    flat.setdefault("max_cost", None)  # a version recorded without a cost budget has none
    # a version recorded without the guards (`AgentProfile.snapshot`) has none
    flat.setdefault("completion_checks", [])
    flat.setdefault("max_completion_attempts", 3)
    flat.setdefault("min_confidence", None)
    for key, value in flat.items():
        if key in fields:
            setattr(agent, key, value)


def version_record(
    *,
    agent: AgentProfile,
    actor: Actor,
    kind: str = VersionKind.EDITED,
    source_version: int | None = None,
) -> AgentVersion | None:
    """Record the profile's configuration as its next version, or None when it
    equals the latest one (a rollback always records). The caller holds the
    profile's row lock, or created the row in this transaction."""
    latest = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
    config = agent.snapshot()
    if latest is not None and latest.config == config and kind != VersionKind.ROLLED_BACK:
        return None
    number = latest.number + 1 if latest else 1
    version = AgentVersion.objects.create(
        agent=agent,
        number=number,
        config=config,
        diff=config_diff(latest.config if latest else None, config),
        kind=VersionKind.CREATED if latest is None and kind == VersionKind.EDITED else kind,
        source_version=source_version,
        actor=actor.name,
        actor_role=actor.role,
        user_id=actor.user_id,
    )
    agent.latest_version = number
    fields = ["latest_version"]
    if agent.current_version == 0:  # the first version is what new tasks get
        agent.current_version = number
        fields.append("current_version")
    AgentProfile.objects.filter(pk=agent.pk).update(**{f: getattr(agent, f) for f in fields})
    return version


def versions_ensure(agent: AgentProfile) -> AgentProfile:
    """A profile made outside the services (a fixture, a shell) gets version 1
    from its row at first use; returns the profile as it now stands."""
    if agent.current_version:
        return agent
    with transaction.atomic():
        locked = AgentProfile.objects.select_for_update().get(pk=agent.pk)
        if not locked.current_version:
            version_record(agent=locked, actor=SYSTEM, kind=VersionKind.IMPORTED)
    return locked


def release_bucket(*, agent_id: int, candidate: int, salt: str) -> int:
    """0..99, a pure function of (agent, candidate, salt): below the release's
    percent, the submission gets the candidate."""
    digest = hashlib.sha256(f"{agent_id}:{candidate}:{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def version_for_submission(agent: AgentProfile, *, salt: str) -> AgentVersion:
    """The version a new task of this profile gets: the candidate of a release
    for its share of submissions, the current version for the rest. `salt` is
    the submission's Idempotency-Key, else a random draw the task records."""
    agent = versions_ensure(agent)
    return AgentVersion.objects.get(agent_id=agent.pk, number=version_number_for(agent, salt=salt))


def version_number_for(agent: AgentProfile, *, salt: str) -> int:
    """The number of the version `version_for_submission` gives (of an ensured profile)."""
    candidate, percent = agent.release_candidate, agent.release_percent
    if candidate and percent and release_bucket(
        agent_id=agent.pk, candidate=candidate, salt=salt
    ) < percent:
        return candidate
    return agent.current_version
