"""Releasing agent profile versions: a gradual (canary) release, promote, roll back.

- A release sends `percent` % of new tasks to a candidate version and the rest
  to the current one (`agent_versions.version_for_submission` decides per
  submission); the candidate must exist, differ from the current version and
  still pass the profile checks (a tool it names may have gone since).
- Promote makes a version current (by default the release's candidate) and
  ends the release.
- Roll back ends the release; given an earlier version, the profile goes back
  to it: its configuration is recorded as a new version, which is current.
- Tasks already submitted keep their version and snapshot, whatever happens here.

Every change takes the profile's row lock for its one short transaction and
appends an `AgentReleaseEntry` (who, when, what): the release log; and an
audit entry (`audit_app`) with the diff of the profile's versions and release.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from foundations.actors import SYSTEM, Actor
from foundations.errors import invalid, not_found

from ..models import AgentProfile, AgentReleaseEntry, AgentVersion, ReleaseAction, VersionKind
from .agent_versions import config_apply, version_record
from .agents import agent_audit, agent_audited, agent_errors, agent_update
from .release_gates import gate_pass

MAX_INT = 2**31 - 1
KEEP = object()  # `agent_change(release=KEEP)`: the request says nothing about the release
AUDIT_ACTIONS: dict[str, str] = {
    ReleaseAction.STARTED: "release_started",
    ReleaseAction.CHANGED: "release_changed",
    ReleaseAction.ENDED: "release_ended",
    ReleaseAction.PROMOTED: "promoted",
    ReleaseAction.ROLLED_BACK: "rolled_back",
}


def _locked(tenant_id: int, name: str) -> AgentProfile:
    agent = AgentProfile.objects.select_for_update().filter(tenant_id=tenant_id, name=name).first()
    if agent is None:
        raise not_found("Agent")
    return agent


def _refuse(**errors: list[str]) -> None:
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)


def _version_problems(agent: AgentProfile, number: Any) -> list[str]:
    """Why `number` cannot be put before new tasks (empty: it can)."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_INT:
        return ["a version number (1, 2, 3, ...)"]
    version = AgentVersion.objects.filter(agent=agent, number=number).first()
    if version is None:
        return [f"this agent has no version {number}"]
    if number == agent.current_version:
        return [f"version {number} is already the current version"]
    probe = AgentProfile(tenant_id=agent.tenant_id, name=agent.name)
    config_apply(probe, version.config)
    return [
        f"version {number} no longer passes the profile checks: {field}: {message}"
        for field, messages in agent_errors(probe).items()
        for message in messages
    ]


def _log(agent: AgentProfile, action: str, *, before: int, actor: Actor,
         candidate: int | None, percent: int | None, was: dict[str, Any]) -> None:
    """The release log's entry and the audit log's (`was`: `agent_audited` before)."""
    AgentReleaseEntry.objects.create(
        agent=agent, action=action, current_before=before, current_after=agent.current_version,
        candidate=candidate, percent=percent,
        actor=actor.name, actor_role=actor.role, user_id=actor.user_id,
    )
    agent_audit(agent, actor=actor, action=AUDIT_ACTIONS[action], before=was)


def _set_release(agent: AgentProfile, candidate: int | None, percent: int | None) -> None:
    agent.release_candidate, agent.release_percent = candidate, percent
    agent.save(update_fields=["current_version", "release_candidate", "release_percent",
                              "updated_at"])


def release_set(*, tenant_id: int, name: str, candidate: Any, percent: Any,
                actor: Actor = SYSTEM, unknown: tuple[str, ...] = (),
                override_gate: str = "") -> AgentProfile:
    """Start or change a release: `percent` % of new tasks get `candidate`
    (default: the latest version). A new candidate must pass the agent's
    release gate, or an admin overrides it (`release_gates.gate_pass`)."""
    with transaction.atomic():
        agent = _locked(tenant_id, name)
        was = agent_audited(agent)
        candidate = agent.latest_version if candidate is None else candidate
        errors: dict[str, list[str]] = {f"release.{k}": ["unknown field"] for k in unknown}
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            errors["release.percent"] = ["an integer from 0 to 100"]
        problems = _version_problems(agent, candidate)
        if problems:
            errors["release.candidate"] = problems
        _refuse(**errors)
        if (agent.release_candidate, agent.release_percent) == (candidate, percent):
            return agent  # nothing changes: nothing to record
        if candidate != agent.release_candidate:
            gate_pass(agent, candidate, actor=actor, override=override_gate)
        action = ReleaseAction.STARTED if agent.release_candidate is None else ReleaseAction.CHANGED
        _set_release(agent, candidate, percent)
        _log(agent, action, before=agent.current_version, actor=actor, candidate=candidate,
             percent=percent, was=was)
    return agent


