"""Operations in production mode: tasks run on a real Celery worker, `/metrics`
is scraped from a real ASGI server (daphne) sharing the worker's multiprocess
directory, and the worker's JSON log lines are read from its output."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import submit
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - a fixture
from tests.fakes.openai_server import error, reply
from tests.helpers import wait_for
from tests.processes import free_port_run

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TOKEN = "scrape-me-7f3a"
DAPHNE_ACCESS_LINE = re.compile(r'^[\d.:]+ - - \[[^\]]+\] "')



def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as res:  # noqa: S310 - local server
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:  # not listening (yet)
        return 0, ""


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _complete_lines(path: Path) -> list[str]:
    """The non-empty lines written so far, without one still being written."""
    text = path.read_text(errors="replace")
    return [line for line in text[:text.rfind("\n") + 1].splitlines() if line]


def _settled(*task_ids: int) -> bool:
    return not Task.objects.filter(
        pk__in=task_ids, status__in=(TaskStatus.CREATED, TaskStatus.RUNNING)).exists()


def test_metrics_of_tasks_run_by_a_worker_scraped_from_the_web_process(
        world, celery_workers, web, openai_server, tmp_path):  # noqa: F811 - the fixture
    shared = tmp_path / "prometheus"
    shared.mkdir()
    celery_workers.start(env={"PROMETHEUS_MULTIPROC_DIR": str(shared)})
    server = web(PROMETHEUS_MULTIPROC_DIR=str(shared), TETHER_METRICS_TOKEN=TOKEN,
                 LOG_FORMAT="json")

    openai_agent(world.tenant, openai_server)
    openai_server.push(
        error(500),  # retried within the step: one failed request, then two answers
        reply(tool_calls=[("lookup_order", {"order_id": "A-2"})], usage=(100, 20)),
        reply('{"answer": "A-2 is with Ada"}', usage=(150, 10)),
    )
    scripted = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"tool": "lookup_order", "args": {"order_id": "Z-404"}},  # a business error
        {"final": {"answer": "done"}},
    ])
    modelled = submit(world.tenant, None, agent="llm", goal="Where is order A-2?")
    asking = submit(world.tenant, [{"ask": "Which order do you mean?"}])
    wait_for(lambda: _settled(scripted.pk, modelled.pk, asking.pk), timeout=60,
             message="the tasks to settle")
    statuses = dict(Task.objects.values_list("pk", "status"))
    assert (statuses[scripted.pk], statuses[modelled.pk], statuses[asking.pk]) == (
        TaskStatus.SUCCEEDED, TaskStatus.SUCCEEDED, TaskStatus.WAITING_FOR_INPUT)

    assert _get(f"{server.url}/metrics")[0] == 401
    assert _get(f"{server.url}/metrics", token="wrong")[0] == 401
    status, text = _get(f"{server.url}/metrics", token=TOKEN)
    assert status == 200
    samples = _samples(text)
    tenant = world.tenant.name

    # counted by the worker's pool process, merged by the web process
    assert _value(samples, "tether_steps_total", kind="tool_call", outcome="continue") == 3
    assert _value(samples, "tether_steps_total", kind="final", outcome="stop") == 2
    assert _value(samples, "tether_steps_total", kind="ask_user", outcome="stop") == 1
    assert _value(samples, "tether_step_duration_seconds_count", kind="tool_call") == 3
    assert _value(samples, "tether_tool_calls_total", tool="lookup_order", outcome="ok") == 2
    assert _value(samples, "tether_tool_calls_total", tool="lookup_order",
                  outcome="business") == 1
    assert _value(samples, "tether_tool_call_duration_seconds_count", tool="lookup_order") == 3
    assert _value(samples, "tether_model_call_duration_seconds_count", model="primary") == 3
    assert _value(samples, "tether_model_errors_total", model="primary", error="http_5xx") == 1
    assert _value(samples, "tether_model_tokens_total", model="primary", direction="input") == 250
    assert _value(samples, "tether_model_tokens_total", model="primary", direction="output") == 30
    # from the database
    assert _value(samples, "tether_tasks_finished_total", status="SUCCEEDED") == 2
    assert _value(samples, "tether_task_events_total", type="need_input") == 1
    assert _value(samples, "tether_tasks", tenant=tenant, agent="support",
                  status="WAITING_FOR_INPUT") == 1
    assert _value(samples, "tether_human_requests_pending", tenant=tenant, kind="question") == 1
    assert _value(samples, "tether_admission_queue_depth") == 0
    assert _value(samples, "tether_database_up") == 1

    # The web process's log lines are JSON too (daphne's access log aside: it is
    # daphne's own stream, not logging; docs/how-to/operate.md says to turn it off with `-v 0`).
    assert _get(f"{server.url}/no-such-page")[0] == 404
    log = server.log_path
    wait_for(lambda: "Not Found: /no-such-page" in log.read_text(), message="the 404 logged")
    lines = [line for line in _complete_lines(log) if not DAPHNE_ACCESS_LINE.match(line)]
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    assert {"daphne.server", "django.request"} <= {r["logger"] for r in records}


def test_a_workers_log_lines_are_json_with_the_tasks_context(world, celery_workers):
    worker = celery_workers.start(beat=True, env={"LOG_FORMAT": "json"}, log_level="info")
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"final": {"answer": "delivered"}},
    ])
    wait_for(lambda: _settled(task.pk), timeout=60, message="the task to settle")
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.SUCCEEDED

    def step_lines() -> list[dict[str, Any]]:
        lines = _complete_lines(worker.log_path)
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return [r for r in records if r.get("logger") == "tether.step"]

    steps = wait_for(lambda: len(step_lines()) >= 2 and step_lines(), message="two step lines")
    for record in steps:
        assert record["task_id"] == task.pk
        assert record["trace_id"] == task.trace_id
        assert record["tenant"] == world.tenant.pk
        assert record["agent"] == "support"
        assert record["level"] == "info" and record["timestamp"]
    assert [(r["step_no"], r["step_kind"], r["outcome"]) for r in steps] == [
        (1, "tool_call", "continue"), (2, "final", "stop")]
    # Every line the worker and its beat wrote is one JSON object: Celery's own
    # (the task received, then succeeded; beat's sweeps), Python's warnings, and
    # no banner.
    wait_for(lambda: "celery.beat" in worker.log_path.read_text(), message="a line of beat")
    lines = _complete_lines(worker.log_path)
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    assert all(isinstance(r, dict) and r["message"] is not None for r in records)
    loggers = {r["logger"] for r in records}
    assert {"celery.app.trace", "celery.beat", "tether.step"} <= loggers, loggers


def test_without_a_shared_directory_each_worker_process_serves_its_own_figures(
        world, celery_workers):
    port = free_port_run(2)  # the main process on PORT, its pool child on PORT+1
    celery_workers.start(concurrency=1, env={"TETHER_WORKER_METRICS_PORT": f"127.0.0.1:{port}"})
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"final": {"answer": "delivered"}},
    ])
    wait_for(lambda: _settled(task.pk), timeout=60, message="the task to settle")

    # The prefork pool's only child ran the task and serves on PORT+1; the main
    # process (which ran no step) on PORT.
    # The step is counted just after its commit settles the task: poll until it is.
    def child_figures() -> dict | None:
        samples = _samples(_get(f"http://127.0.0.1:{port + 1}/metrics")[1])
        counted = _value(samples, "tether_steps_total", kind="final", outcome="stop")
        return samples if counted is not None else None

    child = wait_for(child_figures, message="the pool child's count of the final step")
    assert _value(child, "tether_steps_total", kind="tool_call", outcome="continue") == 1
    assert _value(child, "tether_steps_total", kind="final", outcome="stop") == 1
    assert _value(child, "tether_tool_calls_total", tool="lookup_order", outcome="ok") == 1
    status, text = _get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert _value(_samples(text), "tether_steps_total", kind="final", outcome="stop") is None
