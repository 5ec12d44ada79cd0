"""Evaluations replay recorded tasks as shadow tasks with a candidate version,
with no real effects: the downstream (a loopback recorder) counts every
request it gets, the fake model server answers per version."""
from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import TestCase

from approvals_app.models import Question
from approvals_app.services.answers import task_provide_input
from audit_app.models import AuditEntry
from evals_app.models import Evaluation
from evals_app.services.settling import evaluation_settle
from foundations.actors import SYSTEM
from foundations.errors import DomainError
from notify_app.models import Notification, WebhookSubscription
from tasks_app.console.selectors import dashboard
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, DailySpend, Step, Task
from tasks_app.retries.services import task_retry
from tasks_app.runner.compensation import compensate_task
from tasks_app.services.tasks import task_submit
from tests.factories import TenantFactory, make_user
from tests.fakes.openai_server import Scripted, reply
from tests.helpers import drive, slices_until_waiting

from .conftest import Refunds, evaluate, refunding

pytestmark = pytest.mark.django_db


def test_the_same_calls_get_every_result_from_the_ledger_and_the_downstream_nothing(refunds):
    recorded = refunds.record("A-1", "A-2")
    assert all(t.status == TaskStatus.SUCCEEDED for t in recorded)
    before = refunds.downstream_calls()
    assert before == 4  # two lookups, two refunds: the recorded tasks' real calls
    refunds.plans["candidate"] = refunding()

    evaluation = evaluate(refunds)

    assert refunds.downstream_calls() == before  # not one request from the shadow tasks
    assert evaluation["status"] == "finished"
    assert evaluation["progress"] == {"tasks": 2, "done": 2}
    summary = evaluation["summary"]
    assert (summary["tasks"], summary["pass_rate"], summary["diverged"],
            summary["unmatched_writes"]) == (2, 1.0, 0, 0)
    for replay in evaluation["replays"]:
        shadow = Task.objects.get(pk=replay["shadow_task"])
        assert shadow.shadow_of == replay["recorded_task"]
        assert shadow.agent_version == 2 and shadow.status == TaskStatus.SUCCEEDED
        assert shadow.result == Task.objects.get(pk=replay["recorded_task"]).result
        calls = Step.objects.filter(task=shadow, kind="tool").order_by("step_no")
        assert [(s.tool, s.output) for s in calls] == [
            ("lookup", {"order_id": shadow.goal.split()[-1], "amount": 5, "status": "damaged"}),
            ("refund", {"refund_id": "R-" + shadow.goal.split()[-1]})]
        assert replay["comparison"]["first_divergence"] is None
    # The candidate's model was called for real: two calls per step, model `candidate`.
    assert sum(1 for r in refunds.server.requests if r.model == "candidate") == 6


def test_a_new_write_is_never_made_and_the_step_records_would_call(refunds):
    (recorded,) = refunds.record("A-1")
    before = len(refunds.downstream.requests_to("POST", "/refund"))
    refunds.plans["candidate"] = refunding(amount=7)

    evaluation = evaluate(refunds)

    assert len(refunds.downstream.requests_to("POST", "/refund")) == before
    (replay,) = evaluation["replays"]
    refund = Step.objects.get(task_id=replay["shadow_task"], tool="refund")
    assert refund.error["type"] == "not_executed_in_evaluation"
    assert refund.error["message"].startswith('would call refund with {"amount":7')
    assert refund.error["would_call"] == {"tool": "refund",
                                          "args": {"order_id": "A-1", "amount": 7}}
    # The model was told, in the tool result it saw next.
    seen = [m for r in refunds.server.requests if r.model == "candidate"
            for m in r.body["messages"] if m.get("role") == "tool"]
    assert any("not_executed_in_evaluation" in str(m.get("content")) for m in seen)
    comparison = replay["comparison"]
    assert comparison["unmatched_writes"] == [{"tool": "refund",
                                               "args": {"order_id": "A-1", "amount": 7}}]
    assert comparison["first_divergence"]["position"] == 2
    assert comparison["first_divergence"]["candidate"]["args"]["amount"] == 7
    assert comparison["new_calls"] == [{"step_no": 2, "tool": "refund",
                                        "args": {"order_id": "A-1", "amount": 7}}]
    assert (evaluation["summary"]["pass_rate"], replay["passed"]) == (0.0, False)


