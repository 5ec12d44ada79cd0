"""The console's workflow pages: the list and the workflow page (everyone
reads, admins act), the editor (a definition's problems shown with their
paths, nothing saved), release, promote, roll back and end a release through
the page, the tenant boundary; a run's graph on its task page; the task
list's workflow filter; parent and child links."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.services.answers import task_provide_input
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import TenantFactory, actor_of, make_user, submit
from tests.fakes.runtime import add_tool
from tests.helpers import drive
from workflows_app.console.dag import STATUSES, layout
from workflows_app.models import Workflow, WorkflowVersion
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import workflow_create, workflow_release, workflow_update

pytestmark = pytest.mark.django_db

FLOW = """\
# looks the order up, asks a person, looks it up again
inputs:
  type: object
  required: [order_id]
  properties:
    order_id: {type: string}
nodes:
  - id: lookup
    tool: echo
    args: {order_id: "${inputs.order_id}"}
  - id: confirm
    after: [lookup]
    human: {approval: "Go on with ${inputs.order_id}?"}
  - id: again
    after: [confirm]
    tool: echo
    args: {order_id: "${inputs.order_id}"}
  - id: side
    after: [lookup]
    when: "false"
    tool: echo
    args: {order_id: "${inputs.order_id}"}
"""
CHANGED = FLOW.replace('when: "false"', 'when: "true"')


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture(autouse=True)
def _echo(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "echo", "echo")


def _flow(world, name: str = "order_flow", versions: int = 1) -> Workflow:  # type: ignore[no-untyped-def]
    admin = actor_of(world.users[Role.ADMIN])
    workflow_create(tenant_id=world.tenant.pk, name=name, definition=FLOW, actor=admin,
                    description="Looks an order up twice")
    for n in range(2, versions + 1):
        workflow_update(tenant_id=world.tenant.pk, name=name, actor=admin,
                        definition=FLOW.replace('when: "false"', f'when: "{n} > 100"'))
    return Workflow.objects.get(tenant=world.tenant, name=name)


def _run(world, name: str = "order_flow") -> Task:  # type: ignore[no-untyped-def]
    task = submit_run(tenant_id=world.tenant.pk, requester_id=None, workflow=name,
                      input={"order_id": "A-1"}, actor=SYSTEM).task
    return drive(task.pk)


def test_everyone_reads_the_list_and_the_page_and_only_admins_see_the_controls(world):
    _flow(world, versions=2)
    _run(world)
    for role in Role.values:
        c = client_for(world.users[role])
        listing = c.get("/workflows/")
        assert listing.status_code == 200
        row = re.search(r'<tr data-workflow="order_flow">(.*?)</tr>', listing.content.decode(),
                        re.S)
        assert row, "the workflow's row"
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        assert re.sub(r"<[^>]+>", "", cells[1]).strip() == "1"  # current
        assert re.sub(r"<[^>]+>", "", cells[2]).split()[0] == "2"  # latest
        assert ">1</a>" in cells[5]  # one run in the last day, linked to the filtered list
        page = c.get("/workflows/order_flow/").content.decode()
        assert "# looks the order up" in page  # the YAML as registered
        assert 'id="version-2"' in page and "nodes.3.when" in page  # the diff
        admin = role == Role.ADMIN
        assert ("New workflow" in listing.content.decode()) is admin
        assert ("Promote version 2" in page) is admin
        assert ("Edit definition" in page) is admin
    assert client_for(world.users[Role.OPERATOR]).get("/workflows/new/").status_code == 403
    assert client_for(world.users[Role.REVIEWER]).get(
        "/workflows/order_flow/edit/").status_code == 403
    refused = client_for(world.users[Role.OPERATOR]).post(
        "/workflows/order_flow/promote/", {"version": "2"})
    assert refused.status_code == 403
    assert Workflow.objects.get(name="order_flow").current_version == 1


def test_the_page_lists_the_latest_runs_with_links(world):
    _flow(world)
    run = _run(world)
    page = client_for(world.users[Role.REQUESTER]).get("/workflows/order_flow/").content.decode()
    assert f'href="/tasks/{run.pk}/"' in page
    assert 'data-status="WAITING_FOR_INPUT"' in page


def test_another_tenants_workflow_is_not_found(world):
    other = TenantFactory(name="t-other")
    workflow_create(tenant_id=other.pk, name="theirs", definition={"nodes": [
        {"id": "ask", "human": {"question": "?"}}]}, actor=SYSTEM)
    c = client_for(world.users[Role.ADMIN])
    for path in ("/workflows/theirs/", "/workflows/theirs/edit/"):
        assert c.get(path).status_code == 404
    assert c.post("/workflows/theirs/promote/", {"version": "1"}).status_code == 404
    assert "theirs" not in c.get("/workflows/").content.decode()
    assert make_user(other, Role.ADMIN)  # their admin exists; ours still cannot see it


def test_the_editor_shows_each_problem_with_its_path_and_saves_nothing(world):
    c = client_for(world.users[Role.ADMIN])
    bad = FLOW.replace("tool: echo", "tool: lookup_ordr", 1)
    bad = bad.replace("after: [confirm]", "after: [nowhere]")
    response = c.post("/workflows/new/", {"name": "broken", "definition": bad})
    assert response.status_code == 400
    html = response.content.decode()
    problems = re.findall(r"<li class=\"field-error\" data-problem>(.*?)</li>", html, re.S)
    assert any(p.startswith("definition.nodes[0].tool: ") for p in problems), problems
    assert any(p.startswith("definition.nodes[2].after: ") for p in problems), problems
    assert "Nothing was saved." in html
    assert "lookup_ordr" in html  # the text is kept in the editor
    assert not Workflow.objects.filter(name="broken").exists()

    unparsable = c.post("/workflows/new/", {"name": "broken", "definition": "nodes: [a: b: c"})
    assert unparsable.status_code == 400
    assert "not valid YAML or JSON" in unparsable.content.decode()
    bad_name = c.post("/workflows/new/", {"name": "Not A Name", "definition": FLOW})
    assert bad_name.status_code == 400 and "lowercase letters" in bad_name.content.decode()
    assert not Workflow.objects.exists()


def test_the_editor_creates_and_then_saves_a_new_version_that_is_not_live(world):
    c = client_for(world.users[Role.ADMIN])
    form = c.get("/workflows/new/")
    assert form.status_code == 200 and 'data-code-editor' in form.content.decode()
    starter = form.context["form"].initial["definition"]
    assert c.post("/workflows/new/", {"name": "starter", "definition": starter}).status_code == 302
    created = c.post("/workflows/new/", {"name": "order_flow", "definition": FLOW,
                                         "description": "Two lookups"})
    assert created.status_code == 302 and created["Location"] == "/workflows/order_flow/"
    version = WorkflowVersion.objects.get(workflow__name="order_flow")
    assert version.source == FLOW and version.actor == world.users[Role.ADMIN].username

    editor = c.get("/workflows/order_flow/edit/").content.decode()
    assert "# looks the order up" in editor  # the text as saved, comments and all
    again = c.post("/workflows/order_flow/edit/", {"definition": FLOW, "enabled": "on",
                                                   "description": "Two lookups"})
    assert again.status_code == 302
    assert WorkflowVersion.objects.filter(workflow__name="order_flow").count() == 1  # unchanged
    saved = c.post("/workflows/order_flow/edit/", {"definition": CHANGED, "enabled": "on",
                                                   "description": "Two lookups"}, follow=True)
    assert "saved as version 2" in saved.content.decode()
    assert "New runs still get version 1" in saved.content.decode()
    workflow = Workflow.objects.get(name="order_flow")
    assert workflow.current_version == 1
    assert [v.number for v in workflow.versions.all()] == [2, 1]

    refused = c.post("/workflows/order_flow/edit/", {"definition": "nodes: []", "enabled": "on"})
    assert refused.status_code == 400
    assert "definition.nodes: " in refused.content.decode()
    assert WorkflowVersion.objects.filter(workflow=workflow).count() == 2


def test_release_promote_end_and_roll_back_through_the_page(world):
    _flow(world, versions=3)
    c = client_for(world.users[Role.ADMIN])
    released = c.post("/workflows/order_flow/release/", {"candidate": "3", "percent": "25"},
                      follow=True)
    assert "Version 3 now goes to 25 % of new runs" in released.content.decode()
    workflow = Workflow.objects.get(name="order_flow")
    assert (workflow.release_candidate, workflow.release_percent) == (3, 25)

    ended = c.post("/workflows/order_flow/release/end/", follow=True)
    assert "Release ended" in ended.content.decode()
    workflow.refresh_from_db()
    assert workflow.release_candidate is None and workflow.current_version == 1

    promoted = c.post("/workflows/order_flow/promote/", {"version": "3"}, follow=True)
    assert "Version 3 promoted" in promoted.content.decode()
    rolled = c.post("/workflows/order_flow/rollback/", {"version": "2"}, follow=True)
    assert "every new run gets version 2" in rolled.content.decode()
    workflow.refresh_from_db()
    assert workflow.current_version == 2

    # A stale or invalid action is refused with the reason, never a 500.
    stale = c.post("/workflows/order_flow/promote/", {"version": "2"})
    assert stale.status_code == 400
    assert "version 2 is already the current version" in stale.content.decode()
    missing = c.post("/workflows/order_flow/release/", {"candidate": "9", "percent": "10"})
    assert missing.status_code == 400 and "no version 9" in missing.content.decode()
    junk = c.post("/workflows/order_flow/release/", {"candidate": "x", "percent": "300"})
    assert junk.status_code == 400 and "Not applied" in junk.content.decode()
    assert c.get("/workflows/order_flow/release/").status_code == 405
    workflow.refresh_from_db()
    assert (workflow.current_version, workflow.release_candidate) == (2, None)


def test_the_layout_puts_a_node_below_the_longest_path_to_it():
    placed = layout([("a", ()), ("b", ("a",)), ("c", ("b",)), ("d", ("a", "c")), ("e", ())])
    layers = {k: p.layer for k, p in placed.items()}
    assert layers == {"a": 0, "e": 0, "b": 1, "c": 2, "d": 3}
    assert placed["a"].y < placed["b"].y < placed["c"].y < placed["d"].y
    assert placed["a"].x != placed["e"].x and placed["a"].y == placed["e"].y
    # Within a layer, a node sits on the side of the nodes it comes after.
    crossed = layout([("l", ()), ("r", ()), ("from_r", ("r",)), ("from_l", ("l",))])
    assert crossed["from_l"].x < crossed["from_r"].x


def _svg(html: str) -> str:
    match = re.search(r"<svg class=\"dag\".*?</svg>", html, re.S)
    assert match, "the run's graph"
    return match.group(0)


def _boxes(svg: str) -> dict[str, str]:
    """node id -> status, from each box's group."""
    groups = re.findall(r'<g class="dag-node dag-(\w+)" data-node="(\w+)" data-status="(\w+)">',
                        svg)
    assert all(cls == status for cls, _, status in groups)
    assert svg.count("<rect ") == len(groups)  # one box per node
    return {node: status for _, node, status in groups}


