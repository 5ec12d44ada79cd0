"""The orchestrator: what a workflow run does next, decided from its committed
steps. It is the run's decision maker, in the place a model has in an agent's
task: the runner asks it for the next decision in the same database phase as
it plans the step, records the decision (policy, approval, the idempotency
key, the ledger), runs it, and commits its outcome with the version check, as
for any task. There is no second scheduler and no state of its own: every
node's status is a function of the run's steps, so a worker killed anywhere
leaves nothing to repair (a resumed step is the runner's; the next decision
is computed again from what committed).

A step serves one node (or one item of a map): its decision carries
`workflow: {node, item}`. A node is
- *pending* until every node in its `after` has finished;
- *skipped* when its `when` is false, or when every node it depends on was
  skipped (what depends only on a skipped branch is skipped with it);
- *succeeded* with its output (a tool's result, a person's answer, a map's
  list of results in item order);
- *failed* once its call failed more than `retries` times (a business error,
  a rejected approval): a critical node fails the run (and the run's
  compensations undo what the succeeded nodes did, newest first); a
  non-critical one is recorded and the run goes on.

Every node that is ready gets its calls at once (a map's items up to its
`max_parallel`): the runner records them one step each and awaits them
together in one slice (`tasks_app.runner.waves`). While any call of the run
is open, nothing new is decided; the runner settles the open calls first.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from foundations.expressions import ExpressionError, render
from tasks_app.gateway import ContextSnapshot, Decision, GatewayError, ModelReply, OpenSteps
from tasks_app.models import Task

from .definition import MAX_MAP_ITEMS, Definition, Node, load
from .selectors import run_children, run_steps

BACKEND = "workflow"

PENDING, READY, SUCCEEDED, FAILED, SKIPPED, WAITING = (
    "pending", "ready", "succeeded", "failed", "skipped", "waiting")
FINISHED = (SUCCEEDED, FAILED, SKIPPED)


@dataclass(frozen=True)
class StepRecord:
    """What the orchestrator needs of one step of the run."""

    step_no: int
    kind: str
    status: str
    node: str
    item: int | None
    output: Any
    error: Any


@dataclass
class NodeState:
    id: str
    status: str = PENDING
    output: Any = None
    error: Any = None
    steps: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """The run's node states and its next move: the decisions to make now
    (calls that may run at once; or one question; or the end), or the steps
    still open that the runner must settle first."""

    nodes: dict[str, NodeState]
    decisions: tuple[Decision, ...] = ()
    open_steps: tuple[int, ...] = ()


OPEN = ("RUNNING", "RETRYING", "UNCERTAIN", "PENDING_APPROVAL")
# At most this many calls are decided at once (a wave); a map's own bound is its
# `max_parallel`.
WAVE_MAX = 50


def records_of(rows: list[dict[str, Any]]) -> list[StepRecord]:
    out = []
    for row in rows:
        tag = (row.get("decision") or {}).get("workflow") or {}
        if not tag.get("node"):
            continue
        out.append(StepRecord(step_no=row["step_no"], kind=row["kind"], status=row["status"],
                              node=tag["node"], item=tag.get("item"), output=row.get("output"),
                              error=row.get("error")))
    return out


def plan(definition: Definition, inputs: dict[str, Any], steps: list[StepRecord]) -> Plan:
    """The node states of a run, and what it does next.

    Open steps come first: while a call of the run is unsettled (a wave still
    running, a retry's backoff, a run resumed after a crash) nothing new is
    decided. Then a failed critical node ends the run; else every node that
    is ready gets its calls, at once (tool calls and map items; a question
    only when no call is ready, since asking stops the run); when no node is
    left, the run's output."""
    states = {n.id: NodeState(n.id) for n in definition.nodes}
    by_node: dict[str, list[StepRecord]] = {}
    for rec in steps:
        by_node.setdefault(rec.node, []).append(rec)
        if rec.node in states:
            states[rec.node].steps.append(rec.step_no)
    outputs: dict[str, Any] = {}
    calls: list[Decision] = []
    asks: list[Decision] = []
    failed: Node | None = None
    for node in definition.nodes:
        state = states[node.id]
        deps = [states[d] for d in node.after]
        if any(d.status not in FINISHED for d in deps):
            continue  # pending
        if deps and all(d.status == SKIPPED for d in deps):
            state.status = SKIPPED
            continue
        activation = {"inputs": inputs, "nodes": outputs}
        try:
            if node.when is not None and not _condition(node, activation):
                state.status = SKIPPED
                continue
            decided = _advance(node, state, by_node.get(node.id, []), activation)
        except ExpressionError as exc:
            state.status, state.error = FAILED, {"type": "expression_failed", "message": str(exc)}
            decided = []
        if state.status == SUCCEEDED:
            outputs[node.id] = state.output
        elif state.status == FAILED:
            if node.critical:
                failed = failed or node
            elif state.output is not None:
                outputs[node.id] = state.output
        elif node.kind == "human":
            asks += decided
        else:
            calls += decided
    open_steps = tuple(r.step_no for r in steps if r.status in OPEN)
    if open_steps:
        return Plan(states, open_steps=open_steps)
    if failed is not None:
        state = states[failed.id]
        return Plan(states, (Decision(kind="fail", error=_failure_text(failed, state),
                                      result={"node": failed.id, "error": state.error}),))
    if calls:
        return Plan(states, tuple(calls[:WAVE_MAX]))
    if asks:
        return Plan(states, (asks[0],))
    if any(s.status not in FINISHED for s in states.values()):
        return Plan(states)  # cannot happen in a valid graph; nothing to do
    try:
        result = _output(definition, inputs, outputs, states)
    except ExpressionError as exc:
        return Plan(states, (Decision(kind="fail", error=f"the run's output: {exc}",
                                      result={"node": None, "error": str(exc)}),))
    return Plan(states, (Decision(kind="final", result=result),))


def _condition(node: Node, activation: dict[str, Any]) -> bool:
    assert node.when is not None
    value = node.when.evaluate(activation)
    if not isinstance(value, bool):
        raise ExpressionError(f"`when` {node.when.source!r} gave {type(value).__name__}, "
                              "not true or false")
    return value


def _failure_text(node: Node, state: NodeState) -> str:
    message = (state.error or {}).get("message") if isinstance(state.error, dict) else None
    return f"node {node.id!r} failed" + (f": {message}" if message else "")


def _advance(node: Node, state: NodeState, recs: list[StepRecord],
             activation: dict[str, Any]) -> list[Decision]:
    """Set `state` from the node's steps; the decisions that move it on."""
    if node.kind == "map":
        return _advance_map(node, state, recs, activation)
    state.status, state.output, state.error = _one_call(node, [r for r in recs if r.item is None])
    if state.status != READY:
        return []
    if node.kind == "human":
        return [_ask(node, activation)]
    return [_call(node, activation, item=None, item_value=None)]


def _one_call(node: Node, recs: list[StepRecord]) -> tuple[str, Any, Any]:
    """(status, output, error) of one call of a node (a tool call, a question,
    one item of a map) from its steps so far."""
    if not recs:
        return READY, None, None
    last = recs[-1]
    if last.status in OPEN:
        return WAITING, None, None
    outcome = _outcome(node, last)
    if outcome[0] == SUCCEEDED:
        return outcome
    # a rejected approval is a failed try too: asked again while retries last
    failures = sum(1 for r in recs if _outcome(node, r)[0] == FAILED)
    if failures <= node.retries:
        return READY, None, None
    return outcome


def _outcome(node: Node, rec: StepRecord) -> tuple[str, Any, Any]:
    """(status, output, error) of one finished step of a node."""
    if rec.status == "SUCCEEDED":
        if node.kind == "human":
            return _answered(node, rec.output)
        return SUCCEEDED, rec.output, None
    if rec.status in ("FAILED", "REJECTED", "DISCARDED"):
        return FAILED, None, rec.error or {"type": "failed",
                                           "message": f"step {rec.step_no} failed"}
    return WAITING, None, None


def _answered(node: Node, output: Any) -> tuple[str, Any, Any]:
    answer = (output or {}).get("answer") if isinstance(output, dict) else None
    value: Any = answer
    if node.schema is not None or node.approval:
        try:
            value = json.loads(answer) if isinstance(answer, str) else answer
        except ValueError:
            value = answer  # validated when answered; a person's text stays as given
    if node.approval:
        approved = isinstance(value, dict) and value.get("approved") is True
        out = {"approved": approved, "comment": (value or {}).get("comment", "")
               if isinstance(value, dict) else ""}
        if not approved:
            return FAILED, out, {"type": "rejected", "message": "a person rejected it"
                                 + (f": {out['comment']}" if out["comment"] else "")}
        return SUCCEEDED, out, None
    return SUCCEEDED, value, None


def _advance_map(node: Node, state: NodeState, recs: list[StepRecord],
                 activation: dict[str, Any]) -> list[Decision]:
    """A map's items: each a call of its own, up to `max_parallel` at once."""
    assert node.over is not None
    items = node.over.evaluate(activation)
    if not isinstance(items, list):
        raise ExpressionError(f"map over {node.over.source!r} gave {type(items).__name__}, "
                              "not a list")
    if len(items) > MAX_MAP_ITEMS:
        raise ExpressionError(f"map over {node.over.source!r} gave {len(items)} items; "
                              f"at most {MAX_MAP_ITEMS}")
    per_item: dict[int, list[StepRecord]] = {}
    for rec in recs:
        if rec.item is not None:
            per_item.setdefault(rec.item, []).append(rec)
    outputs: list[Any] = []
    ready: list[int] = []
    waiting = 0
    for index in range(len(items)):
        status, output, error = _one_call(node, per_item.get(index, []))
        if status == FAILED:
            state.status, state.error = FAILED, {**(error or {}), "item": index}
            return []
        if status == READY:
            ready.append(index)
        elif status == WAITING:
            waiting += 1
        outputs.append(output)
    if not ready and not waiting:
        state.status, state.output = SUCCEEDED, outputs
        return []
    state.status = WAITING if waiting else READY
    room = max(0, node.max_parallel - waiting)
    return [_call(node, {**activation, "item": items[i], "index": i}, item=i, item_value=items[i])
            for i in ready[:room]]


def _tag(node: Node, item: int | None, item_value: Any = None) -> dict[str, Any]:
    tag: dict[str, Any] = {"node": node.id}
    if item is not None:
        tag["item"] = item
    if node.timeout_s is not None:
        tag["timeout_s"] = node.timeout_s
    if node.compensate:
        tag["compensate"] = node.compensate
        if item is not None:
            tag["item_value"] = item_value
    return tag


def _call(node: Node, activation: dict[str, Any], *, item: int | None,
          item_value: Any) -> Decision:
    args = render(node.args if node.args is not None else {}, activation)
    if not isinstance(args, dict):
        raise ExpressionError(f"the arguments of {node.tool!r} must be an object, "
                              f"not {type(args).__name__}")
    label = f"workflow node {node.id}" + (f", item {item}" if item is not None else "")
    return Decision(kind="tool_call", tool=node.tool, args=args, reason=label,
                    workflow=_tag(node, item, item_value))


APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "comment": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}


