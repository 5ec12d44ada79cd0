"""OTLP trace receivers for tests: the tracing backend at the process edge.

`OtlpReceiver` is a threaded HTTP server on 127.0.0.1 that accepts
``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, gzip or
not, as the OpenTelemetry exporters send it); `GrpcOtlpReceiver` serves the
same message as the gRPC ``TraceService/Export``. Both decode it with
`opentelemetry-proto` and keep every span, with its service's resource
attributes, for the test to read::

    receiver = OtlpReceiver()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    ...
    spans = receiver.spans_of(trace_id)
"""
from __future__ import annotations

import gzip
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["GrpcOtlpReceiver", "OtlpReceiver", "ReceivedSpan", "attributes_of"]


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root span
    name: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    status_code: int  # 0 unset, 1 ok, 2 error
    start_ns: int
    end_ns: int
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, which) if which else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


class _Spans:
    """The spans received so far."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()

    def spans_of(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def take(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name,
                        kind=span.kind, attributes=attributes_of(span.attributes),
                        events=tuple((e.name, attributes_of(e.attributes)) for e in span.events),
                        links=tuple((link.trace_id.hex(), link.span_id.hex())
                                    for link in span.links),
                        status_code=span.status.code, start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano, resource=resource))
        with self._lock:
            self.requests += 1
            self.spans.extend(received)



class OtlpReceiver(_Spans):
    """OTLP over HTTP (`http/protobuf`)."""

    def __init__(self) -> None:
        super().__init__()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver",
                                        daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """For `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter adds `/v1/traces`)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class GrpcOtlpReceiver(_Spans):
    """OTLP over gRPC (`grpc`), without TLS."""

    def __init__(self) -> None:
        import grpc

        super().__init__()
        receiver = self

        class Service(TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest,  # noqa: N802 - gRPC's name
                       context: Any) -> ExportTraceServiceResponse:
                receiver.take(request)
                return ExportTraceServiceResponse()

        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        add_TraceServiceServicer_to_server(Service(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(grace=None)


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self._answer(404, b"")
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except DecodeError:
                self._answer(400, b"")
                return
            receiver.take(request)
            self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
