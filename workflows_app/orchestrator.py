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

Nodes run one at a time, in a topological order (definition order among
nodes that are ready together).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tasks_app.gateway import ContextSnapshot, Decision, GatewayError, ModelReply
from tasks_app.models import Task

from .definition import MAX_MAP_ITEMS, Definition, Node, load
from .expressions import ExpressionError, render
from .selectors import run_steps

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
    """The run's node states and its next move: a decision, or None (a step of
    the run is still open: the runner is on it)."""

    nodes: dict[str, NodeState]
    decision: Decision | None


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
    """The node states of a run, and what it does next."""
    states = {n.id: NodeState(n.id) for n in definition.nodes}
    by_node: dict[str, list[StepRecord]] = {}
    for rec in steps:
        by_node.setdefault(rec.node, []).append(rec)
        if rec.node in states:
            states[rec.node].steps.append(rec.step_no)
    outputs: dict[str, Any] = {}
    next_decision: Decision | None = None
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
            decision = _advance(node, state, by_node.get(node.id, []), activation)
        except ExpressionError as exc:
            state.status, state.error = FAILED, {"type": "expression_failed", "message": str(exc)}
            decision = None
        if state.status == SUCCEEDED:
            outputs[node.id] = state.output
        elif state.status == FAILED:
            if node.critical:
                return Plan(states, Decision(kind="fail", error=_failure_text(node, state),
                                             result={"node": node.id, "error": state.error}))
            outputs[node.id] = state.output
        elif state.status == WAITING:
            return Plan(states, None)
        elif decision is not None and next_decision is None:
            next_decision = decision
    if next_decision is not None:
        return Plan(states, next_decision)
    if any(s.status not in FINISHED for s in states.values()):
        return Plan(states, None)  # cannot happen in a valid graph; nothing to do
    try:
        result = _output(definition, inputs, outputs, states)
    except ExpressionError as exc:
        return Plan(states, Decision(kind="fail", error=f"the run's output: {exc}",
                                     result={"node": None, "error": str(exc)}))
    return Plan(states, Decision(kind="final", result=result))


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
             activation: dict[str, Any]) -> Decision | None:
    """Set `state` from the node's steps; the decision that moves it on, if any."""
    if node.kind == "map":
        return _advance_map(node, state, recs, activation)
    result = _one_call(node, [r for r in recs if r.item is None])
    state.status, state.output, state.error = result
    if state.status != READY:
        return None
    if node.kind == "human":
        return _ask(node, activation)
    return _call(node, activation, item=None, item_value=None)


def _one_call(node: Node, recs: list[StepRecord]) -> tuple[str, Any, Any]:
    """(status, output, error) of one call of a node (a tool call, a question,
    one item of a map) from its steps so far."""
    if not recs:
        return READY, None, None
    last = recs[-1]
    if last.status in ("RUNNING", "RETRYING", "UNCERTAIN", "PENDING_APPROVAL"):
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
                 activation: dict[str, Any]) -> Decision | None:
    assert node.over is not None
    items = node.over.evaluate(activation)
    if not isinstance(items, list):
        raise ExpressionError(f"map over {node.over.source!r} gave {type(items).__name__}, "
                              "not a list")
    if len(items) > MAX_MAP_ITEMS:
        raise ExpressionError(f"map over {node.over.source!r} gave {len(items)} items; "
                              f"at most {MAX_MAP_ITEMS}")
    outputs: list[Any] = []
    for index, item in enumerate(items):
        status, output, error = _one_call(node, [r for r in recs if r.item == index])
        if status == READY:
            state.status = READY
            return _call(node, {**activation, "item": item, "index": index},
                         item=index, item_value=item)
        if status == WAITING:
            state.status = WAITING
            return None
        if status == FAILED:
            state.status, state.error = FAILED, {**(error or {}), "item": index}
            return None
        outputs.append(output)
    state.status, state.output = SUCCEEDED, outputs
    return None


def _tag(node: Node, item: int | None, item_value: Any = None) -> dict[str, Any]:
    tag: dict[str, Any] = {"node": node.id}
    if item is not None:
        tag["item"] = item
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
                    workflow=_tag(node, None))


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
        if planned.decision is None:
            raise GatewayError("the workflow has a step in progress and nothing else to do",
                               retryable=True, retry_after_s=1.0, calls=0)
        return ModelReply(decisions=(planned.decision,), model=BACKEND, tokens=0,
                          raw=json.dumps(planned.decision.as_dict(), default=str)[:2000],
                          input_summary=f"{len(rows)} steps of the run")


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
    """Each node of a run: {id, kind, status, output, error, steps, task,
    started_at, finished_at}; a node of a run that ended before reaching it is
    `pending` (or `canceled` when the run was canceled), and so is one whose
    call the cancel cut (its step DISCARDED)."""
    model = (task.agent_snapshot or {}).get("model") or {}
    definition = definition_of(model)
    inputs, rows = run_steps(task.pk)
    planned = plan(definition, inputs, records_of(rows))
    times: dict[str, list[Any]] = {}
    for row in rows:
        node = ((row.get("decision") or {}).get("workflow") or {}).get("node")
        if node:
            times.setdefault(node, []).append(row)
    out = []
    for node in definition.nodes:
        state = planned.nodes[node.id]
        status = state.status
        if status in ("ready", "pending") and task.is_terminal:
            status = "canceled" if task.status == "CANCELED" else "not_run"
        elif status == "failed" and task.status == "CANCELED" and _canceled(state.error):
            status = "canceled"  # its call was open when the run was canceled
        elif status == "ready":
            status = "pending"
        steps = times.get(node.id, [])
        out.append({
            "id": node.id, "kind": node.kind, "status": status, "output": state.output,
            "error": state.error, "steps": [r["step_no"] for r in steps], "task": None,
            "started_at": steps[0]["started_at"] if steps else None,
            "finished_at": steps[-1]["finished_at"] if steps and status in (
                "succeeded", "failed") else None,
        })
    return out


def _canceled(error: Any) -> bool:
    return isinstance(error, dict) and error.get("type") == "canceled"