def _ask(node: Node, activation: dict[str, Any]) -> Decision:
    text = render(node.question, activation)
    schema = APPROVAL_SCHEMA if node.approval else node.schema
    if node.approval:
        text = (f"{text}\n\nAnswer with {{\"approved\": true}} or "
                "{\"approved\": false, \"comment\": \"…\"}.")
    return Decision(kind="ask_user", question=str(text), answer_schema=schema,
                    workflow=_tag(node, None), expires_in_s=node.expires_in_s,
                    on_expiry=node.on_expiry if node.expires_in_s else "")


def _output(definition: Definition, inputs: dict[str, Any], outputs: dict[str, Any],
            states: dict[str, NodeState]) -> Any:
    if definition.output is not None:
        return render(definition.output, {"inputs": inputs, "nodes": outputs})
    depended = {d for n in definition.nodes for d in n.after}
    return {n.id: outputs.get(n.id) for n in definition.nodes
            if n.id not in depended and states[n.id].status == SUCCEEDED}


# --- the backend the runner asks ---------------------------------------------------------


class WorkflowBackend:
    """The run's decision maker, asked by the runner like a model's backend:
    instantly, in the database phase that plans the step (`reader` reads the
    run's input and steps there)."""

    name = BACKEND

    def __init__(self, model: dict[str, Any], reader: Any) -> None:
        self.model = model
        self.reader = reader

    async def adecide(self, context: ContextSnapshot) -> ModelReply:  # pragma: no cover
        raise GatewayError("a workflow decides in the runner's database phase",
                           retryable=False, calls=0)

    def decide(self, context: ContextSnapshot) -> ModelReply:
        definition = definition_of(self.model)
        inputs, rows = self.reader(context.task_id)
        planned = plan(definition, inputs, records_of(rows))
        if planned.open_steps:
            raise OpenSteps(planned.open_steps)
        if not planned.decisions:
            raise GatewayError("the workflow has nothing to do", retryable=False, calls=0)
        first = planned.decisions[0]
        return ModelReply(decisions=planned.decisions, model=BACKEND, tokens=0,
                          raw=json.dumps(first.as_dict(), default=str)[:2000],
                          input_summary=f"{len(rows)} steps of the run, "
                                        f"{len(planned.decisions)} decided")