def test_a_runs_page_draws_its_graph_with_each_nodes_status(world):
    _flow(world)
    run = _run(world)
    assert run.status == TaskStatus.WAITING_FOR_INPUT
    c = client_for(world.users[Role.REQUESTER])
    page = c.get(f"/tasks/{run.pk}/").content.decode()
    svg = _svg(page)
    assert _boxes(svg) == {"lookup": "succeeded", "confirm": "waiting", "again": "pending",
                           "side": "skipped"}
    assert set(_boxes(svg).values()) <= set(STATUSES)
    steps = {s.decision["workflow"]["node"]: s.step_no for s in run.steps.all()}
    assert f'href="#step-{steps["lookup"]}"' in svg  # a box links to its step's row
    assert f'id="step-{steps["lookup"]}"' in page
    assert svg.count('class="dag-edge"') == 3  # lookup->confirm, confirm->again, lookup->side

    task_provide_input(task_id=run.pk, answer=json.dumps({"approved": True}), actor=SYSTEM)
    done = drive(run.pk)
    assert done.status == TaskStatus.SUCCEEDED, done.failure_detail
    live = c.get(f"/tasks/{run.pk}/live/?after=0").content.decode()
    assert _boxes(_svg(live)) == {"lookup": "succeeded", "confirm": "succeeded",
                                  "again": "succeeded", "side": "skipped"}
    assert 'id="task-dag" class="card" data-live-panel' in live


