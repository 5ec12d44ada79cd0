"""A real ASGI server (uvicorn, `config.asgi`) on the test database, and a
Server-Sent Events reader of its streams: what a client of
`GET /api/v1/tasks/{id}/stream` sees, over a real socket."""
from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.processes import Proc, _base_env, _spawn, database_url, free_port, port_open


@dataclass
class AsgiServer:
    proc: Proc
    port: int

    def stream(self, path: str, *, key: str, headers: dict[str, str] | None = None) -> SSEReader:
        return SSEReader(self.port, path, {"Authorization": f"Token {key}", **(headers or {})})


@pytest.fixture
def asgi_server(transactional_db: None, settings: Any, tmp_path: Path) -> Iterator[AsgiServer]:
    """uvicorn serving `config.asgi` on this test's database and channel layer
    (the runner is the test's own: `TETHER_RUNNER=manual`)."""
    from django.db import connection

    port = free_port()
    env = _base_env()
    env.update({"DJANGO_SETTINGS_MODULE": "tests.settings", "TETHER_RUNNER": "manual",
                "DATABASE_URL": database_url(connection.settings_dict),
                "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL})
    argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
            "--lifespan", "on", "config.asgi:application"]
    proc = _spawn(f"uvicorn-{port}", argv, env=env, log_dir=tmp_path)

    def up() -> bool:
        assert proc.alive(), proc.log_tail()
        return port_open("127.0.0.1", port)

    try:
        wait_for(up, timeout=60, interval=0.1, message=f"uvicorn on port {port}")
        yield AsgiServer(proc, port)
    finally:
        if proc.alive():
            proc.kill()
        print(f"--- {proc.name} ---\n{proc.log_tail()}")


@dataclass
class Message:
    event: str  # "message" unless the server named it
    data: str
    id: str | None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SSEReader:
    """Reads one stream in a thread; `messages` grows as they arrive."""

    port: int
    path: str
    headers: dict[str, str]
    status: int = 0
    body: bytes = b""
    messages: list[Message] = field(default_factory=list)
    comments: int = 0
    ended: bool = False

    def __post_init__(self) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self._conn.request("GET", self.path, headers=self.headers)
        response = self._conn.getresponse()
        self.status = response.status
        if response.status != 200:
            self.body = response.read()
            self.ended = True
            return
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(response,), daemon=True)
        self._thread.start()

    def _read(self, response: http.client.HTTPResponse) -> None:
        fields: dict[str, str] = {}
        try:
            for raw in response:
                line = raw.decode().rstrip("\n").rstrip("\r")
                if line.startswith(":"):
                    self.comments += 1
                elif line:
                    name, _, value = line.partition(":")
                    fields[name] = value[1:] if value.startswith(" ") else value
                elif "data" in fields:
                    with self._lock:
                        self.messages.append(Message(fields.get("event", "message"),
                                                     fields["data"], fields.get("id")))
                    fields = {}
                else:
                    fields = {}
        except (OSError, ValueError, AttributeError):
            pass  # closed by `close` (http.client, cut mid-read, may say any of these)
        finally:
            self.ended = True

    def seen(self) -> list[Message]:
        with self._lock:
            return list(self.messages)

    def events(self) -> list[dict[str, Any]]:
        """The recorded events received (plain SSE)."""
        return [m.json() for m in self.seen() if m.event == "message"]

    def wait(self, predicate: Callable[[list[Message]], Any], *, timeout: float = 30,
             message: str = "a message") -> Any:
        return wait_for(lambda: predicate(self.seen()), timeout=timeout, message=message)

    def wait_end(self, timeout: float = 60) -> list[Message]:
        wait_for(lambda: self.ended, timeout=timeout, message="the stream to end")
        return self.seen()

    def close(self) -> None:
        """Disconnect, as a client that goes away."""
        sock = self._conn.sock
        if sock is not None:
            with suppress(OSError):  # already gone
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()
        wait_for(lambda: self.ended, timeout=10, message="the reader to stop")
