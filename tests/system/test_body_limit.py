"""The request-body limit holds for chunked bodies, against real ASGI servers.

A chunked body has no Content-Length, so the limit is counted as the body
arrives (`config.body_limit`): on a streaming server (uvicorn) the 413 comes
back while the client is still sending, the rest never read; daphne reads a
whole body before calling the application, and still answers 413 without
Django reading it.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import wait_for
from tests.processes import Proc, _base_env, _spawn, free_port, port_open

LIMIT = 4096
SERVERS = {
    "uvicorn": ["-m", "uvicorn", "--host", "127.0.0.1", "--port", "{port}", "--lifespan", "on",
                "config.asgi:application"],
    "daphne": ["-m", "daphne", "-b", "127.0.0.1", "-p", "{port}", "config.asgi:application"],
}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[str], int]]:
    started: list[Proc] = []

    def start(kind: str) -> int:
        port = free_port()
        env = _base_env()
        env.update({"DJANGO_SETTINGS_MODULE": "tests.settings", "MAX_REQUEST_BYTES": str(LIMIT),
                    "TETHER_RUNNER": "manual"})
        argv = [sys.executable, *(a.format(port=port) for a in SERVERS[kind])]
        proc = _spawn(f"{kind}-{port}", argv, env=env, log_dir=tmp_path)
        started.append(proc)

        def up() -> bool:
            assert proc.alive(), proc.log_tail()
            return port_open("127.0.0.1", port)

        wait_for(up, timeout=60, interval=0.1, message=f"{kind} on port {port}")
        return port

    yield start
    for proc in started:
        proc.kill()


def chunked_post(port: int, chunks: list[bytes], *, finish: bool) -> tuple[int, bytes]:
    """POST /api/v1/tasks with a chunked body; unless `finish`, the terminating
    chunk is never sent, so an answer proves the server stopped reading."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        for chunk in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if finish:
            sock.sendall(b"0\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(serve):
    port = serve("uvicorn")
    status, body = chunked_post(port, [b"x" * 3000, b"x" * 3000], finish=False)
    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large" and error["details"] == {"max_bytes": LIMIT}


@pytest.mark.parametrize("kind", ["uvicorn", "daphne"])
def test_the_limit_holds_on_each_server_and_smaller_bodies_pass(serve, kind):
    port = serve(kind)
    status, body = chunked_post(port, [b"x" * 2000] * 3, finish=True)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    # Within the limit the body reaches the API, which asks who is calling.
    status, body = chunked_post(port, [b'{"goal": ', b'"hi"}'], finish=True)
    assert status in (401, 403) and "error" in json.loads(body)