def test_a_canceled_runs_unreached_nodes_say_so_and_an_agents_task_has_no_graph(world):
    from tasks_app.services.tasks import task_cancel
    _flow(world)
    run = _run(world)
    task_cancel(task_id=run.pk, actor=SYSTEM)
    c = client_for(world.users[Role.OPERATOR])
    boxes = _boxes(_svg(c.get(f"/tasks/{run.pk}/").content.decode()))
    assert boxes["again"] == "canceled"
    task = submit(world.tenant, [{"final": {}}])
    assert 'class="dag"' not in c.get(f"/tasks/{task.pk}/").content.decode()


def test_a_box_links_only_to_a_step_row_the_page_shows(world):
    workflow_create(tenant_id=world.tenant.pk, name="long_flow", actor=SYSTEM, definition={
        "nodes": [{"id": "first", "tool": "echo", "args": {}},
                  {"id": "many", "after": ["first"],
                   "map": {"over": "inputs.items", "tool": "echo", "args": {"n": "${item}"}}}]})
    run = submit_run(tenant_id=world.tenant.pk, requester_id=None, workflow="long_flow",
                     input={"items": list(range(55))}, actor=SYSTEM).task
    assert drive(run.pk, max_slices=500, timeout=120).status == TaskStatus.SUCCEEDED
    page = client_for(world.users[Role.OPERATOR]).get(f"/tasks/{run.pk}/").content.decode()
    assert 'id="step-1"' not in page  # the page shows the latest steps only
    links = dict(re.findall(r'data-node="(\w+)" data-status="\w+"><a href="#step-(\d+)"', page))
    assert list(links) == ["many"]  # `first`'s step is not on the page: no dead link
    assert f'id="step-{links["many"]}"' in page


