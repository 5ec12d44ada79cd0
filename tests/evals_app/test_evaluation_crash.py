"""A Celery worker killed (SIGKILL to its process group) while it runs an
evaluation's shadow tasks: another worker, with beat running the recovery
sweep, finishes the evaluation with every recorded task replayed exactly once,
and the downstream still gets nothing from the shadow tasks."""
from __future__ import annotations

import threading

import pytest

from evals_app.models import Evaluation, EvaluationStatus
from evals_app.services.starting import Selection, evaluation_start
from foundations.actors import SYSTEM
from tasks_app.machine import TERMINAL
from tasks_app.models import Task
from tests.fakes.openai_server import Scripted
from tests.helpers import wait_for
from tests.system.history import assert_history_intact

from .conftest import refunding

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TASKS = 8
RECOVERY_TIMEOUT_S = 150.0


def test_a_worker_killed_mid_evaluation_leaves_every_shadow_task_run_once(
        refunds, celery_workers):
    recorded = refunds.record(*[f"A-{i}" for i in range(1, TASKS + 1)])
    before = refunds.downstream_calls()

    held = threading.Event()  # the other orders' model calls wait here until the kill

    def candidate(done: int, order: str) -> Scripted:
        if order != "A-1":
            held.wait(RECOVERY_TIMEOUT_S)
        return refunding()(done, order)
    refunds.plans["candidate"] = candidate
    evaluation = evaluation_start(tenant_id=refunds.tenant.pk, agent="refunder",
                                  candidate_version=2, selection=Selection(), scorer="exact",
                                  actor=SYSTEM)
    shadows = Task.objects.filter(shadow_of__isnull=False)

    first = celery_workers.start()
    wait_for(lambda: shadows.filter(status__in=TERMINAL).exists(), timeout=60,
             message="the shadow task of A-1 to end (the others' model calls are held)")
    assert shadows.exclude(status__in=TERMINAL).exists(), "killed too late: nothing in flight"
    first.kill()
    held.set()
    celery_workers.start(beat=True)

    done = wait_for(lambda: Evaluation.objects.filter(
        pk=evaluation.pk, status=EvaluationStatus.FINISHED).first(),
        timeout=RECOVERY_TIMEOUT_S, message="the evaluation to finish")

    assert refunds.downstream_calls() == before
    assert sorted(shadows.values_list("shadow_of", flat=True)) == sorted(t.pk for t in recorded)
    assert done.tasks.count() == TASKS and not done.tasks.filter(done=False).exists()
    assert (done.summary["tasks"], done.summary["pass_rate"]) == (TASKS, 1.0), done.summary
    for shadow in shadows:
        assert shadow.status == "SUCCEEDED", celery_workers.logs()
        assert shadow.tool_calls == 2
        assert_history_intact(shadow)
