"""Raw TCP listeners at the edge of the process, for the outbound-address tests.

- `Listener`: an attacker's service on an address the policy refuses
  (127.0.0.2 is loopback on Linux and not in the suite's TETHER_EGRESS_ALLOW).
  It records every connection it accepts, so a test can assert that nothing
  (not even a TCP handshake) reached it.
- `Hanging`: a server that accepts every connection and never answers, each
  connection held until the client closes it (so the calls of a whole session
  never fill its backlog: a listener that never accepts stops completing
  handshakes after its backlog, about 500, and every later call is a connect
  timeout instead of a read timeout).
- `DripServer`: an HTTP server that answers one byte every `interval_s`, from
  the status line on or after the headers, and notes when the client closed
  the connection (the end of a call bounded by its total timeout).
- `EventServer`: an HTTP server that answers an event stream as a model does,
  its `pieces` one HTTP chunk each, `interval_s` apart, then ends the body (or,
  with `hold`, keeps it open until the client closes).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field


class _Acceptor:
    def __init__(self, host: str, backlog: int = 16) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(backlog)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, name=f"listener-{host}", daemon=True)
        self._thread.start()

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


class Listener(_Acceptor):
    """Accepts connections and records what arrives on them; answers nothing."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.received: list[bytes] = []
        self._lock = threading.Lock()
        super().__init__(host)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self.received)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
        with self._lock:
            self.received.append(data)


class Hanging(_Acceptor):
    """Accepts connections, reads what arrives until the client closes, answers nothing."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host, backlog=512)  # a burst of calls is queued, not dropped

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass


@dataclass
class Drip:
    accepted_at: float
    closed_at: float | None = None  # when the client closed the connection
    sent: int = 0  # bytes sent
    closed: threading.Event = field(default_factory=threading.Event)


class DripServer(_Acceptor):
    """Answers `200` with a JSON `body`, one byte every `interval_s`."""

    def __init__(self, body: dict, *, interval_s: float = 0.7, headers_first: bool = True,
                 host: str = "127.0.0.1") -> None:
        payload = json.dumps(body).encode()
        self.head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(payload)}\r\n\r\n".encode())
        self.payload = payload
        self.interval_s = interval_s
        self.headers_first = headers_first
        self.drips: list[Drip] = []
        super().__init__(host)

    def _serve(self, conn: socket.socket) -> None:
        drip = Drip(accepted_at=time.monotonic())
        self.drips.append(drip)
        with conn:
            _read_request(conn)
            if self.headers_first:
                conn.sendall(self.head)
                pending = self.payload
            else:
                pending = self.head + self.payload
            for byte in pending:
                # Wait one interval, watching for the client going away.
                readable, _, _ = select.select([conn], [], [], self.interval_s)
                if readable and not _peek(conn):
                    break
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    break
                drip.sent += 1
        drip.closed_at = time.monotonic()
        drip.closed.set()


class EventServer(_Acceptor):
    def __init__(self, pieces: list[bytes], *, interval_s: float = 0.01,
                 hold: bool = False, host: str = "127.0.0.1") -> None:
        self.pieces = pieces
        self.interval_s = interval_s
        self.hold = hold
        super().__init__(host)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
                for piece in self.pieces:
                    conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    # the model's pace, watching for the client going away
                    readable, _, _ = select.select([conn], [], [], self.interval_s)
                    if readable and not _peek(conn):
                        return
                if self.hold:
                    _peek(conn)  # returns when the client closes
                    return
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                return


def _read_request(conn: socket.socket) -> None:
    """Read the request's head and its body (by Content-Length), so that what is
    readable afterwards can only be the client closing."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def _peek(conn: socket.socket) -> bytes:
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""
