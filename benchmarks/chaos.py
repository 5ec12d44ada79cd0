"""The chaos benchmark (`manage.py bench --only chaos`): `tasks` tasks (1,000
by default) through real Celery workers, once undisturbed, then again while
`kills` workers are killed with SIGKILL (each replaced), PostgreSQL restarts
once and Redis restarts once (losing every queued message), at random moments
(by the share of tasks finished; the seed is printed, `--seed` replays it).

Everything runs on a PostgreSQL cluster and a `redis-server` of the bench's
own (`private_services`), so the restarts disturb nothing else. Each task is
a read, then a read, an idempotent write or a plain write with a status query
(`chaos_world`), on the drill's downstream (`tasks_app.drill.downstream`),
which records every effect.

Figures: lost tasks (submitted, not finished when the run ends: target 0),
duplicate effects (a second effect downstream for one task: target 0),
histories with a gap, and the chaos run's time beside the undisturbed run's
(target: within 3x).

With `network`, the faults are the network's instead: the chaos run's
workers reach PostgreSQL and Redis through a TCP proxy each
(`benchmarks.tcp_proxy`) that adds 50 ms each way, and that twice drops every
connection and refuses new ones for 5 s, longer than a lease (target: 0
lost, 0 duplicates, within 2x the undisturbed run, which goes through the
same proxies: the slow network is the setting, the cuts are the faults).

The workers run with production settings unless the environment says
otherwise (TETHER_LEASE_TTL_S, TETHER_SWEEP_INTERVAL_S, ...).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from accounts_app.models import Tenant
from tasks_app.drill.downstream import Downstream
from tasks_app.models import Task

from .config import bench_env
from .private_services import (
    PrivatePostgres,
    PrivateRedis,
    private_postgres,
    private_redis,
    services_missing,
    wait_for,
)
from .procs import BASE_DIR
from .tcp_proxy import TcpProxy

QUEUE = "tether-chaos-bench"
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED", "WAITING_FOR_RECONCILIATION",
            "WAITING_FOR_HUMAN")
LATENCY_S = (0.1, 0.6)  # each downstream call's latency: faults meet calls in flight
NETWORK_LATENCY_S = 0.05  # each way, through the proxies (`network`)
CUT_S = 5.0  # each cut of the network
RATIO_TARGET = {False: 3.0, True: 2.0}  # the chaos run's time over the undisturbed run's
ENV = {"TETHER_EGRESS_ALLOW": "127.0.0.1"}


def run_chaos(*, tasks: int, kills: int, workers: int, seed: int | None, log_dir: Path,
              say: Callable[[str], None], network: bool = False) -> dict[str, Any]:
    missing = services_missing()
    if missing:
        raise RuntimeError(f"the chaos benchmark needs {', '.join(missing)}")
    seed = int(time.time()) if seed is None else seed
    rng = random.Random(seed)
    faults = ["cut", "cut"] if network else ["kill"] * kills + ["postgres", "redis"]
    rng.shuffle(faults)
    # each fault fires once this share of the chaos run's tasks has finished
    at = sorted(rng.uniform(0.05, 0.8) for _ in faults)
    plan = list(zip(faults, [round(a, 3) for a in at], strict=True))
    say(f"chaos: seed {seed}, {tasks} tasks, {workers} workers, faults {plan}")
    with private_postgres() as pg, private_redis() as redis, _proxies(pg, redis,
                                                                     network) as proxies:
        pg.create_database("tether_chaos")
        env = bench_env(pg.url("tether_chaos"), CELERY_BROKER_URL=redis.url(0),
                        CHANNEL_LAYER_URL=redis.url(1), CELERY_QUEUE=QUEUE, **ENV)
        downstream = Downstream(seed=seed)
        downstream.latency_range = LATENCY_S
        nodes = ChaosWorkers(env, log_dir, rng)
        if proxies:  # both runs' workers go through the proxies; only the chaos run's are cut
            nodes.env = bench_env(
                proxies[0].url(pg.url("tether_chaos")),
                CELERY_BROKER_URL=proxies[1].url(redis.url(0)),
                CHANNEL_LAYER_URL=proxies[1].url(redis.url(1)), CELERY_QUEUE=QUEUE, **ENV)
            nodes.proxies = proxies
        try:
            _world(env, "setup", downstream.url("127.0.0.1", ""), "baseline", "chaos")
            say(f"chaos: the undisturbed run, {tasks} tasks ...")
            baseline = _round(env, pg, redis, nodes, workers, "baseline", tasks, [], say)
            say(f"  {baseline['run_s']} s")
            nodes.stop_all()
            say(f"chaos: the same {tasks} tasks under {len(plan)} faults ...")
            chaos = _round(env, pg, redis, nodes, workers, "chaos", tasks, plan, say)
            say(f"  {chaos['run_s']} s")
            duplicates = downstream.duplicates()
        finally:
            nodes.stop_all()
            downstream.close()
    ratio = round(chaos["run_s"] / baseline["run_s"], 2) if baseline["run_s"] else None
    doc: dict[str, Any] = {
        "seed": seed, "tasks": tasks, "workers": workers, "faults": plan, "network": network,
        "ratio_target": RATIO_TARGET[network],
        "proxied_connections": [p.connections for p in proxies],
        "knobs": {k: os.environ.get(k, "default") for k in (
            "TETHER_LEASE_TTL_S", "TETHER_SWEEP_INTERVAL_S", "TETHER_MAX_RUNNING_PER_TENANT")},
        "baseline": baseline, "chaos": chaos,
        "lost": chaos["lost"] + baseline["lost"], "duplicate_effects": duplicates,
        "ratio_to_undisturbed": ratio, "worker_errors": nodes.errors,
    }
    doc["target_met"] = (doc["lost"] == 0 and duplicates == 0 and ratio is not None
                         and ratio <= RATIO_TARGET[network] and not chaos["history_gaps"])
    return doc


def _round(env: dict[str, str], pg: PrivatePostgres, redis: PrivateRedis,
           nodes: ChaosWorkers, workers: int, tenant: str, tasks: int,
           plan: list[tuple[str, float]], say: Callable[[str], None]) -> dict[str, Any]:
    """Submit the tasks, inject the faults as their shares of tasks finish, wait
    for every task to finish (or the deadline: those left are lost)."""
    pending = list(plan)
    injected: list[str] = []
    # Submitted with no worker running, then the workers start side by side: the
    # faults (due by the share of tasks finished) meet work in flight however
    # slowly the submission goes, and both runs start from the same point, the
    # first worker ready with every task queued.
    submitting = time.monotonic()
    ids = _world(env, "submit", tenant, str(tasks))
    submitted_s = time.monotonic() - submitting
    for _ in range(workers):
        nodes.start_later()
    wait_for(lambda: nodes.ready or nodes.errors, timeout=300, message="a worker")
    if nodes.errors:
        raise RuntimeError(f"a worker did not start: {nodes.errors}")
    started = time.monotonic()
    deadline = time.monotonic() + max(900.0, 3 * tasks)
    finished = 0
    while time.monotonic() < deadline:
        counts = _counts(pg, tenant)
        if counts is not None:
            finished = sum(n for status, n in counts.items() if status in FINISHED)
            while pending and finished >= pending[0][1] * tasks:
                fault, _ = pending.pop(0)
                nodes.inject(fault, pg, redis)
                injected.append(f"{fault} at {finished}/{tasks}, "
                                f"{time.monotonic() - started:.1f} s")
                say(f"  {injected[-1]}")
            if finished >= tasks and not pending:
                break
        time.sleep(0.25)  # the bench's pace of polling, not a synchronisation
    run_s = round(time.monotonic() - started, 1)
    report = _world(env, "report", tenant)
    done = sum(n for s, n in report["statuses"].items() if s in FINISHED)
    return {"tasks": tasks, "submitted_s": round(submitted_s, 1), "run_s": run_s,
            "statuses": report["statuses"], "lost": tasks - done,
            "missing_rows": len(set(ids) - set(report["ids"])),
            "history_gaps": report["history_gaps"][:20], "faults": injected}


@contextmanager
def _proxies(pg: PrivatePostgres, redis: PrivateRedis, network: bool) -> Iterator[list[TcpProxy]]:
    """[PostgreSQL's, Redis's] proxies, slow by `NETWORK_LATENCY_S`; none without `network`."""
    if not network:
        yield []
        return
    proxies = [TcpProxy(pg.port, latency_s=NETWORK_LATENCY_S),
               TcpProxy(redis.port, latency_s=NETWORK_LATENCY_S)]
    try:
        yield proxies
    finally:
        for proxy in proxies:
            proxy.close()


def _world(env: dict[str, str], *args: str) -> Any:
    """`chaos_world` in a process of its own, on the private database."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.chaos_world", *args],
                         cwd=BASE_DIR, env=env, capture_output=True, timeout=1800, check=False)
    if out.returncode:
        raise RuntimeError(f"chaos_world {args[0]} failed:\n{out.stderr.decode()[-4000:]}")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def _counts(pg: PrivatePostgres, tenant: str) -> dict[str, int] | None:
    try:
        with psycopg.connect(pg.url("tether_chaos"), connect_timeout=2) as conn:
            rows = conn.execute(
                f"SELECT t.status, count(*) FROM {Task._meta.db_table} t "
                f"JOIN {Tenant._meta.db_table} n "
                "ON n.id = t.tenant_id WHERE n.name = %s GROUP BY t.status", (tenant,))
            return {status: n for status, n in rows}
    except psycopg.OperationalError:
        return None  # the cluster is restarting


