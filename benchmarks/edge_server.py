"""A fake of the process edge for I/O workloads: an OpenAI-compatible model and
HTTP tools that answer any number of calls at once, after a set latency.

One asyncio server (stdlib only, HTTP/1.1 keep-alive), in a thread of the
caller (`EdgeServer.start`) or in a process of its own (`python -m
benchmarks.edge_server --port N`, for the benchmark):

- ``POST /v1/chat/completions``: after `model_latency_s`, the model calls the
  first tool it is offered, `tool_calls` times (arguments ``{"i": k}``, k =
  the number of tool results in the conversation), then answers the final
  ``{"done": true, "calls": k}``; `usage` in every answer. With `parallel`
  N, each of those replies asks for N calls at once (N results a reply).
  Asked with ``"stream": true``, the reply comes as OpenAI-compatible SSE
  chunks (chunked transfer encoding), a sentence of reasoning first and the
  calls' arguments in pieces of `STREAM_PIECE` characters: half the latency
  before the first chunk, the chunks spread over the other half (a model
  speaking at a few dozen tokens a second);
- ``POST /tool/<name>``: after `tool_latency_s` (or ``?latency=S``), answers
  ``{"ok": true, "i": ..}`` (and ``"echo"``, the argument of that name, when
  given) and counts one effect per ``Idempotency-Key``;
- ``GET /status/<key>``: the status query of a tool (``succeeded`` when the
  key had its effect, else ``not_found``);
- ``GET /stats``: calls, calls in flight now and at the peak (model, tool),
  effects per key; ``POST /reset`` starts the counts again;
- ``POST /gate/close?kind=tool`` holds every answer of that kind (``model``
  or ``tool``) until ``POST /gate/open?kind=tool``: a test can hold hundreds
  of calls in flight, then act (`hold`, `release` from the caller's thread).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

STREAM_PIECE = 4  # characters a chunk: about a token
REASONING = "Calling the tool for the next item, as the plan says; then the one after."


@dataclass
class Streamed:
    """A model reply to send as SSE chunks."""

    chunks: list[dict[str, Any]]
    spread_s: float


@dataclass
class Stats:
    model_calls: int = 0
    tool_calls: int = 0
    model_in_flight: int = 0
    tool_in_flight: int = 0
    model_peak: int = 0
    tool_peak: int = 0
    effects: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"model_calls": self.model_calls, "tool_calls": self.tool_calls,
                "model_in_flight": self.model_in_flight, "tool_in_flight": self.tool_in_flight,
                "model_peak": self.model_peak, "tool_peak": self.tool_peak,
                "effects": dict(self.effects)}


class EdgeServer:
    def __init__(self, *, model_latency_s: float = 0.5, tool_latency_s: float = 0.2,
                 tool_calls: int = 4, parallel: int = 1) -> None:
        self.model_latency_s = model_latency_s
        self.tool_latency_s = tool_latency_s
        self.tool_calls = tool_calls
        self.parallel = parallel
        self.stats = Stats()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._gates: dict[str, asyncio.Event] = {}

    # --- from the test's (or bench's) thread ---------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def tool_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/tool/{name}"

    def start(self) -> EdgeServer:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self._listen(0))
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="edge-server", daemon=True).start()
        ready.wait(10)
        return self

    def close(self) -> None:
        loop = self._loop
        if loop is None or self._server is None:
            return

        async def end() -> None:
            assert self._server is not None
            self._server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)

    def snapshot(self) -> dict[str, Any]:
        return self.stats.as_dict()

    def hold(self, kind: str) -> None:
        """Answer no call of `kind` ("model" or "tool") until `release`."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._gates[kind].clear)

    def release(self, kind: str) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._gates[kind].set)

    # --- on the server's loop ---------------------------------------------------

    async def _listen(self, port: int) -> None:
        self._gates = {"model": asyncio.Event(), "tool": asyncio.Event()}
        for gate in self._gates.values():
            gate.set()
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", port,
                                                  backlog=4096, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                status, answer = await self._route(method, target, headers, body)
                if isinstance(answer, Streamed):
                    await _stream(writer, answer)
                    continue
                data = json.dumps(answer).encode()
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                writer.close()

    async def _route(self, method: str, target: str, headers: dict[str, str],
                     body: bytes) -> tuple[int, Any]:  # Any: JSON, or a `Streamed` reply
        url = urlsplit(target)
        query = parse_qs(url.query)
        path = url.path
        if path.endswith("/chat/completions") and method == "POST":
            request = json.loads(body or b"{}")
            if request.get("stream") is True:
                return 200, await self._model_streamed(request)
            return 200, await self._model(request)
        if path.startswith("/tool/") and method == "POST":
            latency = float(query.get("latency", [self.tool_latency_s])[0])
            return 200, await self._tool(json.loads(body or b"{}"),
                                         headers.get("idempotency-key", ""), latency)
        if path.startswith("/status/"):
            key = path.removeprefix("/status/")
            state = "succeeded" if self.stats.effects.get(key) else "not_found"
            return 200, {"state": state, "result": {"ok": True} if state == "succeeded" else None}
        if path == "/stats":
            return 200, self.stats.as_dict()
        if path == "/reset":
            self.stats = Stats()
            return 200, {}
        if path in ("/gate/close", "/gate/open"):
            gate = self._gates[query.get("kind", ["tool"])[0]]
            (gate.clear if path.endswith("close") else gate.set)()
            return 200, {}
        return 404, {"error": "not found"}

    async def _model(self, request: dict[str, Any], *,
                     latency_s: float | None = None) -> dict[str, Any]:
        stats = self.stats
        stats.model_calls += 1
        stats.model_in_flight += 1
        stats.model_peak = max(stats.model_peak, stats.model_in_flight)
        try:
            await asyncio.sleep(self.model_latency_s if latency_s is None else latency_s)
            await self._gates["model"].wait()
        finally:
            stats.model_in_flight -= 1
        done = _calls_made(request.get("messages") or [])
        tools = request.get("tools") or []
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if done // self.parallel < self.tool_calls and tools:
            name = tools[0]["function"]["name"]
            message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {
                "name": name, "arguments": json.dumps({"i": i})}}
                for i in range(done, done + self.parallel)]
            finish = "tool_calls"
        else:
            message["content"] = json.dumps({"done": True, "calls": done})
            finish = "stop"
        return {"id": f"cmpl-{stats.model_calls}", "object": "chat.completion", "created": 0,
                "model": request.get("model", "edge"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}

    async def _model_streamed(self, request: dict[str, Any]) -> Streamed:
        """`_model`'s reply as chunks: half the latency before the first, the
        rest spread over the other half (`_stream`)."""
        body = await self._model(request, latency_s=self.model_latency_s / 2)
        return Streamed(_chunks_of(body), spread_s=self.model_latency_s / 2)

    async def _tool(self, args: dict[str, Any], key: str, latency: float) -> dict[str, Any]:
        stats = self.stats
        stats.tool_calls += 1
        stats.tool_in_flight += 1
        stats.tool_peak = max(stats.tool_peak, stats.tool_in_flight)
        try:
            await asyncio.sleep(latency)
            await self._gates["tool"].wait()
        finally:
            stats.tool_in_flight -= 1
        stats.effects[key] += 1
        answer = {"ok": True, "i": args.get("i")}
        if "echo" in args:
            answer["echo"] = args["echo"]
        return answer


def _chunks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A completion as the chunks a streaming endpoint sends (`REASONING` first)."""
    head = {k: body[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def pieces(text: str) -> list[str]:
        return [text[i:i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)]

    choice = body["choices"][0]
    message = choice["message"]
    text = message["content"] or REASONING
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in pieces(text)]
    for index, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in pieces(call["function"]["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    out.append({**head, "choices": [], "usage": body["usage"]})
    return out


async def _stream(writer: asyncio.StreamWriter, reply: Streamed) -> None:
    """`reply`'s chunks as SSE, one HTTP chunk each, spread over `spread_s`."""
    writer.write(b"HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    pause = reply.spread_s / max(1, len(reply.chunks))
    for chunk in [*(f"data: {json.dumps(c)}\n\n" for c in reply.chunks), "data: [DONE]\n\n"]:
        data = chunk.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
        await asyncio.sleep(pause)  # the model's pace
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _calls_made(messages: list[dict[str, Any]]) -> int:
    """The tool calls made so far: one more than the largest `i` the
    conversation's calls carry (older steps may be summarized away, the
    latest reply's calls are always shown)."""
    made = 0
    for message in messages:
        for call in message.get("tool_calls") or []:
            try:
                i = json.loads(call["function"]["arguments"]).get("i")
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if isinstance(i, int):
                made = max(made, i + 1)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-latency", type=float, default=0.5)
    parser.add_argument("--tool-latency", type=float, default=0.2)
    parser.add_argument("--tool-calls", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args()
    server = EdgeServer(model_latency_s=args.model_latency, tool_latency_s=args.tool_latency,
                        tool_calls=args.tool_calls, parallel=args.parallel)

    async def serve() -> None:
        await server._listen(args.port)
        print(server.port, flush=True)  # the caller reads the port from the first line
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
