"""The bench's output: the machine it ran on, the targets checked against the
figures (information, never an assertion), and a short table."""

from __future__ import annotations

import os
import platform
from typing import Any

from django.db import connection

IO_TARGET_TASKS = 200  # the I/O workload's wall time and concurrency targets are at this size
WORKFLOW_TARGET_RUNS = 500  # the workflow workload's wall time target is at this size

# name, where in the document, comparison, bound
TARGETS: list[tuple[str, tuple[str, ...], str, float]] = [
    ("runner throughput / psycopg floor", ("runner", "ratio_to_floor"), ">=", 0.5),
    ("step ~1000 / step ~10", ("long_task", "ratio_last_to_10"), "<=", 1.2),
    ("event -> browser p99 (ms)", ("ws_latency", "commit_to_browser", "p99_ms"), "<", 50.0),
    ("task list p99 (ms)", ("console", "task_list", "p99_ms"), "<", 200.0),
    ("task page p99 (ms)", ("console", "task_page", "p99_ms"), "<", 200.0),
    ("busy workers while tasks wait", ("waiting", "busy_worker_processes"), "<=", 0),
    ("I/O steps/s / scripted-instant, same shape", ("io", "io_to_scripted_steps_ratio"),
     ">=", 0.7),
]


def machine_info() -> dict[str, Any]:
    mem_gb = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
        cur.execute("SHOW synchronous_commit")
        sync = cur.fetchone()[0]
        cur.execute("SHOW autovacuum")
        autovacuum = cur.fetchone()[0]
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "postgresql": pg,
        "synchronous_commit": sync,
        "autovacuum": autovacuum,
        "platform": platform.platform(),
    }


def dig(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = doc
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def check_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, path, op, bound in TARGETS:
        out.append(_target(name, op, bound, dig(doc, path)))
    for run in (doc.get("io") or {}).get("runs") or []:
        if run.get("tasks") == IO_TARGET_TASKS:
            out.append(_target(f"I/O {IO_TARGET_TASKS} tasks: wall / ideal", "<=", 2.0,
                               run.get("ratio_to_ideal")))
            out.append(_target(f"I/O {IO_TARGET_TASKS} tasks: peak model calls in flight",
                               ">=", 150, run.get("peak_model_calls_in_flight")))
    out.extend(workflow_targets(doc))
    conns = doc.get("waiting") or {}
    if "db_connections_before" in conns:
        grew = conns["db_connections_while_waiting"] - conns["db_connections_before"]
        out.append(
            {
                "target": "db connections added by waiting tasks <= 0",
                "value": grew,
                "met": grew <= 0,
            }
        )
    return out


def workflow_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    wf = doc.get("workflow")
    if not wf:
        return []
    out = []
    if dig(wf, ("http", "runs")) == WORKFLOW_TARGET_RUNS:
        out.append(_target(f"workflow {WORKFLOW_TARGET_RUNS} runs: wall / ideal critical path",
                           "<=", 1.5, wf.get("wall_to_ideal")))
    out.append(_target("workflow node steps/s, instant tools / scripted-instant steps/s",
                       ">=", 0.7, wf.get("instant_to_scripted_steps_ratio")))
    return out


def _anatomy_text(anatomy: dict[str, Any]) -> str:
    return (f"{_fmt(anatomy.get('phases_per_step'))} database phases, "
            f"{_fmt(anatomy.get('statements_per_step'))} statements, "
            f"{_fmt(anatomy.get('commits_per_step'))} commits, "
            f"{_fmt(anatomy.get('connections_opened_per_step'))} connections taken per tool step")


def _target(name: str, op: str, bound: float, value: Any) -> dict[str, Any]:
    met = None
    if isinstance(value, int | float):
        met = {"<": value < bound, "<=": value <= bound, ">=": value >= bound}[op]
    return {"target": f"{name} {op} {bound:g}", "value": value, "met": met}


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}{unit}"
    return f"{value}{unit}"


