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


def _stream(body: bytes) -> _Chunks:
    request = httpx2.Request("POST", "http://model.test/v1/chat/completions")
    response = httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               stream=httpx2.ByteStream(body), request=request)
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
