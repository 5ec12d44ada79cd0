"""`foundations.tracing`: off without an OTLP endpoint (nothing set up, the old
`traceparent`), and, in a process of its own, export over gRPC as over HTTP,
a sampler deciding on the task's trace id, an unknown protocol refused.

The whole path through a real worker and web process is in
`tests/system/test_traces.py`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace

from foundations import tracing
from tests.fakes.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

# A process that traces one step of a task with one tool call, prints the
# `traceparent` an HTTP tool would get, and exits (which sends what is queued).
SCRIPT = f"""
import json
from foundations import tracing
assert tracing.setup("worker")
with tracing.step_span(trace_id="{TRACE_ID}", task_id=7):
    with tracing.tool_span(tool="lookup_order", call_id="step_1", kind="http") as traced:
        headers = tracing.outgoing_headers("{TRACE_ID}")
        traced.outcome("ok")
print(json.dumps(headers))
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items()
             if not k.startswith(("PYTEST_", "OTEL_"))}
    child.update({"PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "tests.settings", **env})
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=child,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def http_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcOtlpReceiver]:
    receiver = GrpcOtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


def test_off_unless_an_otlp_endpoint_is_set() -> None:
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                                   "OTEL_SDK_DISABLED": "true"})
    assert not tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                                   "OTEL_TRACES_EXPORTER": "none"})


def test_off_the_hooks_do_nothing_and_a_tool_still_gets_the_tasks_trace_id() -> None:
    assert not tracing.enabled()  # the test process never sets an endpoint
    with tracing.step_span(trace_id=TRACE_ID, task_id=1) as step:
        with tracing.tool_span(tool="t", call_id="step_1", kind="http") as tool:
            assert trace.get_current_span() is trace.INVALID_SPAN
            tool.outcome("transient", error={"type": "timeout"})
            first = tracing.outgoing_headers(TRACE_ID)["traceparent"]
            second = tracing.outgoing_headers(TRACE_ID)["traceparent"]
        step.outcome = "continue"
    assert re.fullmatch(rf"00-{TRACE_ID}-[0-9a-f]{{16}}-01", first)
    assert first != second  # a span id of no span: random each time


def test_the_roots_span_id_is_derived_from_the_trace_id_alike_everywhere() -> None:
    assert tracing.root_span_id(TRACE_ID) == tracing.root_span_id(TRACE_ID)
    assert tracing.root_span_id(TRACE_ID) != tracing.root_span_id("0" * 31 + "1")
    assert tracing.trace_id_int("not-a-trace-id") is None
    assert tracing.trace_id_int("0" * 32) is None


@pytest.mark.system  # a Python process of its own
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_are_exported_over_grpc_and_http(protocol, http_receiver, grpc_receiver) -> None:
    receiver = grpc_receiver if protocol == "grpc" else http_receiver
    done = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                 "OTEL_EXPORTER_OTLP_PROTOCOL": protocol})
    assert done.returncode == 0, done.stderr
    headers = json.loads(done.stdout.strip().splitlines()[-1])

    spans = {s.name: s for s in receiver.spans_of(TRACE_ID)}  # sent at exit, before it
    assert set(spans) == {"step", "execute_tool lookup_order"}
    step, tool = spans["step"], spans["execute_tool lookup_order"]
    assert step.parent_span_id == format(tracing.root_span_id(TRACE_ID), "016x")
    assert tool.parent_span_id == step.span_id
    assert tool.attributes["gen_ai.tool.type"] == "extension"
    assert headers["traceparent"] == f"00-{TRACE_ID}-{tool.span_id}-01"
    assert step.resource["service.name"] == "tether"
    assert step.resource["tether.process.kind"] == "worker"


@pytest.mark.system  # a Python process of its own
def test_a_ratio_sampler_decides_on_the_tasks_trace_id(http_receiver) -> None:
    done = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
                 "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                 "OTEL_TRACES_SAMPLER_ARG": "0"})
    assert done.returncode == 0, done.stderr
    headers = json.loads(done.stdout.strip().splitlines()[-1])
    assert http_receiver.spans_of(TRACE_ID) == []
    # not recorded, and the tool is told so; the trace id is still the task's
    assert re.fullmatch(rf"00-{TRACE_ID}-[0-9a-f]{{16}}-00", headers["traceparent"])


@pytest.mark.system  # a Python process of its own
def test_an_unknown_protocol_stops_the_process_with_a_reason(http_receiver) -> None:
    done = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
                 "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert done.returncode != 0
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'" in done.stderr