def _rounds(figures: dict[str, Any]) -> str:
    return ", ".join(_fmt(v) for v in figures.get("rounds_steps_per_s") or []) or "-"


def table(doc: dict[str, Any]) -> str:
    m = doc.get("machine", {})
    machine = (
        "machine",
        f"{m.get('cpus')} CPUs ({m.get('cpu')}), {m.get('memory_gb')} GB, "
        f"PostgreSQL {m.get('postgresql')}, autovacuum {m.get('autovacuum')} "
        "(every run starts from a vacuumed database)",
    )
    if doc.get("config", {}).get("only") in ("io", "workflow", "parallel"):
        return _rows_text([machine, *_io_rows(doc), *_parallel_rows(doc), *_workflow_rows(doc)],
                          doc)
    rows = [machine, *_io_rows(doc), *_workflow_rows(doc), *_runner_rows(doc),
            *_latency_rows(doc), *_console_rows(doc)]
    return _rows_text(rows, doc)


def _runner_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    r, f = doc.get("runner", {}), doc.get("floor", {})
    return [
        (
            "runner",
            f"{_fmt(r.get('steps_per_s'))} steps/s, {_fmt(r.get('tasks_per_s'))} tasks/s "
            f"({r.get('tasks')} tasks x {r.get('steps_per_task')} steps, "
            f"{r.get('workers')} workers, "
            f"{r.get('succeeded')} succeeded); worker CPU "
            f"{_fmt(r.get('worker_cpu_ms_per_step'), ' ms')}/step, machine CPU "
            f"{_fmt(r.get('machine_cpu_busy_pct'), '%')} busy "
            f"({_fmt(r.get('machine_cpu_steal_pct'), '%')} stolen); median of rounds "
            f"{_rounds(r)}",
        ),
        (
            "step latency",
            f"p50 {_fmt(dig(r, ('step_latency', 'p50_ms')), ' ms')}, "
            f"p99 {_fmt(dig(r, ('step_latency', 'p99_ms')), ' ms')}; within a slice p50 "
            f"{_fmt(dig(r, ('step_latency_in_slice', 'p50_ms')), ' ms')}, p99 "
            f"{_fmt(dig(r, ('step_latency_in_slice', 'p99_ms')), ' ms')}; "
            f"{_fmt(dig(r, ('slices_per_task', 'mean')))} slices/task",
        ),
        (
            "CPU per step",
            f"workers {_fmt(dig(r, ('cpu_ms_per_step', 'workers')), ' ms')} (of which "
            f"Celery's consumer {_fmt(dig(r, ('cpu_ms_per_step', 'celery_consumer')), ' ms')}), "
            f"PostgreSQL {_fmt(dig(r, ('cpu_ms_per_step', 'postgres')), ' ms')}, "
            f"Redis {_fmt(dig(r, ('cpu_ms_per_step', 'redis')), ' ms')}",
        ),
        (
            "psycopg floor",
            f"{_fmt(f.get('steps_per_s'))} steps/s ({_fmt(f.get('step_mean_ms'), ' ms')}/step); "
            f"median of rounds {_rounds(f)}",
        ),
        ("runner / floor", _fmt(r.get("ratio_to_floor"))),
        ("step anatomy", _anatomy_text(doc.get("anatomy") or {})),
    ]


def _latency_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    lt, ws = doc.get("long_task", {}), doc.get("ws_latency", {})
    return [
        (
            "long task",
            f"step ~10 {_fmt(lt.get('step_10_ms'), ' ms')}, step ~{lt.get('steps')} "
            f"{_fmt(lt.get('step_last_ms'), ' ms')}, ratio {_fmt(lt.get('ratio_last_to_10'))} "
            f"({lt.get('rounds')} tasks pooled; each: "
            f"{', '.join(_fmt(v) for v in lt.get('rounds_ratio') or [])})",
        ),
        (
            "event -> browser",
            f"from commit p50 {_fmt(dig(ws, ('commit_to_browser', 'p50_ms')), ' ms')}, "
            f"p99 {_fmt(dig(ws, ('commit_to_browser', 'p99_ms')), ' ms')}; from created_at "
            f"p50 {_fmt(dig(ws, ('created_at_to_browser', 'p50_ms')), ' ms')}, "
            f"p99 {_fmt(dig(ws, ('created_at_to_browser', 'p99_ms')), ' ms')}; at "
            f"{_fmt(ws.get('achieved_rate'))} steps/s, lost {ws.get('lost')}",
        ),
    ]


