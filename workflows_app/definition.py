"""A workflow definition: parsed from YAML or JSON, checked, and made into an
immutable graph the orchestrator walks.

The format (the docs' Workflows page has a complete example):

    inputs: {JSON schema of the run's input}
    output: {template: the run's result, from node outputs}
    budget: {max_steps, max_tool_calls, max_duration_s}    # optional
    nodes:
      - id: lookup
        tool: lookup_order
        args: {order_id: "${inputs.order_id}"}
      - id: decide
        after: [lookup]
        human: {question: "Refund ${nodes.lookup.amount}?", schema: {...}}
      - id: refund
        after: [decide]
        when: "nodes.decide.approved"
        tool: issue_refund
        args: {...}
        compensate: {tool: cancel_refund, args: {refund_id: "${output.refund_id}"}}
      - id: notify_each
        after: [lookup]
        map: {over: "nodes.lookup.contacts", tool: notify_customer, args: {...}}
      - id: triage
        agent: {name: triager, goal: "Triage ${inputs.order_id}", input: {...}}

Node kinds: `tool`, `agent` (a child task of an agent profile: `{name, goal,
input}`, called as the tool `agent:<name>` with the rendered `{goal, input}`),
`human` (`question` with an optional answer `schema`, or `approval`), `map`
(a tool or an agent called once per item of a list).
Every node may declare `after`, `when`, `retries` (business errors; a
transient error has the tool's own retries), `critical` (default true) and
`compensate` (tool nodes and maps of tools).

Everything a tenant can get wrong is reported at once, each error under the
path of the field it is about (`nodes[2].args.order_id`, `nodes[0].after`):
the API answers 400 with these as its field errors.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from foundations.expressions import (
    Expression,
    ExpressionError,
    compile_expression,
    template_expressions,
)
from tools_app.schemas import check_schema

MAX_NODES = 200
MAX_MAP_ITEMS = 1000
MAX_RETRIES = 10
MAX_PARALLEL = 50
DEFAULT_MAP_PARALLEL = 10
MAX_DEFINITION_BYTES = 256 * 1024
AGENT_TOOL_PREFIX = "agent:"  # the tool an agent is called as (`tasks_app.services.children`)
MAX_DEPTH = 64  # as the API's JSON parser allows
MAX_VALUES = 50_000  # every object, list, key and scalar, YAML aliases expanded
NODE_KINDS = ("tool", "agent", "human", "map")
NODE_KEYS = frozenset({"id", "after", "when", "retries", "critical", "compensate", "description",
                       "args", "timeout_s", *NODE_KINDS})
MAX_TIMEOUT_S = 3600
MAX_EXPIRES_IN_S = 30 * 86400
TOP_KEYS = frozenset({"inputs", "output", "nodes", "budget", "description"})
BUDGET_CAPS = {"max_steps": 20_000, "max_tool_calls": 20_000, "max_duration_s": 30 * 86400}
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class DefinitionError(ValueError):
    """The definition's problems, by field path."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {v[0]}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Node:
    id: str
    kind: str  # tool | agent | human | map
    after: tuple[str, ...]
    tool: str = ""  # an agent node's, or a map's over an agent: `agent:<name>`
    args: Any = None  # template
    when: Expression | None = None
    over: Expression | None = None  # map
    question: str = ""  # human (a template)
    schema: dict[str, Any] | None = None  # human: the answer's JSON schema
    approval: bool = False  # human: approve or reject
    retries: int = 0
    critical: bool = True
    compensate: dict[str, Any] | None = None  # {tool, args (template)}
    max_parallel: int = 1  # map: items in flight at once
    timeout_s: float | None = None  # tool and map: narrows the tool's own timeout
    expires_in_s: int | None = None  # human: the question expires after this long
    on_expiry: str = "reject"  # human: reject (the node fails) or escalate (an operator)


@dataclass(frozen=True)
class Definition:
    nodes: tuple[Node, ...]  # in a topological order (dependencies first)
    inputs_schema: dict[str, Any]
    output: Any  # template, or None: the outputs of the nodes nothing depends on
    budget: dict[str, int] = field(default_factory=dict)

    def node(self, node_id: str) -> Node:
        return next(n for n in self.nodes if n.id == node_id)

    @property
    def tools(self) -> list[str]:
        """What the run may call: its tools, and `agent:<name>` for its agents."""
        names = {n.tool for n in self.nodes if n.tool}
        names |= {n.compensate["tool"] for n in self.nodes if n.compensate}
        return sorted(names)


