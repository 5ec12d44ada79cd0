"""The fault drill: phases run one after the other in a tenant of the drill's
own, each injecting one fault into the drill's downstream (or its workers)
while a batch of scripted tasks runs, then checking Tether's promises: every
task finishes (none lost, none hanging), no write applied twice downstream.

Phases: a baseline; a tool answering invalid JSON; a downstream answering 500
for a while; twice the baseline's tasks at once; a worker killed with SIGKILL
(only when the drill started workers itself, `--start-workers`); a downstream
outage long enough to open the write tool's circuit breaker (its openings and
the calls it let through while open are counted); the model endpoint stalling
past the agent's timeout for a while (an agent on the OpenAI-compatible fake
model the downstream serves: the tasks retry and finish).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from accounts_app.models import Tenant
from config.celery import app
from foundations.actors import SYSTEM
from tools_app.models import Breaker, Tool
from tools_app.outbound.policy import url_problem

from ..machine import TERMINAL, TaskStatus
from ..models import Event, Step, Task
from ..services.releases import agent_seed
from ..services.tasks import task_submit
from .downstream import MODEL_PATH, Downstream

FINISHED = {*TERMINAL, TaskStatus.WAITING_FOR_RECONCILIATION}


@dataclass
class Phase:
    fault: str
    tether_did: str = ""
    tasks: int = 0
    finished: int = 0
    succeeded: int = 0
    duplicates: int = 0
    recover_s: float | None = None  # from the fault's end to the last task finished
    downstream_calls: int = 0  # calls the fault's route received during the phase
    breaker_openings: int = 0
    calls_while_open: int = 0  # calls that reached the downstream while its breaker was open
    promise_kept: bool | None = None  # None: not run (n/a)
    note: str = ""


@dataclass
class DrillOptions:
    quick: bool = False
    listen: str = "127.0.0.1"
    advertise: str = "127.0.0.1"
    port: int = 0
    start_workers: int = 0
    error_for_s: float = 0.0  # 0: the size's default

    @property
    def batch(self) -> int:
        return 4 if self.quick else 20

    @property
    def deadline_s(self) -> float:
        return 120.0 if self.quick else 600.0

    @property
    def outage_s(self) -> float:
        return 4.0 if self.quick else 20.0

    @property
    def model_timeout_s(self) -> float:
        return 1.0 if self.quick else 5.0


@dataclass
class Drill:
    options: DrillOptions
    phases: list[Phase] = field(default_factory=list)

    def run(self) -> dict[str, Any]:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.downstream = Downstream(self.options.listen, self.options.port)
        self.workers = DrillWorkers()
        started = time.monotonic()
        try:
            problem = url_problem(self._url("/read"))
            if problem:
                raise DrillAborted(
                    f"the outbound policy refuses the drill's downstream ({problem}); allow "
                    f"{self.options.advertise} in TETHER_EGRESS_ALLOW, or pass --advertise")
            self.tenant = self._tenant(f"drill-{stamp}-{uuid.uuid4().hex[:4]}")
            for _ in range(self.options.start_workers):
                self.workers.start()
            baseline = self._baseline()
            self._invalid_json()
            self._error_500()
            self._breaker_opens()
            self._model_timeouts()
            self._doubled(baseline)
            self._worker_killed()
        finally:
            self.workers.stop_all()
            self.downstream.close()
        broken = [p.fault for p in self.phases if p.promise_kept is False]
        return {"tenant": self.tenant.name, "started": stamp,
                "duration_s": round(time.monotonic() - started, 1),
                "promises_kept": not broken, "broken": broken,
                "phases": [asdict(p) for p in self.phases]}

    # --- the phases ------------------------------------------------------------
    def _baseline(self) -> float:
        phase = self._batch("baseline (no fault)", self.options.batch)
        self._finish(phase, "ran every task")
        return phase.recover_s or 0.0

    def _invalid_json(self) -> None:
        self.downstream.set("/json", "invalid_json")
        ids = self._submit(self.options.batch, json_tool=True)
        phase = Phase(fault="a tool answers invalid JSON", tasks=len(ids))
        self._wait(phase, ids, since=time.monotonic())
        steps = Counter(Step.objects.filter(task_id__in=ids, tool="drill_json")
                        .values_list("status", flat=True))
        phase.downstream_calls = self.downstream.calls["/json"]
        phase.tether_did = (f"the tool's steps ended {dict(steps)}; the tasks went on "
                            f"({phase.downstream_calls} calls)")
        # Promise: the task is not stuck and not crashed; its step is not a success.
        phase.promise_kept = (phase.finished == phase.tasks
                              and "SUCCEEDED" not in steps and phase.duplicates == 0)
        self.phases.append(phase)

    def _error_500(self) -> None:
        seconds = self.options.error_for_s or (2.0 if self.options.quick else 20.0)
        calls_before = self.downstream.calls["/write"]
        self.downstream.set("/write", "error_500")
        ids = self._submit(self.options.batch)
        phase = Phase(fault=f"the downstream answers 500 for {seconds:.0f} s", tasks=len(ids))
        time.sleep(seconds)  # the fault lasts this long
        fault_end = time.monotonic()
        self.downstream.set("/write", "ok")
        self._wait(phase, ids, since=fault_end)
        phase.downstream_calls = self.downstream.calls["/write"] - calls_before
        self._finish(phase, f"retried with backoff: {phase.downstream_calls} calls for "
                            f"{len(ids)} writes")

    def _breaker_opens(self) -> None:
        seconds = self.options.outage_s
        tool = Tool.objects.get(tenant=self.tenant, name="drill_write")
        opened_before = _openings(self.tenant.pk, "tool", tool.name)
        self.downstream.set("/write", "error_500")
        calls_before = self.downstream.calls["/write"]
        outage_start = time.time()
        ids = self._submit(self.options.batch)
        phase = Phase(fault=f"a downstream outage of {seconds:.0f} s (the breaker opens)",
                      tasks=len(ids))
        time.sleep(seconds)  # the outage lasts this long
        fault_end, outage_end = time.monotonic(), time.time()
        self.downstream.set("/write", "ok")
        self._wait(phase, ids, since=fault_end)
        opened = (Event.objects.filter(task_id__in=ids, type="breaker_opened")
                  .order_by("id").values_list("created_at", flat=True).first())
        while_open = (self.downstream.calls_between("/write", opened.timestamp(), outage_end)
                      if opened else 0)
        openings = _openings(self.tenant.pk, "tool", tool.name) - opened_before
        phase.downstream_calls = self.downstream.calls["/write"] - calls_before
        phase.breaker_openings = openings
        phase.calls_while_open = while_open
        phase.tether_did = (
            f"the breaker opened {openings} time(s)"
            + (f" {opened.timestamp() - outage_start:.1f} s into the outage" if opened else "")
            + f"; {while_open} calls reached the downstream while it was open (probes), "
            f"{phase.downstream_calls} in all for {len(ids)} writes; tasks waited, then went on")
        phase.promise_kept = (phase.finished == phase.tasks == phase.succeeded
                              and phase.duplicates == 0 and openings >= 1
                              and while_open <= 2 * len(ids))
        self.phases.append(phase)

    def _model_timeouts(self) -> None:
        seconds = self.options.outage_s
        self.downstream.stall_s = 3 * self.options.model_timeout_s
        calls_before = self.downstream.calls[MODEL_PATH]
        self.downstream.set(MODEL_PATH, "stall")
        ids = self._submit(self.options.batch, agent="drill-model")
        phase = Phase(fault=f"the model stalls past its {self.options.model_timeout_s:g} s "
                            f"timeout for {seconds:.0f} s", tasks=len(ids))
        time.sleep(seconds)  # the stall lasts this long
        fault_end = time.monotonic()
        self.downstream.set(MODEL_PATH, "ok")
        self._wait(phase, ids, since=fault_end)
        phase.downstream_calls = self.downstream.calls[MODEL_PATH] - calls_before
        phase.breaker_openings = _openings(self.tenant.pk, "model", "drill")
        self._finish(phase, f"timed out, retried with backoff ({phase.downstream_calls} model "
                            f"calls for {len(ids)} tasks, the model's breaker opened "
                            f"{phase.breaker_openings} time(s)), then finished")

    def _doubled(self, baseline_s: float) -> None:
        phase = self._batch("doubled concurrency", 2 * self.options.batch)
        self._finish(phase, f"ran twice the baseline's tasks in {phase.recover_s} s "
                            f"(baseline {baseline_s} s)")

    def _worker_killed(self) -> None:
        if not self.workers.procs:
            self.phases.append(Phase(fault="a worker killed", note="n/a: the drill started no "
                                     "worker of its own (--start-workers)"))
            return
        calls_before = self.downstream.calls["/write"]
        self.downstream.latency_s = 0.5  # calls in flight when the worker dies
        ids = self._submit(self.options.batch)
        phase = Phase(fault="a worker killed (SIGKILL)", tasks=len(ids))
        _wait_until(lambda: self.downstream.calls["/write"] > calls_before, 60)
        self.workers.kill_one()
        killed_at = time.monotonic()
        self.workers.start()
        self.downstream.latency_s = 0.0
        self._wait(phase, ids, since=killed_at)
        self._finish(phase, "leases expired, the sweep re-sent the tasks, the ledger kept "
                            "one effect per key")

    # --- helpers ---------------------------------------------------------------
    def _batch(self, fault: str, count: int) -> Phase:
        started = time.monotonic()
        ids = self._submit(count)
        phase = Phase(fault=fault, tasks=len(ids))
        self._wait(phase, ids, since=started)
        return phase

    def _finish(self, phase: Phase, did: str) -> None:
        phase.tether_did = did
        phase.promise_kept = (phase.finished == phase.tasks == phase.succeeded
                              and phase.duplicates == 0)
        self.phases.append(phase)

    def _wait(self, phase: Phase, ids: list[int], *, since: float) -> None:
        def statuses() -> Counter[str]:
            return Counter(Task.objects.filter(pk__in=ids).values_list("status", flat=True))

        done = _wait_until(lambda: sum(n for s, n in statuses().items() if s in FINISHED)
                           == len(ids), self.options.deadline_s)
        counts = statuses()
        phase.finished = sum(n for s, n in counts.items() if s in FINISHED)
        phase.succeeded = counts.get(TaskStatus.SUCCEEDED, 0)
        phase.duplicates = self.downstream.duplicates()
        if phase.finished == len(ids):
            phase.recover_s = round(done - since, 1)
        else:
            phase.note = f"unfinished after {self.options.deadline_s:.0f} s: {dict(counts)}"

    def _submit(self, count: int, *, json_tool: bool = False,
                agent: str = "drill") -> list[int]:
        ids = []
        for _ in range(count):
            if agent != "drill":  # the model decides: no script
                ids.append(task_submit(tenant_id=self.tenant.pk, requester_id=None,
                                       agent=agent, goal="drill: answer done", input={},
                                       actor=SYSTEM).task.pk)
                continue
            ref = uuid.uuid4().hex[:12]
            second = ({"tool": "drill_json", "args": {"ref": ref}} if json_tool
                      else {"tool": "drill_write", "args": {"ref": ref}})
            script = [{"tool": "drill_read", "args": {"ref": ref}}, second,
                      {"final": {"ref": ref}}]
            ids.append(task_submit(tenant_id=self.tenant.pk, requester_id=None, agent="drill",
                                   goal=f"drill {ref}", input={}, script=script,
                                   actor=SYSTEM).task.pk)
        return ids

    def _url(self, path: str) -> str:
        return self.downstream.url(self.options.advertise, path)

    def _tenant(self, name: str) -> Tenant:
        tenant = Tenant.objects.create(name=name)
        common = {"kind": "http", "args_schema": {"type": "object"}, "timeout_s": 3.0}
        # the write's breaker: opens after a few failures, probes again soon,
        # so the drill's outage sees it open, probe and close
        breaker = {"failures": 3, "cooldown_s": 1.0 if self.options.quick else 5.0,
                   "max_cooldown_s": 2.0 if self.options.quick else 10.0}
        for tool, path, side_effect, retries, extra in (
            ("drill_read", "/read", "read", 3, {}),
            ("drill_json", "/json", "read", 1, {}),
            ("drill_write", "/write", "idempotent_write", 10, {"breaker": breaker}),
        ):
            Tool.objects.create(tenant=tenant, name=tool, url=self._url(path),
                                side_effect=side_effect, max_retries=retries, **common, **extra)
        agent_seed(tenant_id=tenant.pk, name="drill", defaults={
            "tools": ["drill_read", "drill_json", "drill_write"], "on_exhaustion": "fail",
            "model": {"backend": "scripted", "name": "scripted"}})
        agent_seed(tenant_id=tenant.pk, name="drill-model", defaults={
            "tools": [], "on_exhaustion": "fail", "max_duration_s": 3600,
            "model": {"backend": "openai", "name": "drill", "base_url": self._url("/v1"),
                      "timeout_s": self.options.model_timeout_s, "max_retries": 1,
                      "breaker": breaker}})
        return tenant


def _openings(tenant_id: int, kind: str, name: str) -> int:
    return sum(Breaker.objects.filter(tenant_id=tenant_id, kind=kind, name=name)
               .values_list("opened_count", flat=True))


class DrillAborted(Exception):
    pass


def _wait_until(predicate: Any, timeout: float, interval: float = 0.2) -> float:
    """Poll `predicate` until true or `timeout` passes; returns the monotonic time."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(interval)
    return time.monotonic()


class DrillWorkers:
    """Celery workers the drill starts (and may kill): on the database and
    broker this process is configured with."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        hostname = f"drill-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        env = {**os.environ, "DATABASE_URL": _database_url(), "TETHER_RUNNER": "celery",
               "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
               "CELERY_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE}
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "prefork",
             "-c", "2", "-Q", settings.CELERY_TASK_DEFAULT_QUEUE, "-l", "warning",
             "-n", hostname, "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append((hostname, proc))

        def answers() -> bool:
            if proc.poll() is not None:
                raise DrillAborted(f"the drill's worker {hostname} exited at start")
            with app.connection_for_write() as conn:
                try:
                    return bool(app.control.ping(destination=[hostname], timeout=0.5,
                                                 connection=conn))
                except conn.connection_errors:
                    return False

        _wait_until(answers, 90)

    def kill_one(self) -> None:
        _, proc = self.procs.pop(0)
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for _, proc in self.procs:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        self.procs.clear()


def _database_url() -> str:
    """The database this process uses, as a URL for the workers it starts."""
    s = connection.settings_dict
    user, password = quote(s.get("USER") or ""), quote(s.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/" \
           f"{quote(s['NAME'])}"