def _console_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    c = doc.get("console") or {}
    rows: list[tuple[str, str]] = []
    for name in ("task_list", "task_page", "task_page_long"):
        fig = c.get(name)
        if fig:
            rows.append(
                (
                    name.replace("_", " "),
                    f"p50 {_fmt(fig.get('p50_ms'), ' ms')}, p99 "
                    f"{_fmt(fig.get('p99_ms'), ' ms')} ({fig.get('source')})",
                )
            )
    data = doc.get("console_data")
    if data:
        rows.append(
            (
                "console data",
                f"{data.get('tenant_tasks'):,} tasks, {data.get('tenant_events'):,} events "
                f"in the tenant",
            )
        )
    w = doc.get("waiting")
    if w:
        rows.append(
            (
                "waiting tasks",
                f"{w.get('waiting_for_input')} waiting: {w.get('busy_worker_processes')} "
                f"busy workers, db connections {w.get('db_connections_before')} -> "
                f"{w.get('db_connections_while_waiting')}",
            )
        )
    return rows


def _parallel_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    par = doc.get("parallel") or {}
    return [(
        f"parallel I/O {run.get('tasks')} tasks",
        f"{par.get('parallel_reads_per_reply')} reads a reply: wall "
        f"{_fmt(run.get('wall_s'), ' s')} vs ideal {_fmt(run.get('ideal_s'), ' s')}: ratio "
        f"{_fmt(run.get('ratio_to_ideal'))} (target <= {par.get('target_ratio')}: "
        f"{'met' if run.get('target_met') else 'NOT met'}; one after another "
        f"{_fmt(par.get('sequential_s'), ' s')}); peak in flight "
        f"{run.get('peak_tool_calls_in_flight')} reads / "
        f"{run.get('peak_model_calls_in_flight')} model calls; {run.get('succeeded')} succeeded",
    ) for run in par.get("runs") or []]


def _io_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    io = doc.get("io") or {}
    rows = []
    for run in io.get("runs") or []:
        cpu = run.get("cpu_ms_per_step") or {}
        rows.append((
            f"I/O {run.get('tasks')} tasks",
            f"wall {_fmt(run.get('wall_s'), ' s')} vs ideal {_fmt(run.get('ideal_s'), ' s')}: "
            f"ratio {_fmt(run.get('ratio_to_ideal'))}; peak in flight "
            f"{run.get('peak_model_calls_in_flight')} model / "
            f"{run.get('peak_tool_calls_in_flight')} tool calls; "
            f"{_fmt(run.get('steps_per_s'))} steps/s; {run.get('succeeded')} succeeded; "
            f"worker RSS {_fmt(run.get('worker_rss_mb_max'), ' MB')}; CPU/step: "
            + ", ".join(f"{k} {_fmt(v, ' ms')}" for k, v in cpu.items()),
        ))
    anatomy = io.get("anatomy") or {}
    if anatomy.get("tool_steps"):
        rows.append(("I/O step anatomy", _anatomy_text(anatomy)))
    cmp = io.get("compare")
    if cmp:
        rows.append((
            "I/O vs scripted",
            f"{cmp.get('tasks')} tasks x {cmp.get('steps_per_task')} steps, medians of "
            f"{cmp.get('rounds')} alternated runs: {_fmt(cmp.get('io_median_steps_per_s'))} "
            f"steps/s (I/O: {', '.join(_fmt(v) for v in cmp.get('io_steps_per_s') or [])}) vs "
            f"{_fmt(cmp.get('scripted_median_steps_per_s'))} steps/s (scripted-instant: "
            f"{', '.join(_fmt(v) for v in cmp.get('scripted_steps_per_s') or [])}): ratio "
            f"{_fmt(cmp.get('ratio'))}",
        ))
        for name in ("io", "scripted"):
            cpu = cmp.get(f"{name}_cpu_ms_per_step") or {}
            rows.append((f"  CPU/step, {name}", ", ".join(f"{k} {_fmt(v, ' ms')}"
                                                          for k, v in cpu.items())))
    return rows


