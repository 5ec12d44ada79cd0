"""A PostgreSQL cluster and a `redis-server` of the caller's own, on free
ports, so the chaos benchmark (`chaos`) and the chaos test
(tests/system/test_chaos.py) can restart them without disturbing anything
else on the machine.

The cluster is made with the Debian binaries (`initdb`, `pg_ctl` under
/usr/lib/postgresql/*/bin), run as the `postgres` user, trust auth, a private
socket directory, fsync off (the data dies with the run). Redis keeps nothing
on disk: a restart loses every queued message, as a broker without
persistence would.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PrivatePostgres", "PrivateRedis", "private_postgres", "private_redis", "free_port",
           "port_open", "wait_for", "services_missing"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(predicate: Callable[[], object], *, timeout: float, message: str,
             interval: float = 0.1) -> None:
    """Poll `predicate` until it is true; RuntimeError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {message}")
        time.sleep(interval)  # polling with a deadline


def services_missing() -> list[str]:
    """What this machine lacks to run private services (empty: nothing)."""
    return [name for name, found in (
        ("PostgreSQL's initdb", glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        ("redis-server", shutil.which("redis-server"))) if not found]


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"no {name} under /usr/lib/postgresql/*/bin")
    return found[-1]


def _as_postgres(argv: list[str]) -> list[str]:
    return argv if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


@dataclass
class PrivatePostgres:
    root: Path
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        subprocess.run(_as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), *args]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
                   " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._ctl("-l", str(self.root / "server.log"), "-o", options, "-w", "start")
        wait_for(lambda: port_open("127.0.0.1", self.port), timeout=30,
                 message="the private PostgreSQL to listen")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "stop")

    def restart(self) -> None:
        """Every client connection is cut; the data stays."""
        self.stop("fast")
        self.start()

    def create_database(self, name: str) -> None:
        subprocess.run(_as_postgres([_pg_bin("createdb"), "-h", "127.0.0.1", "-p",
                                     str(self.port), "-U", "postgres", name]),
                       check=True, timeout=60)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = PrivatePostgres(root=root, port=free_port())
    subprocess.run(_as_postgres([_pg_bin("initdb"), "-D", str(cluster.data), "-A", "trust",
                                 "-U", "postgres", "--no-sync", "-E", "UTF8"]),
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    cluster.start()
    try:
        yield cluster
    finally:
        with suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class PrivateRedis:
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: port_open("127.0.0.1", self.port), timeout=30,
                 message="the private Redis to listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        """Killed and started again: every queued message is gone."""
        self.stop()
        self.start()


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis(port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
