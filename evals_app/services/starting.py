"""Starting an evaluation: choose the recorded tasks, make one shadow task for
each with the candidate version, all in one transaction.

The recorded tasks are the agent's ended tasks (never evaluation runs),
chosen by the task list's filters (status, time range, subject, version) or by
id, newest first, at most `limit` (and `TETHER_EVALUATION_MAX_TASKS`). Each
shadow task has the recorded task's goal, input, subject and script, the
candidate's frozen configuration, and its own timeline; admission starts it
after live work (`tasks_app.services.admission`).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from foundations.actors import Actor
from foundations.errors import invalid
from tasks_app.machine import TERMINAL
from tasks_app.models import AgentProfile, AgentVersion, Task
from tasks_app.selectors import tasks_matching
from tasks_app.services.admission import admission_after_commit
from tasks_app.store.creation import task_create

from ..models import Evaluation, EvaluationTask, Scorer


@dataclass(frozen=True)
class Selection:
    """Which recorded tasks: by the task list's filters, or by id."""

    ids: list[int] | None = None
    statuses: list[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    subject: str = ""
    agent_version: int | None = None

    def as_json(self) -> dict[str, Any]:
        if self.ids is not None:
            return {"ids": self.ids}
        f: dict[str, Any] = {"status": self.statuses or [], "subject": self.subject,
                             "agent_version": self.agent_version}
        f["created_after"] = self.created_after.isoformat() if self.created_after else None
        f["created_before"] = self.created_before.isoformat() if self.created_before else None
        return {"filter": {k: v for k, v in f.items() if v not in (None, "", [])}}


def _refuse(**errors: list[str]) -> None:
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)


def recorded_tasks(agent: AgentProfile, selection: Selection, limit: int) -> list[Task]:
    """The recorded tasks an evaluation replays (newest first)."""
    qs = tasks_matching(tenant_id=agent.tenant_id, statuses=selection.statuses or list(TERMINAL),
                        agent=agent.name, created_after=selection.created_after,
                        created_before=selection.created_before,
                        subject=selection.subject or None,
                        agent_version=selection.agent_version)
    qs = qs.filter(shadow_of__isnull=True, status__in=TERMINAL)
    if selection.ids is not None:
        found = list(qs.filter(pk__in=selection.ids).order_by("-id")[:limit])
        missing = sorted(set(selection.ids) - {t.pk for t in found})
        if missing:
            _refuse(**{"tasks.ids": [
                f"not an ended task of agent {agent.name!r}: {', '.join(map(str, missing[:20]))}"]})
        return found
    return list(qs.order_by("-id")[:limit])


def evaluation_start(*, tenant_id: int, agent: str, candidate_version: int,
                     selection: Selection, scorer: str, actor: Actor,
                     baseline_version: int | None = None, limit: int | None = None,
                     live_reads: bool = False, judge: str = "",
                     pass_threshold: float | None = None) -> Evaluation:
    """Start an evaluation of `candidate_version` of `agent`: all or nothing."""
    cap = int(settings.TETHER["EVALUATION_MAX_TASKS"])
    limit = cap if limit is None else limit
    profile = AgentProfile.objects.filter(tenant_id=tenant_id, name=agent).first()
    if profile is None:
        _refuse(agent=[f"no agent named {agent!r}"])
    assert profile is not None
    errors: dict[str, list[str]] = {}
    version = AgentVersion.objects.filter(agent=profile, number=candidate_version).first()
    if version is None:
        errors["candidate_version"] = [f"agent {agent!r} has no version {candidate_version}"]
    if baseline_version is not None and not AgentVersion.objects.filter(
            agent=profile, number=baseline_version).exists():
        errors["baseline_version"] = [f"agent {agent!r} has no version {baseline_version}"]
    if not 1 <= limit <= cap:
        errors["limit"] = [f"from 1 to {cap}"]
    if scorer == Scorer.JUDGE:
        judge_profile = AgentProfile.objects.filter(tenant_id=tenant_id, name=judge).first()
        if not judge:
            errors["judge"] = ["the judge scorer needs an agent profile to judge"]
        elif judge_profile is None:
            errors["judge"] = [f"no agent named {judge!r}"]
        elif ((judge_profile.model or {}).get("backend") or "scripted") == "scripted":
            errors["judge"] = ["a judge must call a model (a scripted agent cannot judge)"]
    elif judge:
        errors["judge"] = ["only for the judge scorer"]
    _refuse(**errors)
    assert version is not None
    if baseline_version is not None and selection.ids is None and selection.agent_version is None:
        selection = Selection(**{**selection.__dict__, "agent_version": baseline_version})
    recorded = recorded_tasks(profile, selection, limit)
    if not recorded:
        _refuse(tasks=["no ended task of this agent matches"])
    threshold = pass_threshold if pass_threshold is not None else (
        0.5 if scorer == Scorer.JUDGE else 1.0)
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            tenant_id=tenant_id, agent=profile, candidate_version=candidate_version,
            baseline_version=baseline_version, selection=selection.as_json(), limit=limit,
            scorer=scorer, judge=judge, pass_threshold=threshold, live_reads=live_reads,
            created_by=actor.name[:150], created_by_role=(actor.role or "")[:16])
        rows = []
        for task in recorded:
            shadow = task_create(
                actor=actor, agent_name=profile.name, tenant_id=tenant_id, requester_id=None,
                agent=profile, agent_snapshot=version.config, agent_version=version.number,
                goal=task.goal, input=task.input, subject=task.subject, script=task.script,
                trace_id=secrets.token_hex(16), shadow_of=task.pk, shadow_live_reads=live_reads)
            rows.append(EvaluationTask(evaluation=evaluation, recorded_task_id=task.pk,
                                       shadow_task_id=shadow.pk))
        EvaluationTask.objects.bulk_create(rows)
        admission_after_commit()
    return evaluation
