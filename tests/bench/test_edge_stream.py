"""The bench's fake edge answers a streamed model call with SSE chunks the
official `openai` SDK reads, and the gateway's assembler makes of them the
reply the plain call returns (reasoning text aside)."""
from __future__ import annotations

import json

import openai

from benchmarks.edge_server import REASONING, EdgeServer
from tasks_app.gateway.streaming import Assembler, NoSink

TOOLS = [{"type": "function", "function": {"name": "bench_io_call", "parameters": {}}}]
ASK = {"model": "edge", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS}


def test_a_streamed_reply_is_the_plain_one_in_chunks():
    edge = EdgeServer(model_latency_s=0.01, tool_latency_s=0.0).start()
    try:
        client = openai.OpenAI(base_url=edge.base_url, api_key="none", max_retries=0)
        plain = client.chat.completions.create(**ASK).model_dump(exclude_none=True)
        chunks = [c.model_dump(exclude_none=True)
                  for c in client.chat.completions.create(**ASK, stream=True)]
    finally:
        edge.close()
    assert len(chunks) > 10  # the text and the arguments a few characters at a time
    assembler = Assembler(NoSink())
    for chunk in chunks:
        assembler.add(chunk)
    streamed = assembler.body()
    message, expected = streamed["choices"][0]["message"], plain["choices"][0]["message"]
    assert message["content"] == REASONING
    assert message["tool_calls"] == expected["tool_calls"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"i": 0}
    assert streamed["usage"] == plain["usage"]
    assert streamed["choices"][0]["finish_reason"] == "tool_calls"
