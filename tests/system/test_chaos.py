"""Chaos, at a CI-friendly size, on a PostgreSQL cluster and a Redis of the
test's own (benchmarks/private_services.py), so restarting them disturbs
nothing else.

99 scripted tasks (a read, then a read, an idempotent write or a plain write
with a status query, all HTTP tools on a fake downstream that records every
effect), three real worker processes, no beat. At random moments (by the
share of tasks finished; the seed is printed, `TETHER_CHAOS_SEED` replays it):
three workers are killed with SIGKILL (a new one is started each time), the
PostgreSQL cluster restarts, Redis restarts (its queued messages are lost).

Then: every task SUCCEEDED (a plain write whose outcome is truly unknown may
wait for its reconciliation), no task lost, no write applied twice downstream,
each task's event versions contiguous and its log replaying to its status.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from benchmarks.private_services import private_postgres, private_redis, services_missing
from benchmarks.tcp_proxy import TcpProxy
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.helpers import wait_for
from tests.processes import ROOT, CeleryWorkers, _base_env, celery_app_on
from tests.system.chaos_driver import kind_of

pytestmark = [pytest.mark.worker, pytest.mark.timeout(600)]

TASKS = 99
WORKERS = 3
KILLS = 3
FINISH_TIMEOUT_S = 300.0
NETWORK_LATENCY_S = 0.05  # each way, between the workers and PostgreSQL and Redis
CUT_S = 5.0  # every connection dropped, new ones refused, this long
QUEUE = "tether-chaos"
DONE = {"SUCCEEDED", "FAILED", "CANCELED", "WAITING_FOR_RECONCILIATION", "WAITING_FOR_HUMAN"}


class Downstream:
    """The outside world: reads, an idempotent refund API (one effect per key),
    a plain notification API (every POST is an effect) and its status query."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.server = FakeToolServer()
        self._lock = threading.Lock()
        self.refunds: dict[str, str] = {}  # key -> ref
        self.notes: list[tuple[str, str]] = []  # (key, ref), every POST
        self.server.on("POST", "/orders", self._slow(lambda r: Reply(200, {"ref": r.body["ref"]})))
        self.server.on("POST", "/refunds", self._slow(self._refund))
        self.server.on("POST", "/notes", self._slow(self._note))
        self.server.on("GET", "/note-status/*", self._note_status)

    @property
    def base(self) -> str:
        return self.server.url("")

    def _slow(self, answer: Callable[[Recorded], Reply]) -> Callable[[Recorded], Reply]:
        """Calls take a while (0.3-1.2 s), so that faults meet calls in flight."""
        def slow(request: Recorded) -> Reply:
            with self._lock:
                latency = self.rng.uniform(0.3, 1.2)
            time.sleep(latency)  # the downstream's latency, not a synchronisation
            return answer(request)
        return slow

    def _refund(self, request: Recorded) -> Reply:
        key = request.headers["idempotency-key"]
        with self._lock:
            self.refunds.setdefault(key, request.body["ref"])
        return Reply(201, {"refund_id": f"rf-{key}"})

    def _note(self, request: Recorded) -> Reply:
        with self._lock:
            self.notes.append((request.headers["idempotency-key"], request.body["ref"]))
        return Reply(200, {"note_id": f"nt-{request.headers['idempotency-key']}"})

    def _note_status(self, request: Recorded) -> Reply:
        key = request.path.rsplit("/", 1)[1]
        with self._lock:
            sent = any(k == key for k, _ in self.notes)
        if sent:
            return Reply(200, {"state": "succeeded", "result": {"note_id": f"nt-{key}"}})
        return Reply(404, {"state": "not_found"})


