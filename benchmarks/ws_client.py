"""A WebSocket client of the console's live channel, run as its own process
(like a browser): it subscribes to tasks, prints READY once subscribed to all,
stamps `time.time()` the moment each message is handed over, and writes the
arrival times of the bench's events as JSON.

Standalone on purpose (no Django): ``python -m benchmarks.ws_client
--url ws://... --origin http://... --cookie sessionid=... --tasks ID,ID --count N
--out PATH``. Uses autobahn's asyncio client (installed with daphne).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlparse

import txaio
from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--origin", required=True)
    parser.add_argument("--cookie", required=True)
    parser.add_argument("--tasks", required=True, help="comma-separated task ids")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    opts = parser.parse_args(argv)
    tasks = [int(t) for t in opts.tasks.split(",")]
    subscribed: set[int] = set()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # autobahn (txaio) schedules its handshake on the current loop
    txaio.config.loop = loop  # type: ignore[attr-defined]
    done: asyncio.Future[None] = loop.create_future()
    arrivals: dict[int, dict[str, Any]] = {}
    errors: list[Any] = []

    class Client(WebSocketClientProtocol):
        def onOpen(self) -> None:  # noqa: N802 - autobahn's API
            for task in tasks:
                self.sendMessage(
                    json.dumps({"type": "subscribe", "task": task, "after": 0}).encode()
                )

        def onMessage(self, payload: bytes, isBinary: bool) -> None:  # noqa: N802, N803
            now = time.time()
            msg = json.loads(payload)
            if msg.get("type") == "subscribed":
                subscribed.add(msg.get("task"))
                if subscribed >= set(tasks):
                    print("READY", flush=True)
            elif msg.get("type") == "event":
                event = msg["event"]
                seq = (event.get("payload") or {}).get("bench_seq")
                if seq is not None:
                    arrivals[int(seq)] = {
                        "at": now,
                        "created_at": event.get("created_at"),
                        "id": event.get("id"),
                    }
                    if len(arrivals) >= opts.count and not done.done():
                        done.set_result(None)
            else:
                errors.append(msg)

        def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:  # noqa: N802, N803
            if not done.done():
                print("CLOSED", flush=True)
                errors.append({"closed": code, "reason": reason})
                done.set_result(None)

    url = urlparse(opts.url)
    factory = WebSocketClientFactory(opts.url, origin=opts.origin, headers={"Cookie": opts.cookie})
    factory.protocol = Client
    loop.run_until_complete(loop.create_connection(factory, url.hostname, url.port))
    try:
        loop.run_until_complete(asyncio.wait_for(done, opts.timeout))
    except TimeoutError:
        errors.append({"timeout": opts.timeout, "received": len(arrivals)})
    with open(opts.out, "w") as fh:
        json.dump({"arrivals": arrivals, "errors": errors}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
