"""A property of every definition: registered through the API it is either a
400 with field errors or a 201; a run of an accepted one, driven by the real
runner in-process, ends in a terminal state or waits for a person (never
raises), and the task's page answers 200 with node statuses that agree with
the graph.

Definitions are random DAGs of up to 8 nodes over a read that echoes its
arguments, a tool that fails with a business error, questions and approvals
for a person, and maps over lists of 0-5 items; with random `after`, `when`
conditions from a small grammar over the inputs and other nodes' outputs
(sometimes a node that is not an ancestor, or one that may be absent at run
time), `critical` and `retries`; now and then a flaw registration must
refuse (an unknown or cyclic `after`, `item` outside a map, a condition that
does not parse). People answer what they are asked, approving
or rejecting at random.
"""
from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tests.fakes import python_tools
from tests.fakes.runtime import add_tool
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

TERMINAL = {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED}
FINISHED = {"succeeded", "failed", "skipped"}
INPUTS = {"type": "object", "properties": {
    "flag": {"type": "boolean"}, "n": {"type": "integer"},
    "xs": {"type": "array", "items": {"type": "integer"}}}}
_names = itertools.count()


def _condition(draw: Any, ancestors: list[str], earlier: list[str]) -> str:
    """A `when` from a small grammar: comparisons over the inputs and the
    outputs of ancestors (now and then of another earlier node: a 400)."""
    def atom() -> str:
        choices = ["inputs.flag", "!inputs.flag", "inputs.n > 2", "inputs.n % 2 == 0",
                   "size(inputs.xs) > 1", "true", "false"]
        pool = earlier if draw(st.integers(0, 9)) == 0 else ancestors
        if pool:
            other = draw(st.sampled_from(pool))
            choices += [f"has(nodes.{other})", f"has(nodes.{other}.echo)",
                        f"nodes.{other}.echo.v > 1", f"nodes['{other}'] != null"]
        return draw(st.sampled_from(choices))

    parts = [atom() for _ in range(draw(st.integers(1, 3)))]
    ops = [draw(st.sampled_from([" && ", " || "])) for _ in parts[1:]]
    return parts[0] + "".join(op + part for op, part in zip(ops, parts[1:], strict=True))


@st.composite
def definitions(draw: Any) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = []
    above: dict[str, set[str]] = {}
    for i in range(draw(st.integers(1, 8))):
        earlier = [n["id"] for n in nodes]
        node: dict[str, Any] = {"id": f"n{i}"}
        after: list[str] = []
        if earlier:
            after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3))
            if after:
                node["after"] = after
        above[node["id"]] = set(after).union(*(above[a] for a in after))
        kind = draw(st.sampled_from(["echo", "echo", "fail", "question", "approval", "map"]))
        if kind == "echo":
            node["tool"] = "echo"
            node["args"] = draw(st.sampled_from([{}, {"v": "${inputs.n}"}, {"v": 3},
                                                 {"v": "${inputs.n + 1}", "t": "n=${inputs.n}"}]))
        elif kind == "fail":
            node["tool"] = "business_error"
        elif kind == "question":
            node["human"] = {"question": "How many for ${inputs.n}?"}
        elif kind == "approval":
            node["human"] = {"approval": "Go on with ${inputs.flag}?"}
        else:
            items = draw(st.lists(st.integers(0, 9), max_size=5))
            over = draw(st.sampled_from([json.dumps(items), "inputs.xs",
                                         f"inputs.xs.filter(x, x > {draw(st.integers(0, 5))})"]))
            tool = draw(st.sampled_from(["echo", "echo", "business_error"]))
            node["map"] = {"over": over, "tool": tool, "args": {"v": "${item}", "i": "${index}"}}
        if draw(st.booleans()):
            node["when"] = _condition(draw, sorted(above[node["id"]]), earlier)
        if draw(st.integers(0, 3)) == 0:
            node["critical"] = False
        if draw(st.integers(0, 3)) == 0:
            node["retries"] = draw(st.integers(0, 2))
        nodes.append(node)
    flaw = draw(st.sampled_from([None] * 6 + ["unknown_after", "cycle", "item", "bad_when"]))
    target = nodes[draw(st.integers(0, len(nodes) - 1))]
    if flaw == "unknown_after":
        target["after"] = [*target.get("after", []), "nowhere"]
    elif flaw == "cycle":
        target["after"] = [*target.get("after", []), nodes[-1]["id"]]
    elif flaw == "item" and "map" not in target:
        target["when"] = "item > 1"
    elif flaw == "bad_when":
        target["when"] = "inputs.n >"
    definition: dict[str, Any] = {"inputs": INPUTS, "nodes": nodes}
    if draw(st.booleans()):
        last = nodes[-1]["id"]
        definition["output"] = {"last": f"${{has(nodes.{last}) ? nodes.{last} : null}}",
                                "n": "${inputs.n}"}
    return definition


run_inputs = st.fixed_dictionaries({"flag": st.booleans(), "n": st.integers(0, 5),
                                    "xs": st.lists(st.integers(0, 9), max_size=5)})


