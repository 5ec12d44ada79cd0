"""A fake OpenAI-compatible embeddings endpoint on loopback (`POST /v1/embeddings`).

Each text's embedding counts the words of a small fixed vocabulary in it,
synonyms on one axis (`AXES`), so a test knows which texts are close. It
records every request; `fail` makes it answer 500.
"""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AXES = (("sofa", "couch", "settee"), ("invoice", "accounting", "receipt"),
        ("window", "seat"), ("refund", "credit"))
_WORD = re.compile(r"[a-z]+")


def embedding(text: str) -> list[float]:
    words = _WORD.findall(text.lower())
    return [float(sum(w in axis for w in words)) for axis in AXES] + [0.01]


class FakeEmbeddings:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fake-embeddings", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                fake.requests.append({"path": self.path, "body": body,
                                      "authorization": self.headers.get("Authorization")})
                if fake.fail or not self.path.endswith("/embeddings"):
                    self._send(500, {"error": {"message": "scripted failure"}})
                    return
                data = [{"object": "embedding", "index": i, "embedding": embedding(text)}
                        for i, text in enumerate(body["input"])]
                self._send(200, {"object": "list", "data": data, "model": body.get("model")})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler
