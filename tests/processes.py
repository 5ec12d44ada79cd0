"""Real processes for system tests: Celery workers (and beat) on the test
database and a real broker, and the embedded server as `scripts/start` runs it.

Each process runs in its own session (process group), so a test can kill it
the way a crash would (SIGKILL to the whole group: the worker, its pool
children and an embedded beat) and teardown never leaves one behind.

Fixtures (registered for every test by `tests/conftest.py`):

- `celery_workers` — needs `@pytest.mark.django_db(transaction=True)`. Points
  this process at the broker (`TETHER_RUNNER=celery`, so submissions go
  through Celery), purges the broker before and after, and gives a
  `CeleryWorkers` whose `start(beat=...)` starts a worker on pytest-django's
  test database and waits until it answers a ping. Parametrize it indirectly
  with a broker URL to use another broker (RabbitMQ).
- `pgbouncer` — a PgBouncer of the test's own in transaction mode in front of
  the test database's server; workers started with `pgbouncer.url(...)` as
  their DATABASE_URL and `TETHER_DB_POOLER=transaction` run through it.
- `embedded_server` — a factory: `embedded_server(database_path)` runs
  `scripts/start` (without pip) on a free port with a SQLite file, no broker
  and no keys (it generates them into the test's own `.tether/local.env`), and
  returns an `EmbeddedServer`.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from benchmarks.private_services import free_port, port_open
from tests.helpers import wait_for
from tests.isolation import per_worker_redis

__all__ = [
    "REDIS_BROKER_URL",
    "RABBITMQ_BROKER_URL",
    "Proc",
    "CeleryWorkers",
    "EmbeddedServer",
    "free_port",
    "free_port_run",
    "port_open",
    "celery_workers",
    "embedded_server",
    "PgBouncer",
    "pgbouncer",
    "require_service",
]

ROOT = Path(__file__).resolve().parent.parent
REDIS_BROKER_URL = per_worker_redis(
    os.environ.get("TETHER_TEST_BROKER_URL", "redis://127.0.0.1:6379/12"), role="broker")
RABBITMQ_BROKER_URL = os.environ.get("TETHER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
# What the worker runs with: a short lease and a fast sweep, so a crash is
# noticed within seconds instead of the production defaults (10 s, 2 s).
WORKER_KNOBS = {
    "TETHER_LEASE_TTL_S": "3",
    "TETHER_SWEEP_INTERVAL_S": "1",
    "TETHER_LEDGER_CLAIM_GRACE_S": "2",
}
START_TIMEOUT_S = 60.0


def free_port_run(count: int) -> int:
    """The first of COUNT consecutive free ports, for a server that binds
    BASE+offset itself. Chosen below the kernel's ephemeral range, where no
    outgoing connection or `bind(0)` is given a port: a `free_port()` + 1
    lies inside that range and was taken by one now and then under the suite."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    low = int(ephemeral[0])
    for _ in range(200):
        base = random.randrange(10_000, low - count)
        try:
            with ExitStack() as stack:
                for port in range(base, base + count):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def require_service(name: str, host: str, port: int) -> None:
    """Skip when an optional service is down, unless the run requires every
    service (`TETHER_REQUIRE_SERVICES=1`, set by scripts/test in CI)."""
    if port_open(host, port):
        return
    message = f"{name} is not running at {host}:{port}"
    if os.environ.get("TETHER_REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Proc:
    """A child process in its own process group, with its output in a file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group, as a crash would, and reap the leader."""
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


def _spawn(name: str, argv: list[str], *, env: dict[str, str], log_dir: Path) -> Proc:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(name=name, popen=popen, log_path=log_path)


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


# --- Celery ----------------------------------------------------------------------


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL for the database this process is connected to (the test DB)."""
    user = quote(settings_dict.get("USER") or "")
    password = quote(settings_dict.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or "5432"
    return f"postgres://{auth}{host}:{port}/{quote(settings_dict['NAME'])}"


def purge_broker(url: str, queue: str) -> None:
    """Forget every message: a Redis broker's whole (test) database, or the
    RabbitMQ queue."""
    if urlsplit(url).scheme in ("redis", "rediss"):
        import redis

        client = redis.Redis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()
        return
    from kombu import Connection, Queue

    # A queue that does not exist yet has nothing to purge.
    with Connection(url, connect_timeout=5) as conn, suppress(Exception):
        Queue(queue).bind(conn.default_channel).purge()


@contextmanager
def celery_app_on(broker_url: str) -> Iterator[Any]:
    """Point this process's Celery app at `broker_url`. The app caches its
    producer pool, taken from kombu's process-wide pools (one per broker URL,
    left open for the next test), so the app's reference is dropped on the
    way in and out."""
    from config.celery import app

    def reset_pool() -> None:
        app._pool = None
        app.amqp._producer_pool = None

    previous = app.conf.broker_url
    reset_pool()
    app.conf.broker_url = broker_url
    try:
        yield app
    finally:
        reset_pool()
        app.conf.broker_url = previous


@dataclass
class CeleryWorkers:
    """Starts real `celery -A config worker` processes on the test database."""

    broker_url: str
    database_url: str
    channel_layer_url: str
    queue: str
    log_dir: Path
    app: Any
    started: list[Proc] = field(default_factory=list)

    def start(
        self,
        *,
        beat: bool = False,
        pool: str = "prefork",
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        log_level: str = "warning",
    ) -> Proc:
        name = f"worker{len(self.started) + 1}-{uuid.uuid4().hex[:6]}"
        hostname = f"{name}@tether-test"
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-P",
            pool,
            "--concurrency",
            str(concurrency),
            "-Q",
            self.queue,
            "-l",
            log_level,
            "-n",
            hostname,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if beat:
            argv += ["-B", "-s", str(self.log_dir / f"{name}-beat-schedule")]
        child_env = _base_env()
        child_env.update(
            {
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "DATABASE_URL": self.database_url,
                "TETHER_RUNNER": "celery",
                "CELERY_BROKER_URL": self.broker_url,
                "CELERY_QUEUE": self.queue,
                "CHANNEL_LAYER_URL": self.channel_layer_url,
                **WORKER_KNOBS,
                **(env or {}),
            }
        )
        proc = _spawn(name, argv, env=child_env, log_dir=self.log_dir)
        self.started.append(proc)

        def answers() -> bool:
            if not proc.alive():
                raise AssertionError(f"celery worker {name} exited early:\n{proc.log_tail()}")
            # A connection of its own each time: a broker restarted by the test
            # (tests/system/test_chaos.py) leaves pooled connections dead.
            with self.app.connection_for_write() as conn:
                try:
                    return bool(self.app.control.ping(destination=[hostname], timeout=0.5,
                                                      connection=conn))
                except conn.connection_errors:
                    return False

        try:
            wait_for(
                answers,
                timeout=START_TIMEOUT_S,
                interval=0.2,
                message=f"worker {name} to answer a ping",
            )
        except AssertionError:
            proc.kill()
            raise
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.alive():
                proc.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail()}" for p in self.started)


@pytest.fixture
def celery_workers(
    request: pytest.FixtureRequest, transactional_db: None, settings: Any, tmp_path: Path
) -> Iterator[CeleryWorkers]:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.fail("real workers share the test database: it must be PostgreSQL, not SQLite")
    broker_url = getattr(request, "param", REDIS_BROKER_URL)
    scheme = urlsplit(broker_url).scheme
    if scheme.startswith("amqp"):
        parts = urlsplit(broker_url)
        require_service("RabbitMQ", parts.hostname or "127.0.0.1", parts.port or 5672)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    purge_broker(broker_url, queue)
    settings.TETHER_RUNNER = "celery"
    settings.CELERY_BROKER_URL = broker_url
    with celery_app_on(broker_url) as app:
        workers = CeleryWorkers(
            broker_url=broker_url,
            database_url=database_url(connection.settings_dict),
            channel_layer_url=settings.CHANNEL_LAYER_URL,
            queue=queue,
            log_dir=tmp_path,
            app=app,
        )
        try:
            yield workers
        finally:
            workers.stop_all()
            # Shown by pytest only when the test failed.
            print(workers.logs())
            purge_broker(broker_url, queue)


# --- the embedded server ----------------------------------------------------------


@dataclass
class EmbeddedServer:
    proc: Proc
    port: int
    database_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def embedded_server(tmp_path: Path) -> Iterator[Callable[..., EmbeddedServer]]:
    """`scripts/start` as a user runs it (minus pip): migrate, seed the demo,
    serve with daphne; embedded mode, so no broker and no Redis channel layer."""
    servers: list[EmbeddedServer] = []

    def start(
        database_path: Path | None = None, *, env: dict[str, str] | None = None
    ) -> EmbeddedServer:
        database_path = database_path or tmp_path / "tether.sqlite3"
        port = free_port()
        child_env = _base_env()
        for name in (
            "DJANGO_SETTINGS_MODULE",
            "CELERY_BROKER_URL",
            "CHANNEL_LAYER_URL",
            "TETHER_RUNNER",
            "TEST_DATABASE_NAME",
            # scripts/start makes its own keys and turns HTTPS enforcement off
            "SECRET_KEY",
            "TETHER_SECRETS_KEY",
            "TETHER_HTTPS",
        ):
            child_env.pop(name, None)
        child_env.update(
            {
                "TETHER_LOCAL_ENV": str(tmp_path / ".tether" / "local.env"),
                "DATABASE_URL": f"sqlite:///{database_path}",
                "PORT": str(port),
                "TETHER_SKIP_INSTALL": "1",
                "TETHER_VENV": str(Path(sys.executable).parent.parent),
                **(env or {}),
            }
        )
        proc = _spawn(
            f"server-{port}",
            ["bash", str(ROOT / "scripts" / "start")],
            env=child_env,
            log_dir=tmp_path,
        )
        server = EmbeddedServer(proc=proc, port=port, database_path=database_path)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            if server.proc.alive():
                server.proc.kill()
            print(f"--- {server.proc.name} ---\n{server.proc.log_tail()}")


# --- PgBouncer ---------------------------------------------------------------------

PGBOUNCER = "/usr/sbin/pgbouncer"  # Debian's package (scripts/test installs it)
PGBOUNCER_INI = """\
[databases]
* = host={host} port={port} user={user}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = {pool_size}
ignore_startup_parameters = extra_float_digits,options
logfile = {log}
"""


@dataclass
class PgBouncer:
    """A PgBouncer of the test's own in transaction mode, in front of the test
    database's server. `url(name)` is a DATABASE_URL through it."""

    proc: Proc
    port: int
    user: str

    def url(self, dbname: str) -> str:
        return f"postgres://{quote(self.user)}@127.0.0.1:{self.port}/{quote(dbname)}"


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode on a free port, with fewer server
    connections than clients (20), so that consecutive transactions of one
    client do land on different server connections."""
    from django.db import connection

    if not Path(PGBOUNCER).exists():
        pytest.fail(f"{PGBOUNCER} is missing: `apt-get install pgbouncer` (scripts/test does)")
    params = connection.settings_dict
    user = params.get("USER") or "postgres"
    # PgBouncer refuses to run as root: it drops to the database's user, who
    # must read its configuration and write its log.
    workdir = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
    workdir.chmod(0o777)
    port = free_port()
    ini = workdir / "pgbouncer.ini"
    ini.write_text(PGBOUNCER_INI.format(
        host=params.get("HOST") or "127.0.0.1", port=params.get("PORT") or 5432, user=user,
        listen=port, pool_size=20, log=workdir / "pgbouncer.log"))
    ini.chmod(0o644)
    argv = [PGBOUNCER, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(ini)]
    proc = _spawn(f"pgbouncer-{port}", argv, env=_base_env(), log_dir=workdir)
    try:
        wait_for(lambda: port_open("127.0.0.1", port) or _exited(proc), timeout=30,
                 message="PgBouncer to listen")
        yield PgBouncer(proc=proc, port=port, user=user)
    finally:
        if proc.alive():
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _exited(proc: Proc) -> bool:
    if not proc.alive():
        raise AssertionError(f"{proc.name} exited early:\n{proc.log_tail()}")
    return False