def parse_source(source: Any) -> dict[str, Any]:
    """A definition given as an object, or as YAML or JSON text: plain JSON
    values once parsed (YAML's dates, binaries and aliases expanded into many
    values are refused), nested at most MAX_DEPTH levels, at most
    MAX_DEFINITION_BYTES."""
    if isinstance(source, str):
        if len(source.encode()) > MAX_DEFINITION_BYTES:
            raise DefinitionError({"definition": [f"at most {MAX_DEFINITION_BYTES} bytes"]})
        try:
            source = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise DefinitionError({"definition": [f"not valid YAML or JSON: {exc}"]}) from exc
        except RecursionError as exc:
            raise DefinitionError({"definition": [f"nested at most {MAX_DEPTH} levels deep"]}) \
                from exc
    problem = _not_plain_json(source)
    if problem:
        raise DefinitionError({"definition": [problem]})
    if len(json.dumps(source)) > MAX_DEFINITION_BYTES:
        raise DefinitionError({"definition": [f"at most {MAX_DEFINITION_BYTES} bytes"]})
    if not isinstance(source, dict):
        raise DefinitionError({"definition": ["must be an object with `nodes`"]})
    return source


def _not_plain_json(value: Any) -> str | None:
    """Why `value` cannot be stored and walked as a definition, or None. The
    walk stops at the first problem, so YAML aliases that would expand into
    millions of values cost no more than the bounds."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    values = chars = 0
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return f"at most {MAX_VALUES} values (a YAML alias counts each time it is used)"
        if depth > MAX_DEPTH:
            return f"nested at most {MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"keys are strings: {key!r} is not (quote it)"
                stack.append((key, depth + 1))
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            chars += len(item)
            if chars > MAX_DEFINITION_BYTES:
                return f"at most {MAX_DEFINITION_BYTES} bytes (a YAML alias counts each time)"
            if "\x00" in item:
                return "strings may not contain NUL (\\u0000) characters"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "strings may not contain unpaired surrogates"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
        elif item is not None and not isinstance(item, bool | int | float):
            return (f"only JSON values (objects, lists, strings, numbers, true, false, null): "
                    f"{type(item).__name__} {str(item)[:40]!r} is not one (quote it)")
    return None


def load(raw: dict[str, Any], *, tools: Iterable[str] | None = None,
         agents: Iterable[str] | None = None) -> Definition:
    """Check `raw` (a parsed definition) and build its graph. With `tools` (the
    tenant's enabled tool names), a node naming another tool is an error; with
    `agents` (its enabled agents' names), so is an agent node naming another."""
    errors: dict[str, list[str]] = {}

    def err(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    for key in sorted(set(raw) - TOP_KEYS):
        err(key, f"unknown field; a definition has {', '.join(sorted(TOP_KEYS))}")
    inputs_schema = raw.get("inputs") or {"type": "object"}
    if not isinstance(inputs_schema, dict):
        err("inputs", "must be a JSON schema (an object)")
        inputs_schema = {}
    else:
        for problem in check_schema(inputs_schema):
            err("inputs", problem)
    budget = _budget(raw.get("budget"), err)
    raw_nodes = raw.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        err("nodes", "must be a non-empty list of nodes")
        raise DefinitionError(errors)
    if len(raw_nodes) > MAX_NODES:
        err("nodes", f"at most {MAX_NODES} nodes")
        raise DefinitionError(errors)
    known_tools = set(tools) if tools is not None else None
    known_agents = set(agents) if agents is not None else None
    ids: dict[str, int] = {}
    for i, item in enumerate(raw_nodes):
        node_id = item.get("id") if isinstance(item, dict) else None
        if (not isinstance(node_id, str) or not node_id or len(node_id) > 64
                or not set(node_id) <= _ID_CHARS):
            err(f"nodes[{i}].id", "a node needs an id of 1-64 letters, digits or underscores")
        elif node_id in ids:
            err(f"nodes[{i}].id", f"the id {node_id!r} is used by nodes[{ids[node_id]}] too")
        else:
            ids[node_id] = i
    built: dict[str, Node] = {}
    for i, item in enumerate(raw_nodes):
        if not isinstance(item, dict) or item.get("id") not in ids or ids[item["id"]] != i:
            if not isinstance(item, dict):
                err(f"nodes[{i}]", "a node is an object")
            continue
        node = _node(item, f"nodes[{i}]", ids, known_tools, known_agents, err)
        if node is not None:
            built[node.id] = node
    order = _topological(built, ids, err)
    if not errors:
        _check_references(order, ids, raw, err)
    if errors:
        raise DefinitionError(errors)
    output = raw.get("output")
    return Definition(nodes=tuple(order), inputs_schema=inputs_schema, output=output,
                      budget=budget)


def _budget(raw: Any, err: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        err("budget", "must be an object")
        return {}
    out = {}
    for key, value in raw.items():
        cap = BUDGET_CAPS.get(key)
        if cap is None:
            err(f"budget.{key}", f"unknown budget; one of {', '.join(BUDGET_CAPS)}")
        elif not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
            err(f"budget.{key}", f"a whole number from 1 to {cap}")
        else:
            out[key] = value
    return out


def _node(item: dict[str, Any], path: str, ids: dict[str, int], tools: set[str] | None,
          agents: set[str] | None, err: Any) -> Node | None:
    """A node: the fields every kind shares, then its kind's own."""
    for key in sorted(set(item) - NODE_KEYS):
        err(f"{path}.{key}", "unknown field")
    kinds = [k for k in NODE_KINDS if k in item]
    if len(kinds) != 1:
        err(path, f"a node has exactly one of {', '.join(NODE_KINDS)}")
        return None
    kind = kinds[0]
    common = _common(item, path, ids, kind, err)
    compensate = _compensate(item.get("compensate"), f"{path}.compensate", tools, err)
    if kind == "agent":
        return _agent_node(item, path, common, compensate, agents, err)
    if kind == "tool":
        return _tool_node(item, path, common, compensate, tools, err)
    if kind == "map":
        return _map_node(item, path, common, compensate, tools, agents, err)
    return _human_node(item, path, common, compensate, err)


def _common(item: dict[str, Any], path: str, ids: dict[str, int], kind: str,
            err: Any) -> dict[str, Any]:
    """What every kind of node has: its id, what it runs after and when, its
    retries, whether it is critical, and a time limit (tool and map nodes)."""
    after = item.get("after") or []
    if isinstance(after, str):
        after = [after]
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        err(f"{path}.after", "a list of node ids")
        after = []
    for dep in after:
        if dep not in ids:
            err(f"{path}.after", f"no node with the id {dep!r}")
    when = _expression(item.get("when"), f"{path}.when", err)
    retries = item.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= MAX_RETRIES:
        err(f"{path}.retries", f"a whole number from 0 to {MAX_RETRIES}")
        retries = 0
    critical = item.get("critical", True)
    if not isinstance(critical, bool):
        err(f"{path}.critical", "true or false")
        critical = True
    timeout = item.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int | float) or isinstance(timeout, bool)
                                or not 0 < timeout <= MAX_TIMEOUT_S):
        err(f"{path}.timeout_s", f"seconds, more than 0 and at most {MAX_TIMEOUT_S}")
        timeout = None
    if timeout is not None and kind not in ("tool", "map"):
        err(f"{path}.timeout_s", "a time limit is for tool and map nodes' calls")
    return {"id": item["id"], "after": tuple(dict.fromkeys(after)), "when": when,
            "retries": retries, "critical": critical, "timeout_s": timeout}


def _agent_node(item: dict[str, Any], path: str, common: dict[str, Any],
                compensate: dict[str, Any] | None, agents: set[str] | None,
                err: Any) -> Node | None:
    if compensate is not None:
        err(f"{path}.compensate", "an agent's child task is not compensated: its own "
                                  "tools' compensations run when it fails")
    called = _agent(item.get("agent"), f"{path}.agent", agents, err)
    if called is None:
        return None
    tool, args = called
    return Node(kind="agent", tool=tool, args=args, **common)


def _tool_node(item: dict[str, Any], path: str, common: dict[str, Any],
               compensate: dict[str, Any] | None, tools: set[str] | None, err: Any) -> Node:
    tool = _tool(item.get("tool"), f"{path}.tool", tools, err)
    args = _template(item.get("args", {}), f"{path}.args", err)
    return Node(kind="tool", tool=tool, args=args, compensate=compensate, **common)


def _map_node(item: dict[str, Any], path: str, common: dict[str, Any],
              compensate: dict[str, Any] | None, tools: set[str] | None,
              agents: set[str] | None, err: Any) -> Node | None:
    """A tool or an agent called once per item of a list, at most `max_parallel` at once."""
    spec = item.get("map")
    if not isinstance(spec, dict):
        err(f"{path}.map", "an object: {over, tool, args} or {over, agent}")
        return None
    for key in sorted(set(spec) - {"over", "tool", "args", "agent", "max_parallel"}):
        err(f"{path}.map.{key}", "unknown field; a map has over, tool and args or agent, "
                                 "and max_parallel")
    parallel = spec.get("max_parallel", DEFAULT_MAP_PARALLEL)
    if (not isinstance(parallel, int) or isinstance(parallel, bool)
            or not 1 <= parallel <= MAX_PARALLEL):
        err(f"{path}.map.max_parallel", f"a whole number from 1 to {MAX_PARALLEL}")
        parallel = 1
    over = _expression(spec.get("over"), f"{path}.map.over", err, required=True)
    if "agent" in spec:
        if "tool" in spec or "args" in spec:
            err(f"{path}.map", "either a tool (with args) or an agent, not both")
        if compensate is not None:
            err(f"{path}.compensate", "an agent's child task is not compensated")
        if common["timeout_s"] is not None:
            err(f"{path}.timeout_s", "a child task has its agent's own time budget")
        called = _agent(spec.get("agent"), f"{path}.map.agent", agents, err)
        if called is None:
            return None
        return Node(kind="map", tool=called[0], args=called[1], over=over,
                    max_parallel=parallel, **common)
    tool = _tool(spec.get("tool"), f"{path}.map.tool", tools, err)
    args = _template(spec.get("args", {}), f"{path}.map.args", err)
    return Node(kind="map", tool=tool, args=args, over=over, compensate=compensate,
                max_parallel=parallel, **common)


def _human_node(item: dict[str, Any], path: str, common: dict[str, Any],
                compensate: dict[str, Any] | None, err: Any) -> Node | None:
    """A question (with an optional answer schema) or an approval, with its expiry."""
    spec = item.get("human")
    if compensate is not None:
        err(f"{path}.compensate", "only tool and map nodes have effects to compensate")
    if not isinstance(spec, dict):
        err(f"{path}.human", "an object: {question, schema?} or {approval}")
        return None
    for key in sorted(set(spec) - {"question", "schema", "approval", "expires_in", "on_expiry"}):
        err(f"{path}.human.{key}", "unknown field; a human node has question or approval, "
                                   "schema, expires_in and on_expiry")
    approval = "approval" in spec
    text = spec.get("approval") if approval else spec.get("question")
    if approval and "question" in spec:
        err(f"{path}.human", "either a question or an approval, not both")
    if not isinstance(text, str) or not text.strip() or len(text) > 4000:
        err(f"{path}.human.{'approval' if approval else 'question'}",
            "the text a person reads: 1 to 4000 characters")
        text = ""
    _template(text, f"{path}.human", err)
    schema = spec.get("schema")
    if schema is not None:
        if approval:
            err(f"{path}.human.schema", "an approval's answer is approve or reject")
        elif not isinstance(schema, dict):
            err(f"{path}.human.schema", "a JSON schema (an object)")
        else:
            for problem in check_schema(schema):
                err(f"{path}.human.schema", problem)
    expires = spec.get("expires_in")
    if expires is not None and (not isinstance(expires, int) or isinstance(expires, bool)
                                or not 1 <= expires <= MAX_EXPIRES_IN_S):
        err(f"{path}.human.expires_in", f"whole seconds from 1 to {MAX_EXPIRES_IN_S}")
        expires = None
    on_expiry = spec.get("on_expiry", "reject")
    if on_expiry not in ("reject", "escalate"):
        err(f"{path}.human.on_expiry", "reject or escalate")
        on_expiry = "reject"
    return Node(kind="human", question=text, schema=schema if isinstance(schema, dict) else None,
                approval=approval, expires_in_s=expires, on_expiry=on_expiry, **common)


def _tool(name: Any, path: str, tools: set[str] | None, err: Any) -> str:
    if not isinstance(name, str) or not name:
        err(path, "the name of a registered tool")
        return ""
    if tools is not None and name not in tools:
        err(path, f"no enabled tool named {name!r}")
    return name


def _agent(spec: Any, path: str, agents: set[str] | None,
           err: Any) -> tuple[str, dict[str, Any]] | None:
    """An agent call `{name, goal, input}`: (its tool, `agent:<name>`; its
    arguments' template `{goal, input}`)."""
    if not isinstance(spec, dict):
        err(path, "an object: {name, goal, input}")
        return None
    for key in sorted(set(spec) - {"name", "goal", "input"}):
        err(f"{path}.{key}", "unknown field; an agent call has name, goal and input")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        err(f"{path}.name", "the name of an agent profile")
        return None
    if agents is not None and name not in agents:
        err(f"{path}.name", f"no enabled agent named {name!r}")
    goal = spec.get("goal")
    if not isinstance(goal, str) or not goal.strip() or len(goal) > 4000:
        err(f"{path}.goal", "what the agent is to do (a template): 1 to 4000 characters")
    input_ = spec.get("input", {})
    if not isinstance(input_, dict | str):
        err(f"{path}.input", "an object (a template), or an expression giving one")
    return AGENT_TOOL_PREFIX + name, {"goal": _template(goal, f"{path}.goal", err),
                                      "input": _template(input_, f"{path}.input", err)}


def _expression(source: Any, path: str, err: Any, *, required: bool = False) -> Expression | None:
    if source is None and not required:
        return None
    try:
        return compile_expression(source)
    except ExpressionError as exc:
        err(path, str(exc))
        return None


def _template(value: Any, path: str, err: Any) -> Any:
    try:
        for _path, _expr in template_expressions(value):
            pass
    except ExpressionError as exc:
        err(path, str(exc))
    return value


def _compensate(raw: Any, path: str, tools: set[str] | None, err: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"tool", "args"}:
        err(path, "an object: {tool, args}")
        return None
    tool = _tool(raw.get("tool"), f"{path}.tool", tools, err)
    return {"tool": tool, "args": _template(raw.get("args", {}), f"{path}.args", err)}


def _topological(nodes: dict[str, Node], ids: dict[str, int], err: Any) -> list[Node]:
    """The nodes in an order where each comes after its dependencies (Kahn's,
    ties in definition order); a cycle is an error on each node in it."""
    pending = {nid: set(n.after) for nid, n in nodes.items()}
    order: list[Node] = []
    while pending:
        ready = sorted((nid for nid, deps in pending.items() if not deps - {n.id for n in order}),
                       key=ids.__getitem__)
        if not ready:
            for nid in sorted(pending, key=ids.__getitem__):
                err(f"nodes[{ids[nid]}].after", "the dependencies form a cycle through this node")
            return order
        for nid in ready:
            order.append(nodes[nid])
            del pending[nid]
    return order


def ancestors(order: list[Node]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in order:
        found[node.id] = set().union(*({d, *found[d]} for d in node.after)) if node.after else set()
    return found


def _check_references(order: list[Node], ids: dict[str, int], raw: dict[str, Any],
                      err: Any) -> None:
    """Each expression may refer only to nodes that certainly finished before it
    runs: its node's ancestors (the run's `output`: any node)."""
    above = ancestors(order)
    for node in order:
        path = f"nodes[{ids[node.id]}]"
        sources: list[tuple[str, Expression]] = []
        if node.when is not None:
            sources.append((f"{path}.when", node.when))
        if node.over is not None:
            sources.append((f"{path}.map.over", node.over))
        calls_agent = node.tool.startswith(AGENT_TOOL_PREFIX)
        args_path = {(True, False): f"{path}.map.args", (True, True): f"{path}.map.agent",
                     (False, True): f"{path}.agent"}.get((node.kind == "map", calls_agent),
                                                         f"{path}.args")
        sources += [(f"{args_path}.{p}" if p else args_path, e)
                    for p, e in template_expressions(node.args)]
        if node.kind == "human":
            sources += [(f"{path}.human", e) for _p, e in template_expressions(node.question)]
        if node.compensate:
            sources += [(f"{path}.compensate.args", e)
                        for _p, e in template_expressions(node.compensate["args"])]
        for where, expr in sources:
            compensating = where.startswith(f"{path}.compensate")
            if compensating and expr.nodes:
                err(where, "a compensation sees `inputs`, `output` (its node's), `item` and "
                           "`index`; not other nodes")
                continue
            if not compensating and "output" in expr.program.variables():
                err(where, "`output` exists only in a compensation's args")
            for ref in sorted(expr.nodes):
                if ref not in ids:
                    err(where, f"no node with the id {ref!r}")
                elif ref not in above[node.id]:
                    err(where, f"refers to node {ref!r}, which is not among this node's "
                               "dependencies (list it, or a node after it, in `after`)")
        uses_item = [e for w, e in sources if not w.startswith(f"{path}.compensate")
                     and {"item", "index"} & set(e.program.variables())]
        if uses_item and node.kind != "map":
            err(path, "`item` and `index` exist only in a map's args")
        if node.kind == "map" and node.over is not None and (
                {"item", "index"} & set(node.over.program.variables())):
            err(f"{path}.map.over", "`item` and `index` are the map's own: not in `over`")
    try:
        for p, expr in template_expressions(raw.get("output")):
            for ref in sorted(expr.nodes):
                if ref not in ids:
                    err(f"output.{p}" if p else "output", f"no node with the id {ref!r}")
    except ExpressionError as exc:
        err("output", str(exc))
