"""The streaming workload (`manage.py bench --only stream`): what streaming a
model's tokens costs the I/O workload.

The I/O workload (`io_load`: five model calls of 0.5 s and four HTTP tool
calls of 0.2 s a task, on the worker started as docs/how-to/deploy.md says)
with two agents that differ only in `"stream"`: the streaming one asks for
each reply as SSE chunks (the edge sends a sentence of reasoning and the
call's arguments a few characters a chunk, about 30 chunks a reply, spread
over the second half of the latency), assembles them and publishes every
piece to the task's live group (`tasks_app.live.tokens`, batched by the
publisher's window) before the decision is recorded. The plain agent's reply
carries no reasoning text, so streaming is charged for more bytes, not fewer.
The two are alternated `rounds` times on one worker; the median steps/s of
each and their ratio (target: at least 0.9, streaming costs at most 10 %).
"""
from __future__ import annotations

from typing import Any

from .io_load import (
    IO_AGENT,
    alternated,
    edge_process,
    io_agent_seed,
    io_world_ensure,
    pair_figures,
    pair_table,
    readme_worker,
    roomy_admission,
    run_io,
)
from .world import World

STREAM_AGENT = "bench-io-stream"
STEPS_RATIO_TARGET = 0.9


def stream_world_ensure(world: World, edge_url: str) -> None:
    """The I/O agent, and its twin that streams."""
    io_world_ensure(world, edge_url)
    io_agent_seed(world, edge_url, STREAM_AGENT, stream=True)


def run_stream_phase(world: World, env: dict[str, str], *, tasks: int, rounds: int,
                     log_dir: Any, say: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"tasks": tasks, "rounds": rounds}
    with roomy_admission() as roomy, edge_process(log_dir) as (edge_url, edge_pid):
        stream_world_ensure(world, edge_url)
        with readme_worker({**env, **roomy}, log_dir=log_dir) as workers:
            for agent in (STREAM_AGENT, IO_AGENT):  # warm both paths
                run_io(world, tasks=10, edge_url=edge_url, edge_pid=edge_pid, workers=workers,
                       agent=agent)
            runs = alternated(world, {"streaming": STREAM_AGENT, "plain": IO_AGENT},
                              tasks=tasks, rounds=rounds, edge_url=edge_url,
                              edge_pid=edge_pid, workers=workers, say=say)
    doc.update(pair_figures(runs, tasks=tasks))
    ratio = doc["steps_ratio"]
    doc["target_met"] = bool(ratio is not None and ratio >= STEPS_RATIO_TARGET
                             and doc["succeeded"] == doc["submitted"])
    return doc


def stream_table(doc: dict[str, Any]) -> str:
    on = doc.get("streaming_cpu_ms_per_step") or {}
    off = doc.get("plain_cpu_ms_per_step") or {}
    rows = [
        ("steps/s, streaming vs plain",
         f"{doc.get('streaming_median')} vs {doc.get('plain_median')} (medians of "
         f"{doc.get('rounds')} alternated rounds of {doc.get('tasks')} I/O tasks; streaming "
         f"{doc.get('streaming_steps_per_s')}, plain {doc.get('plain_steps_per_s')}): ratio "
         f"{doc.get('steps_ratio')} (target >= {STEPS_RATIO_TARGET})"),
        ("CPU per step",
         f"worker pool {on.get('worker_pool')} vs {off.get('worker_pool')} ms, consumer "
         f"{on.get('worker_consumer')} vs {off.get('worker_consumer')} ms, Redis "
         f"{on.get('redis')} vs {off.get('redis')} ms, PostgreSQL {on.get('postgres')} vs "
         f"{off.get('postgres')} ms"),
    ]
    return pair_table(rows, doc)
