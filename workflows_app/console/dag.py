"""A workflow run's graph, laid out for the task page's server-drawn SVG.

The layout is a plain layered one, computed here so the page needs no
JavaScript to draw it: a node's layer is the longest path to it from a root
(a node without `after`), layers run top to bottom, centred, and within a
layer the nodes are ordered by the mean position of the nodes they come after
(one sweep, definition order on ties), which removes most crossings of a typical
workflow. An edge is a curve from the bottom of a node to the top of a node
that comes after it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from tasks_app.models import Task

from ..definition import DefinitionError
from ..orchestrator import definition_of, run_nodes

BOX_W, BOX_H = 156, 46
GAP_X, GAP_Y = 20, 40
PAD = 8
LABEL_CHARS = 20
# Every status `run_nodes` reports; each has its colour in the stylesheet (`dag-<status>`).
STATUSES = ("pending", "waiting", "succeeded", "failed", "skipped", "not_run", "canceled")


@dataclass(frozen=True)
class Placed:
    id: str
    layer: int
    x: int
    y: int


@dataclass(frozen=True)
class DagNode:
    id: str
    kind: str
    status: str
    x: int
    y: int
    label: str
    href: str
    title: str

    @property
    def text_x(self) -> int:
        return self.x + BOX_W // 2

    @property
    def status_label(self) -> str:
        return self.status.replace("_", " ")


@dataclass(frozen=True)
class DagEdge:
    source: str
    target: str
    path: str


@dataclass(frozen=True)
class Dag:
    nodes: list[DagNode]
    edges: list[DagEdge]
    width: int
    height: int
    key: str
    box_w: int = BOX_W
    box_h: int = BOX_H


def layout(graph: list[tuple[str, tuple[str, ...]]]) -> dict[str, Placed]:
    """Positions of `graph`'s nodes ((id, after) in a topological order)."""
    layer: dict[str, int] = {}
    for node_id, after in graph:
        layer[node_id] = 1 + max((layer[d] for d in after), default=-1)
    layers: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for node_id, _ in graph:
        layers[layer[node_id]].append(node_id)
    after_of = dict(graph)
    position: dict[str, float] = {}
    for row in layers:
        defined = {node_id: float(i) for i, node_id in enumerate(row)}

        def mean_of_parents(node_id: str, defined: dict[str, float] = defined) -> float:
            parents = [position[d] for d in after_of[node_id]]
            return sum(parents) / len(parents) if parents else defined[node_id]
        row.sort(key=mean_of_parents)  # stable: definition order on ties
        for index, node_id in enumerate(row):
            position[node_id] = index - (len(row) - 1) / 2  # rows are centred
    widest = max((len(row) for row in layers), default=0)
    full = widest * (BOX_W + GAP_X) - GAP_X
    placed: dict[str, Placed] = {}
    for depth, row in enumerate(layers):
        offset = (full - (len(row) * (BOX_W + GAP_X) - GAP_X)) // 2
        for index, node_id in enumerate(row):
            placed[node_id] = Placed(node_id, depth, PAD + offset + index * (BOX_W + GAP_X),
                                     PAD + depth * (BOX_H + GAP_Y))
    return placed


def _curve(source: Placed, target: Placed) -> str:
    sx, sy = source.x + BOX_W // 2, source.y + BOX_H
    tx, ty = target.x + BOX_W // 2, target.y
    bend = (ty - sy) // 2
    return f"M{sx} {sy} C{sx} {sy + bend} {tx} {ty - bend} {tx} {ty}"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _href(node: dict[str, Any], shown_steps: frozenset[int] | None) -> str:
    if node.get("task"):
        return reverse("console:task-detail", args=[node["task"]])
    steps = node.get("steps") or []
    if steps and (shown_steps is None or steps[-1] in shown_steps):
        return f"#step-{steps[-1]}"
    return ""


def _title(node: dict[str, Any]) -> str:
    title = f"{node['id']} ({node['kind']}): {node['status'].replace('_', ' ')}"
    if node.get("task"):
        return f"{title}; child task #{node['task']}"
    steps = node.get("steps") or []
    if steps:
        return f"{title}; step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"
    return title


def is_workflow_run(task: Task) -> bool:
    return bool((task.agent_snapshot or {}).get("workflow"))


def run_dag(task: Task, *, shown_steps: frozenset[int] | None = None) -> Dag | None:
    """The run's graph with each node's status (None: not a workflow run). A box
    links to its node's latest step when that step's row is on the page
    (`shown_steps`; None: assume it is)."""
    if not is_workflow_run(task):
        return None
    try:
        definition = definition_of((task.agent_snapshot or {}).get("model") or {})
    except (DefinitionError, KeyError, TypeError):
        return None  # the run fails on it with the reason; its page still shows the rest
    states = {n["id"]: n for n in run_nodes(task)}
    placed = layout([(n.id, n.after) for n in definition.nodes])
    nodes = []
    for node in definition.nodes:
        state, at = states[node.id], placed[node.id]
        nodes.append(DagNode(id=node.id, kind=node.kind, status=state["status"], x=at.x, y=at.y,
                             label=_short(node.id), href=_href(state, shown_steps),
                             title=_title(state)))
    edges = [DagEdge(d, node.id, _curve(placed[d], placed[node.id]))
             for node in definition.nodes for d in node.after]
    right = max((p.x for p in placed.values()), default=0) + BOX_W + PAD
    bottom = max((p.y for p in placed.values()), default=0) + BOX_H + PAD
    key = "|".join(f"{n.id}:{n.status}:{n.href}" for n in nodes)
    return Dag(nodes=nodes, edges=edges, width=right, height=bottom, key=key)