_DEFINITIONS: dict[str, Definition] = {}


def definition_of(model: dict[str, Any]) -> Definition:
    """The snapshot's definition, loaded once per process and version (checked
    at registration; loaded again here without the tenant's tool list)."""
    key = str(model.get("definition_key") or "")
    found = _DEFINITIONS.get(key) if key else None
    if found is None:
        found = load(model["definition"])
        if key:
            if len(_DEFINITIONS) > 512:
                _DEFINITIONS.clear()
            _DEFINITIONS[key] = found
    return found


def run_nodes(task: Task) -> list[dict[str, Any]]:
    """Each node of a run: {id, kind, status, output, error, steps, task (an
    agent node's latest child task), tasks (all of them: a map's, a retried
    node's), started_at, finished_at}; a node of a run that ended before
    reaching it is `not_run` (`canceled` when the run was canceled, and so is
    one whose call the cancel cut: its step DISCARDED); one the end of the run
    cut short (calls made, a retry or items left) is `failed`, `run_ended`. A
    node whose child task runs, or waits for a person, is `waiting`."""
    model = (task.agent_snapshot or {}).get("model") or {}
    definition = definition_of(model)
    inputs, rows = run_steps(task.pk)
    planned = plan(definition, inputs, records_of(rows))
    times: dict[str, list[Any]] = {}
    for row in rows:
        node = ((row.get("decision") or {}).get("workflow") or {}).get("node")
        if node:
            times.setdefault(node, []).append(row)
    children = run_children(task.pk)
    out = []
    for node in definition.nodes:
        state = planned.nodes[node.id]
        status, error = state.status, state.error
        steps = times.get(node.id, [])
        if status in ("ready", "pending") and task.is_terminal:
            if task.status == "CANCELED":
                status = "canceled"
            elif steps:  # started (a try failed, or items remained) when another node ended it
                status, error = "failed", {
                    "type": "run_ended", "message": "the run ended before this node finished",
                    "last_error": next((r["error"] for r in reversed(steps) if r["error"]),
                                       None)}
            else:
                status = "not_run"
        elif status == "failed" and task.status == "CANCELED" and _canceled(state.error):
            status = "canceled"  # its call was open when the run was canceled
        elif status == "ready":
            status = "pending"
        out.append({
            "id": node.id, "kind": node.kind, "status": status, "output": state.output,
            "error": error, "steps": [r["step_no"] for r in steps],
            **_children_of(steps, children),
            "started_at": steps[0]["started_at"] if steps else None,
            "finished_at": steps[-1]["finished_at"] if steps and status in (
                "succeeded", "failed") else None,
        })
    return out


def _children_of(steps: list[dict[str, Any]], children: dict[int, int]) -> dict[str, Any]:
    """A node's child tasks (agent nodes, maps over an agent), oldest first, and
    the latest of them (None: the node started none)."""
    ids = [children[r["step_no"]] for r in steps if r["step_no"] in children]
    return {"task": ids[-1] if ids else None, "tasks": ids}


def _canceled(error: Any) -> bool:
    return isinstance(error, dict) and error.get("type") == "canceled"
