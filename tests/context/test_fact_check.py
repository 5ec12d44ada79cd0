"""Summaries that cannot lose facts: a summary that drops a fact read from the
originals is refused and the fact is pinned verbatim, with its source events;
the check is recorded on the summary version and shown on the task page."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import ContextSummary, Event
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = "do not refund more than 50 EUR"
NOTE = {"note": f"Store policy for this customer: {POLICY}.", "order": "A-10432"}
LONG = {"max_steps": 100, "max_model_calls": 100, "max_tool_calls": 100,
        "no_progress_repeats": 0, "no_progress_window": 0}


@pytest.fixture
def small_window(settings):  # type: ignore[no-untyped-def]
    """A summary once 2 steps are older than a window of 2."""
    settings.TETHER = {**settings.TETHER, "CONTEXT_WINDOW_STEPS": 2,
                       "SUMMARY_THRESHOLD_STEPS": 2, "SUMMARY_THRESHOLD_CHARS": 10**9}


def _model(calls: list[dict]):  # type: ignore[no-untyped-def]
    """Decisions: `calls` to echo, then a final answer. Summaries (requests
    without tools): notes that keep nothing of the policy nor the order."""
    state = {"decisions": 0, "summaries": 0}

    def respond(request):  # type: ignore[no-untyped-def]
        if "tools" not in request.body:
            state["summaries"] += 1
            return reply("Notes: the agent echoed a few notes about a refund.")
        state["decisions"] += 1
        if state["decisions"] > len(calls):
            return reply('{"answer": "done"}')
        return reply(tool_calls=[("echo", calls[state["decisions"] - 1])])

    return respond, state


def test_a_model_summary_that_drops_the_policy_and_the_order_is_refused_and_they_are_pinned(
        world, openai_server, small_window):
    add_tool(world.tenant, "echo", "echo")
    openai_agent(world.tenant, openai_server, tools=["echo"], **LONG)
    respond, state = _model([NOTE, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}])
    openai_server.responder = respond
    task = drive(submit(world.tenant, None, agent="llm", goal="Handle the refund request").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    assert state["summaries"] >= 1

    first = ContextSummary.objects.filter(task=task).order_by("version").first()
    assert first is not None
    refused = first.fact_check["refused"]
    dropped = {f["text"] for f in refused["missing"]}
    assert {f"{POLICY}.", "A-10432", "50 EUR"} <= dropped
    assert refused["text"].startswith("Notes: the agent echoed")
    # the refused text is not what the context uses: the digest is, with the facts pinned
    assert first.created_by == "summarizer:deterministic" and "Notes:" not in first.text
    step_one_events = set(Event.objects.filter(task=task, payload__step_no=1)
                          .values_list("id", flat=True))
    pinned = {f["text"]: f for f in first.pinned_facts}
    for text in (f"{POLICY}.", "A-10432"):
        assert pinned[text]["step_no"] == 1
        assert set(pinned[text]["event_ids"]) == step_one_events and step_one_events
    event = Event.objects.get(task=task, type="context_summarized", payload__version=1)
    assert event.payload["model_summary_refused"] == refused["missing_count"]
    assert event.payload["facts_pinned"] == len(first.pinned_facts)

    # the model's later requests carry the pinned facts verbatim, with their source
    later = [r for r in openai_server.requests if "tools" in r.body][-1]
    context = later.body["messages"][1]["content"]
    assert "Kept verbatim (from step:1, event:" in context
    assert f"{POLICY}." in context and "A-10432" in context
    # every later version still keeps them (pinned facts carry over)
    for version in ContextSummary.objects.filter(task=task):
        texts = {f["text"] for f in version.pinned_facts}
        assert {f"{POLICY}.", "A-10432"} <= texts, version.version

    client = Client()
    client.force_login(world.users[Role.OPERATOR])
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="summary-facts-v1"' in page and "model summary refused" in page
    assert f"data-pinned-fact><span class=\"muted\">negation</span> {POLICY}." in page
    api = client.get(f"/api/v1/tasks/{task.pk}/summaries").json()
    v1 = next(v for v in api if v["version"] == 1)
    assert v1["fact_check"]["refused"]["missing_count"] == refused["missing_count"]
    assert any(f["text"] == "A-10432" for f in v1["pinned_facts"])


@pytest.mark.parametrize(("kept", "dropped"), [
    ("Notes: order A-10432 was discussed.", f"{POLICY}."),
    (f"Notes: store policy for this customer: {POLICY}.", "A-10432"),
])
def test_a_summary_that_drops_either_fact_alone_is_refused_and_that_fact_is_pinned(
        world, openai_server, small_window, kept, dropped):
    add_tool(world.tenant, "echo", "echo")
    openai_agent(world.tenant, openai_server, tools=["echo"], **LONG)
    respond, _ = _model([NOTE, {"n": 2}, {"n": 3}, {"n": 4}])

    def half_faithful(request):  # type: ignore[no-untyped-def]
        return reply(kept) if "tools" not in request.body else respond(request)

    openai_server.responder = half_faithful
    task = drive(submit(world.tenant, None, agent="llm", goal="Handle the refund request").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    first = ContextSummary.objects.filter(task=task).order_by("version").first()
    assert first is not None and first.created_by == "summarizer:deterministic"
    missing = {f["text"] for f in first.fact_check["refused"]["missing"]}
    assert dropped in missing
    assert not missing & {"A-10432", f"{POLICY}."} - {dropped}  # what it kept is not missing
    assert dropped in {f["text"] for f in first.pinned_facts}
    later = [r for r in openai_server.requests if "tools" in r.body][-1]
    assert dropped in later.body["messages"][1]["content"]


def test_a_faithful_model_summary_is_used_and_nothing_is_pinned(
        world, openai_server, small_window):
    add_tool(world.tenant, "echo", "echo")
    openai_agent(world.tenant, openai_server, tools=["echo"], **LONG)
    respond, _ = _model([NOTE, {"n": 2}, {"n": 3}, {"n": 4}])

    def faithful(request):  # type: ignore[no-untyped-def]
        if "tools" not in request.body:
            return reply(f"Notes: order A-10432. Store policy for this customer: {POLICY}.")
        return respond(request)

    openai_server.responder = faithful
    task = drive(submit(world.tenant, None, agent="llm", goal="Handle the refund request").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    first = ContextSummary.objects.filter(task=task).order_by("version").first()
    assert first is not None and first.created_by == "summarizer:model"
    assert "refused" not in first.fact_check and first.pinned_facts == []
    assert first.fact_check["checked"] == first.fact_check["kept"] >= 3


def test_a_digest_that_cuts_an_order_number_off_pins_it(world, small_window):
    """The deterministic digest keeps one line a step, cut at 240 characters: an
    order number past the cut is pinned verbatim."""
    add_tool(world.tenant, "echo", "echo")
    add_agent(world.tenant, "scripted", ["echo"], **LONG)
    filler = "The customer wrote a long message about the parcel and the weather " * 4
    script = [{"tool": "echo", "args": {"text": filler + "Their order is B-77120."}},
              *({"tool": "echo", "args": {"n": n}} for n in range(2, 6)),
              {"final": {"done": True}}]
    task = drive(submit(world.tenant, script, agent="scripted", goal="Read the mail").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    first = ContextSummary.objects.filter(task=task).order_by("version").first()
    assert first is not None and "B-77120" not in first.text
    assert "refused" not in first.fact_check  # no model summary to refuse
    (fact,) = [f for f in first.pinned_facts if f["text"] == "B-77120"]
    assert (fact["kind"], fact["step_no"]) == ("identifier", 1)
    assert json.dumps(fact) and first.fact_check["pinned_now"] >= 1
