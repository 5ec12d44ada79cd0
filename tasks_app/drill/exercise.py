"""The fault drill: phases run one after the other in a tenant of the drill's
own, each injecting one fault into the drill's downstream (or its workers)
while a batch of scripted tasks runs, then checking Tether's promises: every
task finishes (none lost, none hanging), no write applied twice downstream.

Phases: a baseline; a tool answering invalid JSON; a downstream answering 500
for a while; twice the baseline's tasks at once; a worker killed with SIGKILL
(only when the drill started workers itself, `--start-workers`). Two phases
report `n/a` for now, each with its hook below: model timeouts (the drill's
tasks use the scripted model; `model_timeout_phase`) and a downstream outage
long enough to open a circuit breaker (breakers are not merged yet;
`breaker_phase`).
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

from config.celery import app
from tools_app.models import Tool
from tools_app.outbound.policy import url_problem

from ..machine import TERMINAL, TaskStatus
from ..models import Step, Task, Tenant
from ..services.actors import SYSTEM
from ..services.releases import agent_seed
from ..services.tasks import task_submit
from .downstream import Downstream

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
            self.phases.append(breaker_phase())
            self.phases.append(model_timeout_phase())
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

    def _submit(self, count: int, *, json_tool: bool = False) -> list[int]:
        ids = []
        for _ in range(count):
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
        for tool, path, side_effect, retries in (
            ("drill_read", "/read", "read", 3),
            ("drill_json", "/json", "read", 1),
            ("drill_write", "/write", "idempotent_write", 10),
        ):
            Tool.objects.create(tenant=tenant, name=tool, url=self._url(path),
                                side_effect=side_effect, max_retries=retries, **common)
        agent_seed(tenant_id=tenant.pk, name="drill", defaults={
            "tools": ["drill_read", "drill_json", "drill_write"], "on_exhaustion": "fail",
            "model": {"backend": "scripted", "name": "scripted"}})
        return tenant


def breaker_phase() -> Phase:
    """Hook: once circuit breakers exist, hold the downstream down past the
    breaker's threshold, count calls while it is open, and check every task
    succeeds after the outage."""
    return Phase(fault="a downstream outage long enough to open the breaker",
                 note="breaker: n/a (circuit breakers are not in this build)")


def model_timeout_phase() -> Phase:
    """Hook: point a drill agent at a model endpoint of the drill's own that
    answers past the agent's timeout, and check the tasks go on."""
    return Phase(fault="model timeouts",
                 note="n/a: the drill's tasks use the scripted model in this build")


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