def release_end(*, tenant_id: int, name: str, actor: Actor = SYSTEM) -> AgentProfile:
    """End the release in progress (if any): every new task gets the current version."""
    with transaction.atomic():
        agent = _locked(tenant_id, name)
        was = agent_audited(agent)
        if agent.release_candidate is not None:
            candidate, percent = agent.release_candidate, agent.release_percent
            _set_release(agent, None, None)
            _log(agent, ReleaseAction.ENDED, before=agent.current_version, actor=actor,
                 candidate=candidate, percent=percent, was=was)
    return agent


def agent_change(*, tenant_id: int, name: str, changes: dict[str, Any], release: Any = KEEP,
                 actor: Actor = SYSTEM, override_gate: str = "") -> AgentProfile:
    """An API PATCH: edit the profile, then start, change (`{candidate?, percent}`)
    or end (`None`) its release, all or nothing."""
    with transaction.atomic():
        agent = None
        if changes or release is KEEP:
            agent = agent_update(tenant_id=tenant_id, name=name, changes=changes, actor=actor)
        if release is None:
            agent = release_end(tenant_id=tenant_id, name=name, actor=actor)
        elif release is not KEEP:
            if not isinstance(release, dict):
                _refuse(release=["an object {candidate, percent}, or null"])
            agent = release_set(tenant_id=tenant_id, name=name, actor=actor,
                                candidate=release.get("candidate"), percent=release.get("percent"),
                                override_gate=override_gate,
                                unknown=tuple(sorted(set(release) - {"candidate", "percent"})))
    assert agent is not None
    return agent


def agent_seed(*, tenant_id: int, name: str, defaults: dict[str, Any],
               actor: Actor = SYSTEM) -> AgentProfile:
    """Create or overwrite a profile and make it live at once, whatever was
    released: for seeds (the demo, the benchmark), never for admins' edits."""
    with transaction.atomic():
        existing = AgentProfile.objects.select_for_update().filter(
            tenant_id=tenant_id, name=name).first()
        was = agent_audited(existing) if existing is not None else None
        row, _ = AgentProfile.objects.update_or_create(
            tenant_id=tenant_id, name=name, defaults=defaults
        )
        agent = AgentProfile.objects.select_for_update().get(pk=row.pk)
        version_record(agent=agent, actor=actor)
        agent_audit(agent, actor=actor, action="created" if was is None else "updated", before=was)
        if agent.current_version != agent.latest_version:
            agent = agent_promote(tenant_id=tenant_id, name=name, version=agent.latest_version,
                                  actor=actor, gated=False)
    return agent


def agent_promote(*, tenant_id: int, name: str, version: int | None = None,
                  actor: Actor = SYSTEM, override_gate: str = "",
                  gated: bool = True) -> AgentProfile:
    """Make `version` (default: the release's candidate) current; the release ends.
    The version must pass the agent's release gate, or an admin overrides it
    (`gated=False`: a seed, which is no release)."""
    with transaction.atomic():
        agent = _locked(tenant_id, name)
        was = agent_audited(agent)
        if version is None:
            version = agent.release_candidate
            if version is None:
                _refuse(version=["no release in progress: name the version to promote"])
        _refuse(**({"version": p} if (p := _version_problems(agent, version)) else {}))
        if gated:
            gate_pass(agent, version, actor=actor, override=override_gate)  # type: ignore[arg-type]
        before, candidate, percent = (
            agent.current_version, agent.release_candidate, agent.release_percent)
        agent.current_version = version  # type: ignore[assignment]
        _set_release(agent, None, None)
        _log(agent, ReleaseAction.PROMOTED, before=before, actor=actor,
             candidate=candidate if candidate is not None else version, percent=percent, was=was)
    return agent


def agent_rollback(*, tenant_id: int, name: str, version: int | None = None,
                   actor: Actor = SYSTEM) -> AgentProfile:
    """End the release; with `version`, also go back to that version's
    configuration, recorded as a new version that is current at once."""
    with transaction.atomic():
        agent = _locked(tenant_id, name)
        was = agent_audited(agent)
        before, candidate, percent = (
            agent.current_version, agent.release_candidate, agent.release_percent)
        if version is None:
            if candidate is None:
                _refuse(version=["no release in progress: name the version to go back to"])
            _set_release(agent, None, None)
        else:
            _refuse(**({"version": p} if (p := _version_problems(agent, version)) else {}))
            source = AgentVersion.objects.get(agent=agent, number=version)
            config_apply(agent, source.config)
            agent.save()
            recorded = version_record(agent=agent, actor=actor, kind=VersionKind.ROLLED_BACK,
                                      source_version=version)
            assert recorded is not None
            agent.current_version = recorded.number
            _set_release(agent, None, None)
        _log(agent, ReleaseAction.ROLLED_BACK, before=before, actor=actor, candidate=candidate,
             percent=percent, was=was)
    return agent
