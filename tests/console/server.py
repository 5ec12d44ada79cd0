"""A real ASGI server (daphne) for the browser tests, serving pytest-django's
test database with WebSockets, the Redis channel layer and the manual runner.

The tests drive the runner in their own process (`tests.helpers.drive`, one
step at a time with `step_once`); each committed event is published from the
test process through Redis to this server's consumers: the real path.
`stop()` then `start()` on the same port drops every socket, as a restart or
a network cut would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.request import urlopen

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


class DaphneServer:
    def __init__(self, *, port: int, env: dict[str, str], log_path: Path) -> None:
        self.port = port
        self.env = env
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "config.asgi:application",
                ],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._ready, timeout=30, interval=0.1, message=f"daphne on port {self.port}")

    def _ready(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"daphne exited early:\n{self.log_tail()}")
        try:
            with urlopen(self.url + "/accounts/login/", timeout=1) as res:  # noqa: S310 - local test server
                return res.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.popen is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        self.popen = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


@contextmanager
def daphne_servers(
    log_dir: Path, base_env: dict[str, str]
) -> Iterator[Callable[..., DaphneServer]]:
    """`start(**env)` serves the application with daphne on a free port: this
    process's environment (less pytest's), `base_env`, then `env`, the manual
    runner and no broker. Every server started is stopped on exit, its log
    tail printed (pytest shows it when the test fails)."""
    from tests.processes import free_port

    servers: list[DaphneServer] = []

    def start(**env: str) -> DaphneServer:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        child_env.update({
            "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "tests.settings", "TETHER_RUNNER": "manual",
            "CELERY_BROKER_URL": "", "ALLOWED_HOSTS": "127.0.0.1,localhost",
            **base_env, **env,
        })
        server = DaphneServer(port=free_port(), env=child_env,
                              log_path=log_dir / f"daphne-{len(servers)}.log")
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
            print(server.log_tail())
