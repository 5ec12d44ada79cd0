"""`manage.py bench --quick` runs every phase end to end against the test
database (real Celery workers, daphne, Redis) and reports every figure.

Speed is never asserted: only that each figure is there and that the work
behind it really happened.
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection

from benchmarks.config import database_url_of
from benchmarks.management.commands.bench import Command as Bench
from benchmarks.report import dig
from benchmarks.workflow_load import HTTP_TOOL, critical_path_s, definition
from workflows_app.definition import load

FIGURES = [
    ("machine", "cpus"),
    ("io", "io_to_scripted_steps_ratio"),
    ("io", "anatomy", "phases_per_step"),
    ("io", "anatomy", "commits_per_step"),
    ("io", "compare", "io_median_steps_per_s"),
    ("io", "compare", "scripted_median_steps_per_s"),
    ("io", "compare", "scripted_cpu_ms_per_step", "worker_pool"),
    ("io", "compare", "io_cpu_ms_per_step", "postgres"),
    ("workflow", "ideal_critical_path_s"),
    ("workflow", "sequential_critical_path_s"),
    ("workflow", "wall_to_ideal"),
    ("workflow", "instant_to_scripted_steps_ratio"),
    ("workflow", "anatomy", "workflow", "statements_per_step"),
    ("workflow", "anatomy", "scripted", "statements_per_step"),
    ("workflow", "http", "wall_s"),
    ("workflow", "http", "ratio_to_sequential"),
    ("workflow", "http", "node_steps_per_s"),
    ("workflow", "http", "run_duration", "p50_ms"),
    ("workflow", "http", "peak_tool_calls_in_flight"),
    ("workflow", "http", "cpu_ms_per_node_step", "worker_pool"),
    ("workflow", "compare", "workflow_median_node_steps_per_s"),
    ("workflow", "compare", "scripted_median_steps_per_s"),
    ("workflow", "compare", "workflow_cpu_ms_per_node_step", "postgres"),
    ("runner", "steps_per_s"),
    ("runner", "tasks_per_s"),
    ("runner", "step_latency", "p50_ms"),
    ("runner", "step_latency", "p99_ms"),
    ("runner", "ratio_to_floor"),
    ("runner", "worker_cpu_ms_per_step"),
    ("runner", "cpu_ms_per_step", "celery_consumer"),
    ("runner", "cpu_ms_per_step", "postgres"),
    ("runner", "cpu_ms_per_step", "redis"),
    ("runner", "machine_cpu_steal_pct"),
    ("floor", "machine_cpu_steal_pct"),
    ("floor", "steps_per_s"),
    ("anatomy", "statements_per_step"),
    ("anatomy", "commits_per_step"),
    ("anatomy", "phases_per_step"),
    ("long_task", "step_10_ms"),
    ("long_task", "step_last_ms"),
    ("long_task", "ratio_last_to_10"),
    ("ws_latency", "commit_to_browser", "p50_ms"),
    ("ws_latency", "commit_to_browser", "p99_ms"),
    ("ws_latency", "created_at_to_browser", "p99_ms"),
    ("console", "task_list", "p50_ms"),
    ("console", "task_list", "p99_ms"),
    ("console", "task_page", "p50_ms"),
    ("console", "task_page", "p99_ms"),
    ("console_data", "tenant_tasks"),
    ("waiting", "busy_worker_processes"),
    ("waiting", "db_connections_while_waiting"),
]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_quick_bench_reports_every_figure(tmp_path, capfd):
    out = tmp_path / "bench.json"

    # The command itself, not its name: the test settings are the product's, which
    # do not install the bench (manage.py does, for `bench`, in the re-executed run).
    call_command(
        Bench(),
        "--quick",
        "--json",
        str(out),
        "--database-url",
        database_url_of(connection.settings_dict),
    )

    doc = json.loads(out.read_text())
    missing = [".".join(path) for path in FIGURES if not isinstance(dig(doc, path), int | float)]
    assert missing == []
    (io_run,) = doc["io"]["runs"]
    assert io_run["succeeded"] == io_run["tasks"] == 20 and io_run["steps"] == 20 * 5
    cmp = doc["io"]["compare"]
    assert (cmp["tasks"], cmp["steps_per_task"], cmp["rounds"]) == (20, 5, 1)
    assert len(cmp["io_steps_per_s"]) == len(cmp["scripted_steps_per_s"]) == 1
    wf = doc["workflow"]
    assert (wf["ideal_critical_path_s"], wf["sequential_critical_path_s"]) == (0.8, 1.8)
    # the anatomy's first step of each is left out: 8 node steps, 8 tool steps
    assert [wf["anatomy"][k]["tool_steps"] for k in ("workflow", "scripted")] == [8, 8]
    http = wf["http"]
    # 6 runs, each 9 calls of the edge's tool (inputs 0-5: three take each side of the branch)
    assert http["succeeded"] == http["runs"] == 6 and http["tool_calls"] == 6 * 9
    assert http["node_steps_by_node"] == {"accept": 3, "check": 6, "decide": 6, "enrich": 30,
                                          "lookup": 6, "refer": 3}
    assert (http["node_steps"], http["steps"]) == (6 * 9, 6 * 10)
    wf_cmp = wf["compare"]
    assert (wf_cmp["runs"], wf_cmp["steps_per_run"], wf_cmp["rounds"]) == (6, 10, 1)
    assert wf_cmp["succeeded"] == [6] and wf_cmp["node_steps"] == [6 * 9]
    assert wf_cmp["scripted_steps"] == [6 * 10]
    runner = doc["runner"]
    assert runner["complete"] and runner["succeeded"] == runner["tasks"] == 8
    assert runner["steps"] == 8 * 4
    assert doc["floor"]["steps"] == 8 * 4
    assert len(runner["rounds_steps_per_s"]) == len(doc["floor"]["rounds_steps_per_s"]) == 1
    assert doc["long_task"]["succeeded"] and doc["long_task"]["steps"] == 40
    assert doc["long_task"]["rounds"] == len(doc["long_task"]["rounds_ratio"]) == 1
    ws = doc["ws_latency"]
    assert ws["committed"] == ws["received"] == 40 and ws["lost"] == 0
    assert doc["waiting"]["waiting_for_input"] == doc["waiting"]["tasks"] == 3
    assert doc["console_data"]["tenant_tasks"] >= 2000
    assert {t["target"].split(" ")[0] for t in doc["targets"]} >= {"runner", "step", "event",
                                                                   "workflow"}
    printed = capfd.readouterr().out
    assert "runner / floor" in printed and "workflow vs scripted" in printed  # the table


def test_the_workflow_critical_paths_follow_the_graph():
    graph = load(definition(HTTP_TOOL))
    # lookup, then check beside the map's items, decide, one side of the branch
    assert critical_path_s(graph, latency_s=0.2, concurrent=True) == 0.8
    # lookup, check, 5 items, decide, one side of the branch
    assert critical_path_s(graph, latency_s=0.2, concurrent=False) == 1.8
    assert critical_path_s(graph, latency_s=0.5, concurrent=True) == 2.0