def test_a_run_whose_snapshot_no_longer_loads_still_has_its_page(world):
    _flow(world)
    run = _run(world)
    snapshot = dict(run.agent_snapshot)
    snapshot["model"] = {**snapshot["model"], "definition": {"nodes": "not a list"},
                         "definition_key": "broken"}
    Task.objects.filter(pk=run.pk).update(agent_snapshot=snapshot)
    page = client_for(world.users[Role.OPERATOR]).get(f"/tasks/{run.pk}/")
    assert page.status_code == 200 and 'class="dag"' not in page.content.decode()


def test_the_task_list_filters_runs_by_workflow(world):
    _flow(world)
    _flow(world, name="other_flow")
    mine = _run(world)
    theirs = _run(world, "other_flow")
    agent_task = submit(world.tenant, [{"final": {}}])
    c = client_for(world.users[Role.OPERATOR])
    listed = c.get("/tasks/?workflow=order_flow")
    ids = [t.pk for t in listed.context["tasks"]]
    assert ids == [mine.pk]
    assert "workflow order_flow" in listed.content.decode()  # said in the filter text
    everything = [t.pk for t in c.get("/tasks/").context["tasks"]]
    assert {mine.pk, theirs.pk, agent_task.pk} <= set(everything)
    unknown = [t.pk for t in c.get("/tasks/?workflow=nope").context["tasks"]]
    assert set(unknown) == set(everything)  # an unknown choice is dropped, not a 500


def test_the_task_page_links_a_parent_and_lists_its_children(world):
    parent = submit(world.tenant, [{"final": {}}], goal="The parent")
    child = submit(world.tenant, [{"final": {}}], goal="The child")
    Task.objects.filter(pk=child.pk).update(parent=parent, parent_step_no=1, depth=1)
    c = client_for(world.users[Role.REQUESTER])
    page = c.get(f"/tasks/{parent.pk}/").content.decode()
    assert f'<li data-child="{child.pk}"><a href="/tasks/{child.pk}/">' in page
    assert 'data-status="CREATED"' in page
    child_page = c.get(f"/tasks/{child.pk}/").content.decode()
    assert f'href="/tasks/{parent.pk}/" data-parent="{parent.pk}"' in child_page
    assert f'href="/tasks/{parent.pk}/#step-1"' in child_page


def test_release_controls_follow_the_state(world):
    _flow(world, versions=2)
    admin = actor_of(world.users[Role.ADMIN])
    workflow_release(tenant_id=world.tenant.pk, name="order_flow", candidate=2, percent=10,
                     actor=admin)
    page = client_for(world.users[Role.ADMIN]).get("/workflows/order_flow/").content.decode()
    assert "Release in progress: version 2 gets 10 %" in page
    assert "End the release" in page and "Promote version 2" in page
