"""The gateway's reading of a streamed reply's server-sent events (`sse_data`),
and the stream class that raises what the SDK raises (`_Chunks`)."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest

from tasks_app.gateway.openai_backend import _Chunks
from tasks_app.gateway.streaming import sse_data

CHUNKS = [{"choices": [{"index": 0, "delta": {"content": "Look"}}]},
          {"choices": [{"index": 0, "delta": {"content": "ing\nup"}}]},
          {"usage": {"prompt_tokens": 3, "completion_tokens": 2}}]


def _body(line_end: str) -> bytes:
    events = [f"data: {json.dumps(c)}" for c in CHUNKS]
    events.insert(1, ": a comment, then a field that is not data\nretry: 10")
    return (line_end * 2).join([*events, "data: [DONE]", "data: {\"after\": \"done\"}", ""]
                               ).encode()


async def _pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at:at + size]


def _read(body: bytes, size: int) -> list[Any]:
    async def collect() -> list[Any]:
        return [data async for data in sse_data(_pieces(body, size))]
    return asyncio.run(collect())


@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_every_event_is_read_once_up_to_done_however_the_bytes_are_cut(line_end, size):
    assert _read(_body(line_end), size) == CHUNKS


def test_the_data_lines_of_one_event_are_joined_with_a_newline():
    body = b'data: {"a":\ndata:  [1,\ndata:2]}\n\n'
    assert _read(body, 5) == [{"a": [1, 2]}]


def test_a_payload_that_is_not_json_is_an_error():
    with pytest.raises(ValueError):
        _read(b"data: {not json\n\n", 100)


class _Body(httpx2.AsyncByteStream):
    """A body in pieces that notes whether it was read to its end; with `endless`,
    it never ends after them (a server that keeps the body open after `[DONE]`)."""

    def __init__(self, pieces: list[bytes], *, endless: bool = False) -> None:
        self.pieces = pieces
        self.endless = endless
        self.read_to_end = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.endless:
            await asyncio.Event().wait()
        self.read_to_end = True


def _stream(body: bytes | _Body) -> _Chunks:
    request = httpx2.Request("POST", "http://model.test/v1/chat/completions")
    stream = httpx2.ByteStream(body) if isinstance(body, bytes) else body
    response = httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               stream=stream, request=request)
    client = openai.AsyncOpenAI(api_key="k", base_url="http://model.test/v1")
    return _Chunks(cast_to=object, response=response, client=client)


def _drain(stream: _Chunks) -> list[Any]:
    async def collect() -> list[Any]:
        return [chunk async for chunk in stream]
    return asyncio.run(collect())


def test_the_stream_yields_the_chunks_as_dicts():
    assert _drain(_stream(_body("\n"))) == CHUNKS


def test_an_error_in_the_stream_is_the_sdks_api_error():
    body = b'data: {"choices": []}\n\ndata: {"error": {"message": "overloaded"}}\n\n'
    with pytest.raises(openai.APIError, match="overloaded") as raised:
        _drain(_stream(body))
    assert raised.value.body == {"message": "overloaded"}


def test_a_bad_event_is_an_api_error_not_a_crash():
    with pytest.raises(openai.APIError, match="bad event"):
        _drain(_stream(b"data: {not json\n\n"))


def test_the_body_is_read_to_its_end_after_done_so_its_connection_is_kept():
    """What follows `[DONE]` (the end of a chunked body) is read before the
    response is closed: a body closed unread closes its connection."""
    body = _Body([b"data: {\"a\": 1}\n\ndata: [DONE]\n\n", b""])
    assert _drain(_stream(body)) == [{"a": 1}]
    assert body.read_to_end


def test_a_body_that_does_not_end_after_done_is_given_up_not_waited_for():
    body = _Body([b"data: {\"a\": 1}\n\ndata: [DONE]\n\n"], endless=True)
    assert _drain(_stream(body)) == [{"a": 1}]  # within `DRAIN_S`, not the call's timeout
    assert not body.read_to_end
