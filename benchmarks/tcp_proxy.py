"""A TCP proxy that plays a bad network between the workers and a service.

`TcpProxy(upstream_port)` listens on a free local port and forwards every
connection to the upstream, each chunk `latency_s` late in each direction
(the chunks of one direction keep their order and are pipelined: a late
chunk does not hold the next one back by more than its own delay).
`cut(seconds)` closes every connection at once and refuses new ones (each is
accepted and closed at once, as a dropped route looks to a client) until the
time is up. Runs its own event loop in a daemon thread.
"""
from __future__ import annotations

import asyncio
import threading
import time
from contextlib import suppress
from urllib.parse import urlsplit, urlunsplit

CHUNK = 64 * 1024


class TcpProxy:
    def __init__(self, upstream_port: int, *, latency_s: float = 0.0,
                 upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.latency_s = latency_s
        self.port = 0
        self.connections = 0  # accepted and forwarded, all told
        self.cuts = 0
        self._refuse_until = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")

    def url(self, url: str) -> str:
        """`url` (postgres://, redis://) with its port replaced by the proxy's."""
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
        return urlunsplit(parts._replace(netloc=f"{netloc}:{self.port}"))

    def cut(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for `seconds`."""
        def drop() -> None:
            self._refuse_until = time.monotonic() + seconds
            self.cuts += 1
            for writer in list(self._writers):
                _abort(writer)
            self._writers.clear()

        self._loop.call_soon_threadsafe(drop)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # --- the loop's side ---------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):
                _abort(writer)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort(writer)
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)
        for w in (writer, up_writer):
            self._writers.discard(w)
            _abort(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction; each chunk is written `latency_s` after it was read."""
        due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                at, data = await due.get()
                if not data:
                    break
                delay = at - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
            with suppress(OSError, RuntimeError):
                writer.write_eof()

        delivering = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(CHUNK)
                due.put_nowait((self._loop.time() + self.latency_s, data))
                if not data:
                    break
            await delivering
        finally:
            delivering.cancel()
            _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()
