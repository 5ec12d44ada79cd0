"""A fake Slack Web API on 127.0.0.1, for `TETHER_SLACK_API_URL`: records every
call (method, parsed arguments, bearer token) and answers the few methods
Tether uses the way Slack does (HTTP 200, `{"ok": ...}`):

- `chat.postMessage`: a message id (`ts`) per post, in the channel it was given;
- `chat.update`, `chat.postEphemeral`: ok;
- `views.open`: a view id (the modal a Reject press opens; its `trigger_id`
  and `view` are recorded like any call's arguments);
- `users.info`: the e-mail of a user added with `add_user`, `user_not_found` else;
- any call with another token than `token`: `invalid_auth`.

`signed(body, secret)` gives the headers Slack sends with a request to an app
(`X-Slack-Signature`, `X-Slack-Request-Timestamp`), made by the SDK's own
signature code, so a test can press a button as Slack would.
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from slack_sdk.signature import SignatureVerifier

TOKEN = "xoxb-fake-bot-token"
SIGNING_SECRET = "fake-signing-secret-0123456789abcdef"


@dataclass(frozen=True)
class Call:
    method: str
    args: dict[str, Any]
    token: str


class FakeSlack:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.calls: list[Call] = []
        self.users: dict[str, str] = {}  # Slack user id -> e-mail
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-slack",
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/"

    def add_user(self, slack_id: str, email: str) -> None:
        self.users[slack_id] = email

    def of(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, args: dict[str, Any], token: str) -> dict[str, Any]:
        with self._lock:
            self.calls.append(Call(method, args, token))
        if token != self.token:
            return {"ok": False, "error": "invalid_auth"}
        if method == "chat.postMessage":
            return {"ok": True, "channel": args.get("channel"),
                    "ts": f"1700000000.{next(self._ts):06d}"}
        if method in ("chat.update", "chat.postEphemeral"):
            return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}
        if method == "views.open":
            if not args.get("trigger_id"):
                return {"ok": False, "error": "invalid_trigger_id"}
            return {"ok": True, "view": {"id": f"V{next(self._ts):08d}"}}
        if method == "users.info":
            email = self.users.get(str(args.get("user")))
            if email is None:
                return {"ok": False, "error": "user_not_found"}
            return {"ok": True, "user": {"id": args["user"], "profile": {"email": email}}}
        return {"ok": False, "error": "unknown_method"}


def signed(body: bytes, secret: str = SIGNING_SECRET, *, at: int | None = None) -> dict[str, str]:
    """The headers Slack signs a request to an app with."""
    timestamp = str(int(time.time()) if at is None else at)
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": str(signature)}


def _handler_for(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kind = self.headers.get("Content-Type", "")
            if kind.startswith("application/json"):
                args = json.loads(raw or b"{}")
            else:
                args = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            method = self.path.rsplit("/", 1)[-1].split("?", 1)[0]
            body = json.dumps(fake.answer(method, args, token)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def fake_slack(settings: Any) -> Iterator[FakeSlack]:
    fake = FakeSlack()
    settings.TETHER_SLACK_API_URL = fake.url
    yield fake
    fake.close()