def _driver(env: dict[str, str], *args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "tests.system.chaos_driver", *args], cwd=ROOT,
                         env=env, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-4000:]
    print(out.stderr.decode()[-1000:])
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def _counts(database_url: str) -> Counter[str] | None:
    try:
        with psycopg.connect(database_url, connect_timeout=2) as conn:
            rows = conn.execute("SELECT status, count(*) FROM tasks_app_task GROUP BY status")
            return Counter({status: n for status, n in rows})
    except psycopg.OperationalError:
        return None  # the cluster is restarting


def _require_binaries() -> None:
    missing = services_missing()
    if not missing:
        return
    if os.environ.get("TETHER_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the chaos test needs {', '.join(missing)}")
    pytest.skip(f"the chaos test needs {', '.join(missing)}")


def test_tasks_survive_worker_kills_and_database_and_broker_restarts(tmp_path):
    _chaos_run(tmp_path, ["kill"] * KILLS + ["postgres", "redis"])


def test_tasks_survive_a_slow_network_cut_twice(tmp_path):
    """The workers reach PostgreSQL and Redis through a proxy that adds 50 ms
    each way, and twice drops every connection for 5 s (longer than a test
    worker's lease: a cut-off worker's late results are fenced)."""
    _chaos_run(tmp_path, ["cut", "cut"], latency_s=NETWORK_LATENCY_S)


def _chaos_run(tmp_path: Any, faults: list[str], *, latency_s: float | None = None) -> None:
    _require_binaries()
    seed = int(os.environ.get("TETHER_CHAOS_SEED") or time.time())
    rng = random.Random(seed)
    rng.shuffle(faults)
    # each fault fires once this share of the tasks has finished
    at = sorted(rng.uniform(0.05, 0.7) for _ in faults)
    print(f"chaos seed {seed}: {list(zip(faults, [round(a, 2) for a in at], strict=True))}")

    with private_postgres() as pg, private_redis() as redis, _proxies(pg, redis,
                                                                       latency_s) as proxies:
        pg.create_database("tether_chaos")
        database_url, broker_url = pg.url("tether_chaos"), redis.url(0)
        # what the workers are given: through the proxies, if there are any
        via = (lambda url, i: proxies[i].url(url)) if proxies else (lambda url, i: url)
        downstream = Downstream(random.Random(seed))
        env = _base_env()
        env.update({"DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": database_url,
                    "CELERY_BROKER_URL": broker_url, "CELERY_QUEUE": QUEUE,
                    "TETHER_RUNNER": "celery", "CHANNEL_LAYER_URL": redis.url(1)})
        _driver(env, "setup", downstream.base)

        with celery_app_on(broker_url) as app:
            workers = CeleryWorkers(broker_url=via(broker_url, 1),
                                    database_url=via(database_url, 0),
                                    channel_layer_url=via(redis.url(1), 1), queue=QUEUE,
                                    log_dir=tmp_path, app=app)
            try:
                # Submitted before any worker runs, so the faults (due by the share
                # of tasks finished) meet work in flight however slowly the
                # submission goes on a loaded machine.
                task_ids = _driver(env, "submit", str(TASKS))
                assert len(task_ids) == TASKS
                chaos = Faults(workers, pg, redis, rng, proxies)
                # the first worker runs while the others start (slow on a loaded
                # machine): the faults begin with the first one
                for n in range(WORKERS):
                    chaos.start_worker(wait=n == 0)
                started = time.monotonic()
                done_log: list[str] = []

                def progress() -> bool:
                    counts = _counts(database_url)
                    if counts is None:
                        return False
                    finished = sum(n for status, n in counts.items() if status in DONE)
                    while faults and finished >= at[0] * TASKS:
                        fault = faults.pop(0)
                        at.pop(0)
                        # a fault must meet work in flight, or it proves nothing
                        assert finished < TASKS, f"{fault} came after the run: {done_log}"
                        chaos.inject(fault)
                        done_log.append(f"{fault} at {finished}/{TASKS}, "
                                        f"{time.monotonic() - started:.1f}s")
                    return not faults and finished == TASKS

                wait_for(progress, timeout=FINISH_TIMEOUT_S, interval=0.2,
                         message=f"every task to finish (faults so far: {done_log})")
                print(f"chaos: {TASKS} tasks in {time.monotonic() - started:.1f}s; {done_log}")
                for thread in chaos.starters:
                    thread.join(timeout=120)
                assert not chaos.errors, chaos.errors
                cuts = sum(entry.startswith("cut ") for entry in done_log)
                # the workers went through the proxies, and reconnected after each cut
                assert all(p.cuts == cuts and p.connections > 0 for p in proxies), done_log
                report = _driver(env, "report")
            finally:
                workers.stop_all()
                print(workers.logs())
                downstream.server.close()

    _assert_promises_kept(task_ids, report, downstream)


