"""Console response times with a big history (see `datagen`).

Pages are timed over HTTP against the daphne server the bench started, as
the logged-in bench operator: client-side wall time of a full GET (the body
read), after two warm-up requests. The REST endpoints are timed the same way
with an API key. A page or endpoint that does not answer 200 is reported with
its status and not timed. The selectors the pages are built on are timed in
this process too (with their query counts), which is what the figures fall
back to when the pages do not exist yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks_app.selectors import events_after, steps_of_task, task_of_tenant, tasks_of_tenant

from .config import BenchConfig
from .stats import summary_ms
from .world import World

PAGE_SIZE = 50


def _time_http(client: httpx.Client, url: str, repeat: int) -> dict[str, Any]:
    first = client.get(url)
    if first.status_code != 200:
        return {"url": url, "status": first.status_code, "available": False}
    client.get(url)
    samples, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        samples.append(time.perf_counter() - started)
        size = len(response.content)
    return {"url": url, "status": 200, "available": True, "bytes": size, **summary_ms(samples)}


def _time_call(fn: Callable[[], Any], repeat: int) -> dict[str, Any]:
    fn()
    with CaptureQueriesContext(connection) as ctx:
        fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return {"queries": len(ctx.captured_queries), **summary_ms(samples)}


def _task_page_reads(tenant_id: int, task_id: int) -> tuple[Any, ...]:
    return (
        task_of_tenant(tenant_id, task_id),
        list(steps_of_task(task_id)[:200]),
        events_after(task_id=task_id, after_id=0, limit=200),
    )


def run_console(
    world: World,
    cfg: BenchConfig,
    *,
    base_url: str,
    cookie: str,
    api_key: str,
    sample_task: int | None,
    long_task: int | None,
) -> dict[str, Any]:
    repeat = cfg.console_requests
    pages: dict[str, Any] = {}
    api: dict[str, Any] = {}
    with httpx.Client(
        base_url=base_url, cookies={"sessionid": cookie}, timeout=60, follow_redirects=False
    ) as client:
        pages["task_list"] = _time_http(client, "/tasks/", repeat)
        pages["task_list_failed"] = _time_http(client, "/tasks/?status=FAILED", repeat)
        if sample_task:
            pages["task_page"] = _time_http(client, f"/tasks/{sample_task}/", repeat)
        if long_task:
            pages["task_page_long"] = _time_http(client, f"/tasks/{long_task}/", repeat)
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Token {api_key}"}, timeout=60
    ) as client:
        api["task_list"] = _time_http(client, "/api/v1/tasks", repeat)
        if sample_task:
            api["task"] = _time_http(client, f"/api/v1/tasks/{sample_task}", repeat)
            api["task_events"] = _time_http(
                client, f"/api/v1/tasks/{sample_task}/events?after=0", repeat
            )

    tenant_id = world.tenant_id
    selectors: dict[str, Any] = {
        "task_list": _time_call(
            lambda: list(tasks_of_tenant(tenant_id).order_by("-id")[:PAGE_SIZE]), repeat
        ),
        "task_list_failed": _time_call(
            lambda: list(
                tasks_of_tenant(tenant_id).filter(status="FAILED").order_by("-id")[:PAGE_SIZE]
            ),
            repeat,
        ),
    }
    for name, task_id in (("task_page", sample_task), ("task_page_long", long_task)):
        if task_id:
            selectors[name] = _time_call(partial(_task_page_reads, tenant_id, task_id), repeat)

    def pick(name: str) -> dict[str, Any] | None:
        page = pages.get(name)
        if page and page.get("available"):
            return {"source": "http", **page}
        if name in selectors:
            return {"source": "selectors", **selectors[name]}
        return None

    return {
        "task_list": pick("task_list"),
        "task_page": pick("task_page"),
        "task_page_long": pick("task_page_long"),
        "pages": pages,
        "api": api,
        "selectors": selectors,
        "sample_task_id": sample_task,
        "long_task_id": long_task,
    }