class ChaosWorkers:
    """`celery worker` nodes on the private services. A node is ready when its
    log says so (`-l info`); a killed node's replacement starts in the
    background, so the run (and the next fault) goes on meanwhile."""

    def __init__(self, env: dict[str, str], log_dir: Path, rng: random.Random) -> None:
        self.env, self.log_dir, self.rng = env, log_dir, rng
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ready: list[subprocess.Popen[bytes]] = []
        self.starters: list[threading.Thread] = []
        self.errors: list[str] = []
        self.proxies: list[TcpProxy] = []  # the network's, to cut (`network`)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def launch(self) -> tuple[Path, subprocess.Popen[bytes]]:
        node = f"chaos-{uuid.uuid4().hex[:6]}@tether-bench"
        log_path = self.log_dir / f"{node}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "prefork",
                 "-c", "1", "-Q", QUEUE, "-l", "info", "-n", node, "--without-gossip",
                 "--without-mingle", "--without-heartbeat"],
                cwd=BASE_DIR, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return log_path, proc

    def wait_ready(self, log_path: Path, proc: subprocess.Popen[bytes]) -> None:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited at start; see {log_path}")
            return b" ready." in log_path.read_bytes()

        wait_for(ready, timeout=300, interval=0.2, message=f"the worker of {log_path}")
        self.ready.append(proc)

    def start_later(self) -> None:
        def start() -> None:
            try:
                self.wait_ready(*self.launch())
            except Exception as exc:  # noqa: BLE001 - reported in the figures
                self.errors.append(str(exc))

        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        self.starters.append(thread)

    def inject(self, fault: str, pg: PrivatePostgres, redis: PrivateRedis) -> None:
        if fault == "cut":
            for proxy in self.proxies:
                proxy.cut(CUT_S)
        elif fault == "postgres":
            pg.restart()
        elif fault == "redis":
            redis.restart()
        else:
            alive = [proc for proc in self.ready if proc.poll() is None]
            if alive:
                victim = self.rng.choice(alive)
                self.ready.remove(victim)
                _kill(victim)
            self.start_later()

    def join_starters(self) -> None:
        for thread in self.starters:
            thread.join(timeout=300)
        self.starters.clear()

    def stop_all(self) -> None:
        self.join_starters()
        for proc in self.procs:
            _kill(proc)
        self.ready.clear()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the node's process group (the node and its pool), as a crash."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def chaos_table(doc: dict[str, Any]) -> str:
    base, chaos = doc["baseline"], doc["chaos"]
    rows = [
        ("tasks / workers", f"{doc['tasks']} / {doc['workers']} nodes (seed {doc['seed']})"),
        ("faults", "; ".join(chaos["faults"]) + (
            f" (through proxies adding {NETWORK_LATENCY_S * 1000:g} ms each way; "
            f"{doc['proxied_connections']} connections)" if doc["network"] else "")),
        ("lost tasks", f"{doc['lost']} (target 0)"),
        ("duplicate effects", f"{doc['duplicate_effects']} (target 0)"),
        ("histories with a gap", str(len(chaos["history_gaps"]))),
        ("statuses (chaos)", json.dumps(chaos["statuses"])),
        ("undisturbed run", f"{base['run_s']} s from the last submission "
                            f"(submitting took {base['submitted_s']} s)"),
        ("chaos run", f"{chaos['run_s']} s (submitting took {chaos['submitted_s']} s)"),
        ("chaos / undisturbed",
         f"{doc['ratio_to_undisturbed']}x (target within {doc['ratio_target']:g}x)"),
        ("knobs", json.dumps(doc["knobs"])),
        ("target", "met" if doc["target_met"] else "NOT MET"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
