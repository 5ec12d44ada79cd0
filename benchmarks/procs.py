"""The processes the bench starts: Celery workers on the bench's own queue and
a daphne server. Each runs in its own session so it can be stopped as a group
(by the id the bench started it with), and is always stopped on the way out.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .config import QUEUE

BASE_DIR = Path(settings.BASE_DIR)
BIN = Path(sys.executable).parent


def _spawn(args: list[str], env: dict[str, str], log_name: str, log_dir: Path) -> subprocess.Popen:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / log_name, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        args, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen, *, timeout: float = 15.0) -> None:
    """Warm shutdown (SIGTERM), then SIGKILL of the process group we started."""
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children of a prefork pool, if any are left
    proc.wait(5)


def purge_queue() -> int:
    """Drop messages a previous (aborted) run may have left on the bench queue."""
    from config.celery import app

    with app.connection_for_write() as conn:
        return conn.default_channel.queue_purge(QUEUE) or 0


@dataclass(frozen=True)
class Workers:
    node: str  # the Celery node name (for remote control)
    pgid: int  # the process group of the node and its pool processes

    def cpu_s(self) -> float:
        """CPU seconds (user + system) used so far by the node's live processes."""
        return sum(cpu_by_process(lambda pid, pgrp, comm: pgrp == self.pgid).values())

    def consumer_cpu_s(self) -> float:
        """The node's own process: Celery's consumer (broker I/O, dispatch to the pool)."""
        return sum(cpu_by_process(lambda pid, pgrp, comm: pid == self.pgid).values())


def server_cpu_s(name: str) -> float:
    """CPU seconds used so far by the processes named `name` (postgres,
    redis-server), the ended ones included: a PostgreSQL backend whose
    connection closed during a measurement takes its CPU with it, unless its
    parent's count of its ended children is added (`cpu_by_process`)."""
    return sum(cpu_by_process(lambda pid, pgrp, comm: comm == name, ended_children=True).values())


def cpu_by_process(wanted: Callable[[int, int, str], bool], *,
                   ended_children: bool = False) -> dict[int, float]:
    """CPU seconds (user + system) of each live process that `wanted(pid, pgrp, comm)`;
    with `ended_children`, plus those of its children that ended (and were waited for)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                head, tail = fh.read().rsplit(")", 1)
        except OSError:
            continue  # the process ended meanwhile
        comm, fields = head.split("(", 1)[1], tail.split()
        # after the command name: state, ppid, pgrp, ..., utime (12th), stime (13th)
        if wanted(int(entry), int(fields[2]), comm):
            used = int(fields[11]) + int(fields[12])  # utime, stime
            if ended_children:
                used += int(fields[13]) + int(fields[14])  # cutime, cstime
            found[int(entry)] = used / ticks
    return found


def machine_cpu_ticks() -> tuple[int, int, int]:
    """(busy, total, stolen) jiffies of all CPUs since boot, from /proc/stat.
    Stolen: time the hypervisor gave this VM's virtual CPUs to someone else."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    return sum(values) - idle, sum(values), steal


def busy_pct(before: tuple[int, int, int], after: tuple[int, int, int]) -> float | None:
    total = after[1] - before[1]
    return round(100.0 * (after[0] - before[0]) / total, 1) if total else None


def steal_pct(before: tuple[int, int, int], after: tuple[int, int, int]) -> float | None:
    total = after[1] - before[1]
    return round(100.0 * (after[2] - before[2]) / total, 1) if total else None


@contextmanager
def celery_workers(env: dict[str, str], *, concurrency: int, log_dir: Path) -> Iterator[Workers]:
    """One `celery worker` node with `concurrency` prefork processes on the bench queue."""
    from config.celery import app

    node = f"bench-{os.getpid()}@{socket.gethostname()}"
    proc = _spawn(
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "-Q",
            QUEUE,
            "-n",
            node,
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
        ],
        env,
        "celery-worker.log",
        log_dir,
    )
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[node], timeout=0.5):
            if proc.poll() is not None:
                raise RuntimeError(f"the Celery worker exited ({proc.returncode}); see {log_dir}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Celery worker did not answer a ping in 60 s; see {log_dir}"
                )
        yield Workers(node=node, pgid=proc.pid)
    finally:
        stop(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def daphne_server(env: dict[str, str], *, log_dir: Path) -> Iterator[str]:
    """The ASGI application under daphne; yields its base URL."""
    port = free_port()
    with http_server([str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                      "config.asgi:application"], env, port=port, what="daphne",
                     log_dir=log_dir) as base:
        yield base


@contextmanager
def http_server(args: list[str], env: dict[str, str], *, port: int, what: str,
                log_dir: Path) -> Iterator[str]:
    """A server process (its log `{what}.log`), once it answers on `port`;
    yields its base URL, and stops it after."""
    proc = _spawn(args, env, f"{what.replace(' ', '-')}.log", log_dir)
    base = f"http://127.0.0.1:{port}"
    try:
        await_http(proc, base, what=what, log_dir=log_dir)
        yield base
    finally:
        stop(proc)


def await_http(proc: subprocess.Popen, base: str, *, what: str, log_dir: Path) -> None:
    """Wait (60 s at most) until the server `proc` started answers at `base`."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}); see {log_dir}")
        try:
            httpx.get(base + "/accounts/login/", timeout=1.0)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer in 60 s; see {log_dir}") from None
            time.sleep(0.1)  # polling a starting server, with a deadline