@pytest.fixture
def clients(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "echo", "echo")
    add_tool(world.tenant, "business_error", "business_error")
    python_tools.reset()

    def client(role: str) -> APIClient:
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users[role])}")
        return c

    return {role: client(role) for role in ("admin", "requester", "operator")}


def _answer(client: APIClient, task_id: int, question: str, approve: bool) -> None:
    answer = json.dumps({"approved": approve, "comment": "random"}) if "approved" in question \
        else "three"
    response = client.post(f"/api/v1/tasks/{task_id}/input", {"answer": answer}, format="json")
    assert response.status_code == 200, response.content[:500]


def _check_nodes(definition: dict[str, Any], detail: dict[str, Any]) -> None:
    raw = {n["id"]: n for n in definition["nodes"]}
    nodes = {n["id"]: n for n in detail["nodes"]}
    assert set(nodes) == set(raw)
    for node_id, node in nodes.items():
        deps = [nodes[d]["status"] for d in raw[node_id].get("after", [])]
        status = node["status"]
        if status in ("succeeded", "failed", "waiting"):
            assert all(d in FINISHED for d in deps), (node_id, status, deps)
        if status == "succeeded":
            assert not (deps and all(d == "skipped" for d in deps)), (node_id, deps)
        if status == "skipped":
            assert "when" in raw[node_id] or (deps and all(d == "skipped" for d in deps)), (
                node_id, deps)
        tries = raw[node_id].get("retries", 0) + 1
        error_type = (node["error"] or {}).get("type")
        if status == "failed" and error_type == "run_ended":  # another node ended the run
            assert node["steps"] and detail["status"] == "FAILED", (node_id, node)
        elif status == "failed" and error_type != "expression_failed" and "map" in raw[node_id]:
            # its items run at once: the failing one tried `tries` times, others beside it
            assert len(node["steps"]) >= tries, (node_id, node["steps"], node["error"])
        elif status == "failed" and error_type != "expression_failed":
            assert len(node["steps"]) == tries, (node_id, node["steps"], node["error"])
        if status == "succeeded" and "map" in raw[node_id]:
            assert len(node["steps"]) == len(node["output"]), (node_id, node["steps"])
        elif status == "succeeded" and raw[node_id].get("tool") == "echo":
            assert len(node["steps"]) == 1, (node_id, node["steps"])
        elif status == "succeeded":  # a person: approved after at most `retries` rejections
            assert 1 <= len(node["steps"]) <= tries, (node_id, node["steps"])
        elif status in ("skipped", "not_run", "pending"):
            assert node["steps"] == [], (node_id, status, node["steps"])
    run = detail["status"]
    if run == "SUCCEEDED":
        assert all(n["status"] in FINISHED for n in nodes.values()), nodes
        assert not [i for i, n in nodes.items()
                    if n["status"] == "failed" and raw[i].get("critical", True)]
    if run == "WAITING_FOR_INPUT":
        waiting = [i for i, n in nodes.items() if n["status"] == "waiting"]
        assert len(waiting) >= 1 and all("human" in raw[i] for i in waiting), nodes
    if run == "FAILED":
        assert detail["failure_reason"] == "workflow_failed", detail["failure_detail"]
        failed = [i for i, n in nodes.items()
                  if n["status"] == "failed" and raw[i].get("critical", True)]
        assert failed or "the run's output" in str(detail["failure_detail"]), detail


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(definition=definitions(), input=run_inputs, approvals=st.lists(st.booleans(), min_size=8,
                                                                      max_size=8))
def test_a_random_definition_is_refused_with_field_errors_or_runs_to_a_consistent_end(
        clients, definition, input, approvals):
    name = f"random-{next(_names)}"
    registered = clients["admin"].post("/api/v1/workflows",
                                       {"name": name, "definition": definition}, format="json")
    assert registered.status_code in (201, 400), registered.content[:1000]
    event(f"registered: {registered.status_code}")
    if registered.status_code == 400:
        details = registered.json()["error"]["details"]
        assert details and all(k.startswith("definition") for k in details), details
        return
    submitted = clients["requester"].post("/api/v1/tasks", {"workflow": name, "input": input},
                                          format="json")
    assert submitted.status_code == 201, submitted.content[:1000]
    task_id = submitted.json()["id"]
    task = drive(task_id)
    for approve in approvals:  # a person answers each question, until the run ends
        if task.status != TaskStatus.WAITING_FOR_INPUT:
            break
        question = task.steps.order_by("-step_no").first().decision["question"]
        _answer(clients["requester"], task_id, question, approve)
        task = drive(task_id)
    assert task.status in TERMINAL | {TaskStatus.WAITING_FOR_INPUT}, (
        task.status, task.failure_reason, task.failure_detail)
    event(f"run: {task.status}")
    page = clients["operator"].get(f"/api/v1/tasks/{task_id}")
    assert page.status_code == 200, page.content[:1000]
    _check_nodes(definition, page.json())
    # every call was made once under its key (a retry is a new key)
    assert set(python_tools.CALLS.values()) <= {1}, python_tools.CALLS.most_common(3)
