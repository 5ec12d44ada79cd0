"""The request-body limit holds for chunked bodies, against real ASGI servers.

A chunked body has no Content-Length, so the limit is counted as the body
arrives (`config.body_limit`): on a streaming server (uvicorn) the 413 comes
back while the client is still sending, the rest never read; daphne reads a
whole body before calling the application, and still answers 413 without
Django reading it. A client that writes its whole body before reading the
answer (urllib) reads the 413 too: the server drains the body, within bounds,
instead of closing with unread data (which resets the connection).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from config import body_limit
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


FIVE_MB = 5 * 1024 * 1024


@pytest.mark.parametrize("kind", ["daphne", "uvicorn"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_client_that_sends_its_whole_body_first_reads_the_413(serve, kind, framing):
    port = serve(kind)
    # urllib sends bytes with a Content-Length, an iterable of bytes chunked;
    # either way it writes the whole body before it reads anything.
    data = b"x" * FIVE_MB if framing == "content-length" else iter([b"x" * 65536] * 80)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/tasks", data=data, method="POST",
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:  # a reset is a URLError
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    error = json.loads(refused.value.read())["error"]
    assert error["code"] == "request_too_large" and error["details"] == {"max_bytes": LIMIT}


class EndlessBody:
    """An ASGI `receive` for a client that never stops sending, or (`stall`)
    never sends another byte."""

    def __init__(self, *, stall: bool = False) -> None:
        self.stall = stall
        self.chunks_read = 0

    async def __call__(self) -> dict:
        if self.stall and self.chunks_read:
            await asyncio.Event().wait()
        self.chunks_read += 1
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}


def _refuse(receive: EndlessBody) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def never_called(scope, receive, send) -> None:
        raise AssertionError("the application must not see a refused body")

    scope = {"type": "http", "path": "/api/v1/tasks", "headers": []}
    asyncio.run(asyncio.wait_for(body_limit.BodyLimit(never_called)(scope, receive, send), 30))
    return sent


def test_the_drain_after_a_413_stops_at_its_byte_bound(settings, monkeypatch):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2500
    monkeypatch.setattr(body_limit, "DRAIN_MAX_BYTES", 20_000)
    receive = EndlessBody()
    sent = _refuse(receive)
    # 3 chunks pass the limit, then the drain stops just past 20,000 bytes.
    assert receive.chunks_read == 3 + 21
    assert sent[0]["status"] == 413 and sent[-1] == {
        "type": "http.response.body", "body": b"", "more_body": False}


def test_the_drain_after_a_413_stops_at_its_time_bound(settings, monkeypatch):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 500
    monkeypatch.setattr(body_limit, "DRAIN_MAX_SECONDS", 0.2)
    receive = EndlessBody(stall=True)
    sent = _refuse(receive)
    assert receive.chunks_read == 1
    assert sent[0]["status"] == 413 and sent[-1]["more_body"] is False
