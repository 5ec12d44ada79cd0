"""Nothing a tenant or a model puts into a task makes a page or an API answer
fail: the console's task page, its live fragment, the task list and its
search, the inbox, the API's reads and the WebSocket's event messages stay
200/4xx for any goal, input, arguments, reasons, cites, outputs, tool errors,
questions and final results, Unicode included.

Tasks are submitted through the API as a requester would and run by the real
runner (a scripted agent, the model's decisions being the script): a tool
echoes its arbitrary arguments as its output, another raises a business error
carrying them, a third needs an approval, so the same values land in steps,
events, errors, approvals, questions and results. Values PostgreSQL cannot
store (NUL characters) are refused at the door with a 400 in the error shape,
and nothing is written. Lone surrogates are left out: JSON cannot carry them
to the API in the first place.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from accounts_app.models import Role
from approvals_app.models import Approval
from tasks_app.live.consumers import LiveConsumer
from tasks_app.models import Event, Task
from tasks_app.selectors import event_dict
from tests.api.conftest import client_for
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive
from tools_app.executor.errors import ToolBusinessError
from tools_app.executor.jsonsafe import has_unstorable
from tools_app.executor.types import ToolContext

pytestmark = pytest.mark.django_db

MODULE = __name__ + "."


def echo_any(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"echo": args, "again": list(args.values())}


def fail_with(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise ToolBusinessError(str(args.get("message", args)), details={"args": args})


# --- what a tenant or a model may write ----------------------------------------------

# Any character but surrogates (not even JSON can send a lone one) and NUL
# (whose refusal `with_a_nul` checks on its own, else it would end most examples).
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=24)
# Digits `int()` refuses ('²'), reads ('٣', '۴') or that overflow an id.
DIGITS = "0123456789²³¹٣۴९߀"
CITE = st.one_of(
    TEXT,
    st.builds(
        lambda kind, prefix, digits: f"{kind}:{prefix}{digits}",
        st.sampled_from(["step", "summary", "answer", "approval", "goal", "input", "x"]),
        st.sampled_from(["", "v", "vv", "-", " "]),
        st.text(DIGITS, max_size=24),
    ),
    st.integers(min_value=-(2**80), max_value=2**80),
)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
OBJECT = st.dictionaries(TEXT, JSON, max_size=4)


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    def call(tool: str) -> dict[str, Any]:
        return {
            "tool": tool,
            "args": draw(OBJECT),
            "reason": draw(TEXT),
            "cites": draw(st.lists(CITE, max_size=5)),
        }

    script = [call("echo_any")]
    if draw(st.booleans()):
        script.append(call("fail_with"))
    script.append(
        draw(
            st.sampled_from(
                [
                    call("needs_approval"),
                    {"ask": draw(TEXT)},
                    {"final": draw(OBJECT)},
                    {"invalid": draw(TEXT)},
                ]
            )
        )
    )
    # The API's own rules (a goal is not blank, input values are not null) hold.
    inputs = st.dictionaries(TEXT, JSON.filter(lambda v: v is not None), max_size=4)
    return {"goal": draw(TEXT).strip() or "g", "agent": "untrusted", "input": draw(inputs),
            "script": script}


@st.composite
def with_a_nul(draw: st.DrawFn) -> dict[str, Any]:
    """A submission with a NUL character in one of its strings."""
    body = draw(submissions())
    where = draw(st.sampled_from(["goal", "input", "args", "reason", "cite"]))
    nul = draw(TEXT) + "\x00" + draw(TEXT)
    if where == "goal":
        body["goal"] = nul
    elif where == "input":
        body["input"][draw(TEXT)] = nul
    elif where == "args":
        body["script"][0]["args"][nul] = 1
    elif where == "reason":
        body["script"][0]["reason"] = nul
    else:
        body["script"][0]["cites"].append(nul)
    return body


# --- the test ------------------------------------------------------------------------

SUPERSCRIPT_CITES = {
    "goal": "cites a superscript two",
    "agent": "untrusted",
    "input": {},
    "script": [
        {"tool": "echo_any", "args": {"n": "²"}, "cites": ["step:²", "summary:v³", "answer:٣"]},
        {"tool": "needs_approval", "args": {},
         "cites": ["step:²", "step:1", "approval:" + "9" * 30]},
    ],
}
NUL_GOAL = {"goal": "a\x00b", "agent": "untrusted", "input": {}, "script": []}


@pytest.fixture
def untrusted(world: Any) -> Any:
    add_tool(world.tenant, "echo_any", MODULE + "echo_any", max_retries=0)
    add_tool(world.tenant, "fail_with", MODULE + "fail_with", max_retries=0)
    add_tool(world.tenant, "needs_approval", MODULE + "echo_any", requires_approval=True,
             risk="high", side_effect="idempotent_write", max_retries=0)
    add_agent(world.tenant, "untrusted", ["echo_any", "fail_with", "needs_approval"])
    return world


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)
@given(body=st.one_of(submissions(), submissions(), submissions(), with_a_nul()))
@example(body=SUPERSCRIPT_CITES)
@example(body=NUL_GOAL)
def test_no_page_or_answer_fails_whatever_a_task_holds(
    untrusted: Any, body: dict[str, Any]
) -> None:
    users = untrusted.users
    before = Task.objects.count()
    response = client_for(users[Role.REQUESTER]).post("/api/v1/tasks", body, format="json")
    if has_unstorable(body):
        # what PostgreSQL cannot store is refused at the door, and nothing is written
        assert response.status_code == 400, response.content
        assert set(response.json()["error"]) == {"code", "message", "details"}
        assert Task.objects.count() == before
        return
    assert response.status_code == 201, response.content
    task = drive(response.json()["id"])
    event(f"task {task.status}")

    console = Client()
    console.force_login(users[Role.REVIEWER])
    probe = body["goal"][:5]
    pages = [
        f"/tasks/{task.pk}/",
        f"/tasks/{task.pk}/live/?after=0",
        "/tasks/",
        "/tasks/?" + urlencode({"q": probe}),
        "/",
        "/inbox/",
    ]
    for path in pages:
        page = console.get(path)
        assert page.status_code == 200, (path, page.status_code)

    api = client_for(users[Role.ADMIN])
    for path in [
        f"/api/v1/tasks/{task.pk}",
        f"/api/v1/tasks/{task.pk}/steps",
        f"/api/v1/tasks/{task.pk}/events",
        "/api/v1/tasks",
        "/api/v1/approvals?status=pending",
    ]:
        answer = api.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        json.loads(answer.content)  # a body any client can read

    for approval in Approval.objects.filter(task=task):
        assert api.get(f"/api/v1/approvals/{approval.pk}").status_code == 200

    # what the console's WebSocket sends for each event, encoded as it sends it
    for row in Event.objects.filter(task=task):
        message = {"type": "event", "event": event_dict(row)}
        assert json.loads(_encode(message))["event"]["id"] == row.pk


def _encode(message: dict[str, Any]) -> str:
    return asyncio.run(LiveConsumer.encode_json(message))