@contextmanager
def _proxies(pg: Any, redis: Any, latency_s: float | None) -> Iterator[list[TcpProxy]]:
    """[PostgreSQL's, Redis's] proxies with `latency_s`, or none."""
    if latency_s is None:
        yield []
        return
    proxies = [TcpProxy(pg.port, latency_s=latency_s), TcpProxy(redis.port, latency_s=latency_s)]
    try:
        yield proxies
    finally:
        for proxy in proxies:
            proxy.close()


class Faults:
    """Injects the faults; a killed worker's replacement starts in the
    background, so the run goes on (and the next fault can meet it) meanwhile."""

    def __init__(self, workers: CeleryWorkers, pg: Any, redis: Any, rng: random.Random,
                 proxies: list[TcpProxy]) -> None:
        self.workers, self.pg, self.redis, self.rng = workers, pg, redis, rng
        self.proxies = proxies
        self.ready: list[Any] = []
        self.starters: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start_worker(self, *, wait: bool) -> None:
        def start() -> None:
            try:
                self.ready.append(self.workers.start())
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)

        if wait:
            start()
            return
        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        self.starters.append(thread)

    def inject(self, fault: str) -> None:
        if fault == "kill":
            alive = [p for p in self.ready if p.alive()]
            if alive:  # none while every worker is still starting
                self.rng.choice(alive).kill()
            self.start_worker(wait=False)
        elif fault == "cut":
            for proxy in self.proxies:
                proxy.cut(CUT_S)
        elif fault == "postgres":
            self.pg.restart()
        else:
            self.redis.restart()


def _assert_promises_kept(task_ids: list[int], report: list[dict[str, Any]],
                          downstream: Downstream) -> None:
    # No task lost: every submitted task is there, and finished.
    assert sorted(r["id"] for r in report) == sorted(task_ids)
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in report:
        by_kind[kind_of(int(row["goal"].split()[-1]))].append(row)
    for kind, rows in by_kind.items():
        allowed = {"SUCCEEDED", "WAITING_FOR_RECONCILIATION"} if kind == "plain" else {"SUCCEEDED"}
        bad = [(r["id"], r["status"]) for r in rows if r["status"] not in allowed]
        assert not bad, (kind, bad)
    broken = [(r["id"], r["history"]) for r in report if r["history"]]
    assert not broken, broken

    # No write applied twice: one refund per task (one key, replays included) ...
    refunds_per_ref = Counter(downstream.refunds.values())
    assert all(n == 1 for n in refunds_per_ref.values()), refunds_per_ref.most_common(3)
    succeeded_refunds = {f"ref-{r['goal'].split()[-1]}" for r in by_kind["idempotent"]}
    assert set(refunds_per_ref) == succeeded_refunds
    # ... and a plain write never replayed: at most one POST per task and per key.
    notes_per_ref = Counter(ref for _, ref in downstream.notes)
    notes_per_key = Counter(key for key, _ in downstream.notes)
    assert all(n == 1 for n in notes_per_ref.values()), notes_per_ref.most_common(3)
    assert all(n == 1 for n in notes_per_key.values()), notes_per_key.most_common(3)