@pytest.mark.parametrize("live_reads", [False, True])
def test_live_reads_let_an_unmatched_read_through_and_nothing_else(refunds, live_reads):
    refunds.record("A-1")
    lookups = len(refunds.downstream.requests_to("POST", "/lookup"))
    refunds_made = len(refunds.downstream.requests_to("POST", "/refund"))
    # another order looked up (an unmatched read), and a refund never made before
    refunds.plans["candidate"] = refunding(amount=9, lookup_of=lambda o: "Z-9")

    evaluation = evaluate(refunds, live_reads=live_reads)

    new_lookups = refunds.downstream.requests_to("POST", "/lookup")[lookups:]
    assert [r.body for r in new_lookups] == ([{"order_id": "Z-9"}] if live_reads else [])
    assert len(refunds.downstream.requests_to("POST", "/refund")) == refunds_made
    (replay,) = evaluation["replays"]
    lookup = Step.objects.get(task_id=replay["shadow_task"], tool="lookup")
    if live_reads:
        assert lookup.output == {"order_id": "Z-9", "amount": 5, "status": "damaged"}
    else:
        assert lookup.error["type"] == "not_recorded"
        assert replay["comparison"]["not_recorded_reads"] == 1


def _asking(question: str) -> Any:
    def plan(done: int, order: str) -> Scripted:
        if done == 0:
            return reply(tool_calls=[("ask_user", {"question": question})])
        return reply(json.dumps({"asked": question}))
    return plan


def test_recorded_answers_are_reused_and_an_unknown_question_needs_a_person(refunds):
    refunds.plans["primary"] = _asking("Which order?")
    task = task_submit(tenant_id=refunds.tenant.pk, requester_id=None, agent="refunder",
                       goal="Refund order A-1", actor=SYSTEM).task
    assert slices_until_waiting(task.pk).status == TaskStatus.WAITING_FOR_INPUT
    task_provide_input(task_id=task.pk, answer="A-1", actor=SYSTEM)
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    answered = Question.objects.filter(task=task).count()

    refunds.plans["candidate"] = _asking("Which order?")
    evaluation = evaluate(refunds)
    (replay,) = evaluation["replays"]
    shadow = Task.objects.get(pk=replay["shadow_task"])
    assert shadow.status == TaskStatus.SUCCEEDED
    ask = Step.objects.get(task=shadow, kind="ask")
    assert ask.output == {"answer": "A-1", "from_record": True}
    assert Question.objects.filter(task=shadow).count() == 0  # nobody was asked
    assert Question.objects.filter(task=task).count() == answered
    assert replay["comparison"]["candidate"]["answers_reused"] == 1
    assert replay["passed"] is True

    refunds.plans["candidate"] = _asking("What is your name?")
    evaluation = evaluate(refunds, tasks={"ids": [task.pk]})
    (replay,) = evaluation["replays"]
    shadow = Task.objects.get(pk=replay["shadow_task"])
    assert (shadow.status, shadow.failure_reason) == (TaskStatus.FAILED, "needs_a_person")
    assert evaluation["summary"]["needs_a_person"] == 1
    # a failed evaluation run is neither compensated nor retried (both would be real)
    assert compensate_task(shadow.pk) == 0
    with pytest.raises(DomainError) as refused:
        task_retry(tenant_id=refunds.tenant.pk, task_id=shadow.pk, actor=SYSTEM)
    assert refused.value.code == "not_retryable"
    assert not Task.objects.filter(retry_of=shadow.pk).exists()


def test_the_summary_of_ten_tasks_seven_the_same_three_different(refunds):
    orders = [f"A-{i}" for i in range(1, 11)]
    refunds.record(*orders)
    different = {"A-8", "A-9", "A-10"}

    def candidate(done: int, order: str) -> Scripted:
        return refunding(amount=7 if order in different else 5)(done, order)
    refunds.plans["candidate"] = candidate

    evaluation = evaluate(refunds)

    summary = evaluation["summary"]
    assert (summary["tasks"], summary["passed"], summary["pass_rate"]) == (10, 7, 0.7)
    assert (summary["diverged"], summary["same_decisions"]) == (3, 7)
    assert (summary["unmatched_writes"], summary["tasks_with_unmatched_writes"]) == (3, 3)
    assert summary["same_outcome"] == 7
    failed = {Task.objects.get(pk=r["recorded_task"]).goal.split()[-1]
              for r in evaluation["replays"] if not r["passed"]}
    assert failed == different
    # same tokens per call on both sides: the same cost, ratio 1
    assert summary["baseline"]["steps_per_task"] == summary["candidate"]["steps_per_task"] == 3
    assert summary["candidate"]["model_calls"] == summary["baseline"]["model_calls"] == 30


