"""The I/O workload with parallel tool calls (`manage.py bench --only parallel`).

The I/O workload's tasks (`io_load`: an `openai` model and an HTTP read on
the fake edge, 0.5 s and 0.2 s), but each of the model's four tool-calling
replies asks for `PARALLEL_READS` reads at once: 20 reads and 5 model calls
a task. Run together, a reply's reads take one tool latency, so the ideal
wall time is still one task's critical path, 5 x 0.5 + 4 x 0.2 = 3.3 s (run
one after another they would take 5 x 0.5 + 20 x 0.2 = 6.5 s). The target:
within 1.5x of it, with the reads overlapping (the edge counts the tool calls
in flight at the peak). The worker runs with `TETHER_SUMMARY_THRESHOLD_STEPS`
raised, so that no context summary (one more model call) joins the path.
"""
from __future__ import annotations

from typing import Any

from .io_load import (
    MODEL_LATENCY_S,
    TOOL_CALLS,
    TOOL_LATENCY_S,
    edge_process,
    io_world_ensure,
    readme_worker,
    roomy_admission,
    run_io,
)
from .world import World

PARALLEL_READS = 5
TARGET_RATIO = 1.5


def sequential_s() -> float:
    """The same calls one after another: what running them together saves."""
    return (TOOL_CALLS + 1) * MODEL_LATENCY_S + TOOL_CALLS * PARALLEL_READS * TOOL_LATENCY_S


def run_parallel_phase(world: World, env: dict[str, str], *, sizes: list[int], log_dir: Any,
                       say: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"parallel_reads_per_reply": PARALLEL_READS, "runs": [],
                           "sequential_s": sequential_s(), "target_ratio": TARGET_RATIO}
    with roomy_admission() as roomy, \
            edge_process(log_dir, parallel=PARALLEL_READS) as (edge_url, edge_pid):
        io_world_ensure(world, edge_url)
        # 21 steps a task: no summary folds them (a summary's model call, 0.5 s
        # here, would join the critical path; the I/O workload's 5 steps never
        # reach the threshold either)
        unsummarized = {"TETHER_SUMMARY_THRESHOLD_STEPS": "100"}
        with readme_worker({**env, **roomy, **unsummarized}, log_dir=log_dir) as workers:
            run_io(world, tasks=10, edge_url=edge_url, edge_pid=edge_pid, workers=workers)
            for n in sizes:
                say(f"  parallel I/O workload: {n} tasks x ({TOOL_CALLS + 1} model calls of "
                    f"{MODEL_LATENCY_S} s, {TOOL_CALLS} replies of {PARALLEL_READS} reads of "
                    f"{TOOL_LATENCY_S} s) ...")
                run = run_io(world, tasks=n, edge_url=edge_url, edge_pid=edge_pid,
                             workers=workers)
                run["target_met"] = bool(run["ratio_to_ideal"]
                                         and run["ratio_to_ideal"] <= TARGET_RATIO
                                         and run["succeeded"] == n)
                doc["runs"].append(run)
                say(f"    wall {run['wall_s']} s (ideal {run['ideal_s']} s, ratio "
                    f"{run['ratio_to_ideal']}, target {TARGET_RATIO}; one after another "
                    f"{sequential_s()} s), {run['succeeded']}/{n} succeeded, "
                    f"{run['tool_calls']} reads, peak {run['peak_tool_calls_in_flight']} reads "
                    f"and {run['peak_model_calls_in_flight']} model calls in flight, "
                    f"CPU ms/step {run['cpu_ms_per_step']}")
    doc["target_met"] = bool(doc["runs"]) and all(r["target_met"] for r in doc["runs"])
    return doc