def _cpu_text(cpu: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_fmt(v, ' ms')}" for k, v in cpu.items())


def _workflow_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    wf = doc.get("workflow") or {}
    if not wf:
        return []
    rows = [("workflow graph",
             f"{wf.get('graph')}; {wf.get('calls_per_run')} calls of "
             f"{_fmt(wf.get('tool_latency_s'), ' s')} a run; critical path: ideal "
             f"{_fmt(wf.get('ideal_critical_path_s'), ' s')} (independent nodes and map items "
             f"at once), sequential {_fmt(wf.get('sequential_critical_path_s'), ' s')}")]
    anatomy = wf.get("anatomy") or {}
    for name in ("workflow", "scripted"):
        one = anatomy.get(name) or {}
        if one.get("tool_steps"):
            rows.append((f"{name} step anatomy",
                         _anatomy_text(one).replace("tool step", "node step" if name == "workflow"
                                                    else "tool step")
                         + f"; {_fmt(one.get('in_process_step_ms'), ' ms')} in one process"))
    h = wf.get("http") or {}
    if h:
        rows.append((
            f"workflow {h.get('runs')} runs",
            f"wall {_fmt(h.get('wall_s'), ' s')}: {_fmt(h.get('ratio_to_ideal'))} x ideal, "
            f"{_fmt(h.get('ratio_to_sequential'))} x sequential; "
            f"{_fmt(h.get('node_steps_per_s'))} node steps/s; a run took p50 "
            f"{_fmt(dig(h, ('run_duration', 'p50_ms')), ' ms')}, p99 "
            f"{_fmt(dig(h, ('run_duration', 'p99_ms')), ' ms')}; peak "
            f"{h.get('peak_tool_calls_in_flight')} tool calls in flight; "
            f"{h.get('succeeded')} succeeded; worker RSS "
            f"{_fmt(h.get('worker_rss_mb_max'), ' MB')}"))
        rows.append(("  CPU/node step", _cpu_text(h.get("cpu_ms_per_node_step") or {})))
    c = wf.get("compare") or {}
    if c:
        rows.append((
            "workflow vs scripted",
            f"{c.get('runs')} runs/tasks x {c.get('steps_per_run')} steps, medians of "
            f"{c.get('rounds')} alternated runs: "
            f"{_fmt(c.get('workflow_median_node_steps_per_s'))} node steps/s (instant tools: "
            f"{', '.join(_fmt(v) for v in c.get('workflow_node_steps_per_s') or [])}) vs "
            f"{_fmt(c.get('scripted_median_steps_per_s'))} steps/s (scripted-instant: "
            f"{', '.join(_fmt(v) for v in c.get('scripted_steps_per_s') or [])}): ratio "
            f"{_fmt(c.get('ratio'))}"))
        rows.append(("  CPU/step, workflow",
                     _cpu_text(c.get("workflow_cpu_ms_per_node_step") or {}) + " (per node step)"))
        rows.append(("  CPU/step, scripted", _cpu_text(c.get("scripted_cpu_ms_per_step") or {})))
    return rows


def _rows_text(rows: list[tuple[str, str]], doc: dict[str, Any]) -> str:
    load = doc.get("loadavg_1m")
    if load:
        rows.append(("load avg (1m)", ", ".join(f"{k} {v}" for k, v in load.items())))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("")
    for t in doc.get("targets", []):
        mark = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        lines.append(f"  [{mark}] {t['target']}: {_fmt(t['value'])}")
    return "\n".join(lines)