def _gate(refunds: Refunds, **gate: Any) -> None:
    response = refunds.client(refunds.admin).patch(
        "/api/v1/agents/refunder", {"release_gate": gate}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["release_gate"] == gate


def test_the_release_gate_refuses_a_failing_candidate_and_accepts_a_passing_one(refunds):
    refunds.record("A-1", "A-2")
    _gate(refunds, min_pass_rate=0.9, max_cost_ratio=1.5)
    admin = refunds.client(refunds.admin)
    release = {"release": {"candidate": 2, "percent": 10}}

    refused = admin.patch("/api/v1/agents/refunder", release, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "release_gate"
    assert "no finished evaluation of version 2" in refused.json()["error"]["message"]

    refunds.plans["candidate"] = refunding(amount=7)
    failing = evaluate(refunds)
    assert failing["summary"]["pass_rate"] == 0.0
    refused = admin.patch("/api/v1/agents/refunder", release, format="json")
    assert refused.status_code == 409 and "passed 0%" in refused.json()["error"]["message"]
    promoted = admin.post("/api/v1/agents/refunder/promote", {"version": 2}, format="json")
    assert promoted.status_code == 409 and promoted.json()["error"]["code"] == "release_gate"
    assert AgentProfile.objects.get(pk=refunds.agent.pk).current_version == 1

    refunds.plans["candidate"] = refunding()
    passing = evaluate(refunds)
    assert passing["summary"]["pass_rate"] == 1.0
    accepted = admin.patch("/api/v1/agents/refunder", release, format="json")
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["release"] == {"candidate": 2, "percent": 10}
    promoted = admin.post("/api/v1/agents/refunder/promote", {}, format="json")
    assert promoted.status_code == 200 and promoted.json()["version"] == 2


def test_an_admin_override_of_the_gate_is_audited(refunds):
    _gate(refunds, min_pass_rate=1)
    admin = refunds.client(refunds.admin)
    refused = admin.post("/api/v1/agents/refunder/promote", {"version": 2}, format="json")
    assert refused.status_code == 409

    done = admin.post("/api/v1/agents/refunder/promote",
                      {"version": 2, "override_gate": "hotfix for the outage, evaluated by hand"},
                      format="json")

    assert done.status_code == 200 and done.json()["version"] == 2
    entry = AuditEntry.objects.get(kind="agent", name="refunder", action="gate_overridden")
    assert entry.actor == refunds.admin.username and entry.actor_role == "admin"
    diff = json.dumps(entry.diff)
    assert "hotfix for the outage, evaluated by hand" in diff
    assert "no finished evaluation of version 2" in diff


def test_evaluation_runs_stay_out_of_the_dashboard_spend_and_webhooks(refunds):
    WebhookSubscription.objects.create(tenant=refunds.tenant, url="http://127.0.0.1:9/hook",
                                       events=["task.failed"], secret_sealed="x")
    refunds.plans["primary"] = _asking("Which order?")
    task = task_submit(tenant_id=refunds.tenant.pk, requester_id=None, agent="refunder",
                       goal="Refund order A-1", actor=SYSTEM).task
    slices_until_waiting(task.pk)
    task_provide_input(task_id=task.pk, answer="A-1", actor=SYSTEM)
    drive(task.pk)
    live = dashboard(refunds.tenant.pk)
    spend_rows = DailySpend.objects.filter(tenant=refunds.tenant).count()
    notified = Notification.objects.count()

    refunds.plans["candidate"] = _asking("Something else?")  # stops: needs a person (FAILED)
    evaluation = evaluate(refunds)

    (replay,) = evaluation["replays"]
    shadow = Task.objects.get(pk=replay["shadow_task"])
    assert shadow.status == TaskStatus.FAILED and shadow.tokens > 0
    after = dashboard(refunds.tenant.pk)
    assert (after["total"], after["counts"], after["failed_week"]) == (
        live["total"], live["counts"], live["failed_week"])
    assert after["spend"]["week"] == live["spend"]["week"]
    assert Notification.objects.count() == notified
    assert not Notification.objects.filter(task_id=shadow.pk).exists()
    # its cost is recorded apart: on the shadow task and a rollup row of its own
    assert DailySpend.objects.filter(tenant=refunds.tenant,
                                     agent="evaluation:refunder").exists()
    assert DailySpend.objects.filter(tenant=refunds.tenant).count() > spend_rows


def test_bad_requests_are_field_errors_and_other_tenants_see_nothing(refunds):
    refunds.record("A-1")
    body = evaluate(refunds, tasks={"ids": [10**12]}, expect=400)
    assert "tasks.ids" in json.dumps(body)
    client = refunds.client(refunds.operator)
    for wrong in ({"agent": "nobody"}, {"candidate_version": 99}, {"scorer": "vibes"},
                  {"tasks": {"filter": {}, "ids": [1]}}, {"surprise": 1}):
        response = client.post("/api/v1/evaluations", {
            "agent": "refunder", "candidate_version": 2, "scorer": "exact",
            "tasks": {"filter": {}}, **wrong}, format="json")
        assert response.status_code == 400, (wrong, response.content)
    assert not Evaluation.objects.exists()
    requester = refunds.client(make_user(refunds.tenant, "requester", "req2"))
    assert requester.get("/api/v1/evaluations").status_code == 403
    refunds.plans["candidate"] = refunding()
    evaluation = evaluate(refunds)
    other = TenantFactory(name="t-other")
    stranger = refunds.client(make_user(other, "admin", "stranger"))
    assert stranger.get(f"/api/v1/evaluations/{evaluation['id']}").status_code == 404
    assert stranger.get("/api/v1/evaluations").json()["results"] == []
    assert evaluation_settle(evaluation["id"]).status == "finished"  # settling again: no-op


def test_the_console_starts_one_and_shows_both_sides(refunds, client):
    (recorded,) = refunds.record("A-1")
    refunds.plans["candidate"] = refunding(amount=7)
    client.force_login(refunds.operator)
    page = client.get("/evaluations/?agent=refunder&candidate_version=2")
    assert page.status_code == 200 and b"Start an evaluation" in page.content
    bad = client.post("/evaluations/new/", {"agent": "refunder", "candidate_version": 9,
                                             "scorer": "exact"})
    assert bad.status_code == 400 and b"has no version 9" in bad.content
    done = client.post("/evaluations/new/", {"agent": "refunder", "candidate_version": 2,
                                              "scorer": "exact", "status": ["SUCCEEDED"]})
    assert done.status_code == 302
    evaluation = Evaluation.objects.get()
    (row,) = evaluation.tasks.all()
    with TestCase.captureOnCommitCallbacks(execute=True):
        drive(row.shadow_task_id)
    detail = client.get(done["Location"]).content.decode()
    assert "1 of 1 tasks settled" in detail
    assert f"task {recorded.pk}" in detail and f"task {row.shadow_task_id}" in detail
    assert "<code>refund</code>" in detail and "fail" in detail
    client.force_login(make_user(TenantFactory(name="t-else"), "admin", "else-admin"))
    assert client.get(done["Location"]).status_code == 404


def test_the_judge_scores_each_replay_in_a_task_of_its_own(refunds):
    from tests.fakes.fixtures import openai_agent

    refunds.record("A-1", "A-2")
    openai_agent(refunds.tenant, refunds.server, name="judge", tools=[],
                 model={"name": "judge"})
    refunds.plans["judge"] = lambda done, order: reply(json.dumps(
        {"score": 0.6, "reason": "the same refund, said differently"}))
    refunds.plans["candidate"] = refunding()
    client = refunds.client(refunds.operator)
    response = client.post("/api/v1/evaluations", {
        "agent": "refunder", "candidate_version": 2, "scorer": "judge", "judge": "judge",
        "tasks": {"filter": {}}}, format="json")
    assert response.status_code == 201, response.content
    evaluation = Evaluation.objects.get(pk=response.json()["id"])
    with TestCase.captureOnCommitCallbacks(execute=True):  # the judges, as each run ends
        for row in evaluation.tasks.all():
            drive(row.shadow_task_id)
    judges = list(evaluation.tasks.values_list("judge_task_id", flat=True))
    assert all(judges)
    with TestCase.captureOnCommitCallbacks(execute=True):  # the scores, as each judge ends
        for judge_id in judges:
            drive(judge_id)
    body = client.get(f"/api/v1/evaluations/{evaluation.pk}/tasks").json()["results"]
    assert [(r["score"], r["passed"], r["reason"]) for r in body] == [
        (0.6, True, "the same refund, said differently")] * 2
    judged = Task.objects.get(pk=judges[0])
    assert judged.agent.name == "judge" and judged.shadow_of is None
    assert judged.input["candidate"]["result"] == judged.input["baseline"]["result"]
    assert client.get(f"/api/v1/evaluations/{evaluation.pk}").json()["status"] == "finished"


def test_the_compare_endpoint_aligns_both_timelines_for_operators_and_admins_only(refunds):
    (recorded,) = refunds.record("A-1")
    refunds.plans["candidate"] = refunding(amount=7)
    evaluation = evaluate(refunds)
    (replay,) = evaluation["replays"]
    url = f"/api/v1/evaluations/{evaluation['id']}/tasks/{recorded.pk}/compare"

    for role in ("operator", "admin"):
        response = refunds.client(getattr(refunds, role)).get(url)
        assert response.status_code == 200, (role, response.content)
    body = response.json()
    assert (body["recorded_task"], body["shadow_task"]) == (recorded.pk, replay["shadow_task"])
    assert body["first_divergence"] == 2 == replay["comparison"]["first_divergence"]["position"]
    # the same lookup, another refund, and so another final answer
    assert [(r["step_no"], r["same"]) for r in body["steps"]] == [(1, True), (2, False),
                                                                  (3, False)]
    diverged = body["steps"][1]
    assert (diverged["baseline"]["args"]["amount"], diverged["candidate"]["args"]["amount"]) \
        == (5, 7)
    assert diverged["candidate"]["error"]["type"] == "not_executed_in_evaluation"
    assert [body["steps"][2][side]["result"]["amount"] for side in ("baseline", "candidate")] \
        == [5, 7]
    assert body["passed"] is False

    requester = refunds.client(make_user(refunds.tenant, "requester", "req-compare"))
    assert requester.get(url).status_code == 403
    operator = refunds.client(refunds.operator)
    # the shadow task's id, or a task the evaluation did not replay: no such row
    assert operator.get(url.replace(str(recorded.pk), str(replay["shadow_task"]))
                        ).status_code == 404
    stranger = refunds.client(make_user(TenantFactory(name="t-compare"), "admin", "compare-x"))
    response = stranger.get(url)
    assert response.status_code == 404 and b"A-1" not in response.content


def test_the_console_compares_a_replays_two_timelines_aligned_at_the_divergence(refunds, client):
    (recorded,) = refunds.record("A-1")
    refunds.plans["candidate"] = refunding(amount=7)
    evaluation = evaluate(refunds)
    (replay,) = evaluation["replays"]
    client.force_login(refunds.operator)

    detail = client.get(f"/evaluations/{evaluation['id']}/").content.decode()
    compare = f"/evaluations/{evaluation['id']}/tasks/{recorded.pk}/"
    assert f'href="{compare}#divergence"' in detail
    assert "step 2: <code>refund</code> → <code>refund</code>" in detail

    page = client.get(compare).content.decode()
    assert "first decided differently at step 2" in page
    assert 'data-same-steps="1"' in page  # step 1 folded: the same on both sides
    assert page.count('id="divergence"') == 1
    assert 'id="baseline-step-2"' in page and 'id="candidate-step-2"' in page
    assert page.index('id="divergence"') < page.index('id="baseline-step-2"') \
        < page.index('id="candidate-step-2"') < page.index('data-step-no="3"')
    assert f"task {replay['shadow_task']}" in page and "not_executed_in_evaluation" in page

    assert client.get(f"/evaluations/{evaluation['id']}/tasks/{replay['shadow_task']}/"
                      ).status_code == 404
    client.force_login(make_user(TenantFactory(name="t-cmp"), "admin", "cmp-admin"))
    assert client.get(compare).status_code == 404
    client.force_login(make_user(refunds.tenant, "requester", "cmp-req"))
    assert client.get(compare).status_code == 403
