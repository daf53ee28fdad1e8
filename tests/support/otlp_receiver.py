"""Loopback OTLP receivers for tests: a real HTTP (and gRPC) endpoint that decodes what exporters send.

```python
with OTLPReceiver() as rx:                      # http://127.0.0.1:PORT, POST .../v1/traces
    configure(endpoint=rx.endpoint)             # or rx.traces_url for the full URL
    ...
    spans = rx.wait_for_spans(4, timeout=10)    # [{name, trace_id, span_id, parent_span_id, attributes, ...}]

logs = rx.wait_for_logs(3)      # OTLP log records: {event_name, trace_id, span_id, body, attributes, ...}
rx.metric_names()               # names of the metrics received over /v1/metrics

rx.fail_with(500)        # answer every export with 500 (sink-failure tests); rx.fail_with(None) to heal
rx.hang(5.0)             # hold each request up to 5 s before answering; rx.hang(0) to stop
rx.max_body_bytes = 20 * 1024 * 1024   # 413 past this, as the Collector's max_request_body_size
```

Span dicts use hex ids (``parent_span_id`` is None for a root), attributes decoded from
``AnyValue`` to Python values (arrays -> lists, kvlists -> dicts, bytes -> bytes), events as
``{name, time_unix_nano, attributes}``, links as ``{trace_id, span_id, attributes}``, plus
``resource`` attributes, ``scope`` name, ``kind`` (int), ``status`` ``{code, message}``, start/end ns.
Every request is logged in ``rx.requests`` as ``{path, headers (lower-case), content_type,
content_encoding, span_count, status}``.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OTLPGrpcReceiver", "OTLPReceiver", "decode_any_value", "decode_logs", "decode_request"]


def decode_any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [decode_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind)


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: decode_any_value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


def _hex(raw: bytes) -> str | None:
    return raw.hex() if raw else None


def decode_request(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Flatten an ``ExportTraceServiceRequest`` into span dicts (see the module docstring)."""
    spans: list[dict[str, Any]] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                spans.append(
                    {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": _hex(span.parent_span_id),
                        "kind": span.kind,
                        "start_time_ns": span.start_time_unix_nano,
                        "end_time_ns": span.end_time_unix_nano,
                        "status": {"code": span.status.code, "message": span.status.message},
                        "attributes": _attributes(span.attributes),
                        "events": [
                            {
                                "name": e.name,
                                "time_unix_nano": e.time_unix_nano,
                                "attributes": _attributes(e.attributes),
                            }
                            for e in span.events
                        ],
                        "links": [
                            {
                                "trace_id": link.trace_id.hex(),
                                "span_id": link.span_id.hex(),
                                "attributes": _attributes(link.attributes),
                            }
                            for link in span.links
                        ],
                        "resource": resource,
                        "scope": scope,
                    }
                )
    return spans


def decode_logs(request: Any) -> list[dict[str, Any]]:
    """Flatten an ``ExportLogsServiceRequest`` into log record dicts (hex ids, decoded attributes)."""
    records: list[dict[str, Any]] = []
    for resource_logs in request.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                records.append({
                    "event_name": record.event_name,
                    "trace_id": _hex(record.trace_id),
                    "span_id": _hex(record.span_id),
                    "time_unix_nano": record.time_unix_nano,
                    "body": decode_any_value(record.body),
                    "attributes": _attributes(record.attributes),
                    "resource": resource,
                    "scope": scope_logs.scope.name,
                })
    return records


def _metric_names(request: Any) -> list[str]:
    return [m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]


class _Collector:
    """Thread-safe span store shared by the HTTP and gRPC receivers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._spans: list[dict[str, Any]] = []
        self._logs: list[dict[str, Any]] = []
        self._metric_names: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self._status: int | None = None
        self._hang_s = 0.0
        self._release = threading.Event()
        self.max_body_bytes: int | None = None  # like the Collector's max_request_body_size (20 MiB)

    def fail_with(self, status: int | None) -> None:
        """Answer every later export with HTTP *status* (gRPC: UNAVAILABLE); None: answer normally."""
        self._status = status

    def hang(self, seconds: float) -> None:
        """Hold each later request *seconds* before answering (released early on stop); 0 stops."""
        self._hang_s = max(0.0, seconds)
        self._release.clear()

    def clear(self) -> None:
        """Forget the spans and requests received so far."""
        with self._cond:
            self._spans.clear()
            self._logs.clear()
            self._metric_names.clear()
            self.requests.clear()

    @property
    def spans(self) -> list[dict[str, Any]]:
        """A copy of every span received (and accepted) so far."""
        with self._cond:
            return list(self._spans)

    @property
    def logs(self) -> list[dict[str, Any]]:
        """A copy of every log record received so far (OTLP/HTTP ``/v1/logs``)."""
        with self._cond:
            return list(self._logs)

    def metric_names(self) -> set[str]:
        """The names of every metric received so far (OTLP/HTTP ``/v1/metrics``)."""
        with self._cond:
            return set(self._metric_names)

    def wait_for_logs(self, count: int, timeout: float = 10.0,
                      predicate: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """Wait until at least *count* log records (matching *predicate*) arrived; return them all."""
        return self._wait(self._logs, "log records", count, timeout, predicate)

    def _wait(self, store: list[dict[str, Any]], what: str, count: int, timeout: float,
              predicate: Callable[[dict[str, Any]], bool] | None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                matching = [s for s in store if predicate is None or predicate(s)]
                if len(matching) >= count:
                    return matching
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = [s.get("name", s.get("event_name")) for s in store]
                    raise TimeoutError(f"got {len(matching)} of {count} {what} in {timeout}s; received {names}")
                self._cond.wait(remaining)

    def spans_named(self, name: str) -> list[dict[str, Any]]:
        """The received spans called *name*."""
        return [s for s in self.spans if s["name"] == name]

    def wait_for_spans(
        self,
        count: int,
        timeout: float = 10.0,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Wait until at least *count* spans (matching *predicate*) arrived; return them all.

        Raises TimeoutError naming what did arrive.
        """
        return self._wait(self._spans, "spans", count, timeout, predicate)

    def _before_answer(self) -> int | None:
        if self._hang_s:
            self._release.wait(self._hang_s)
        return self._status

    def _accept(self, request: ExportTraceServiceRequest, log: dict[str, Any]) -> None:
        spans = decode_request(request)
        log["span_count"] = len(spans)
        with self._cond:
            self.requests.append(log)
            if log["status"] == 200:
                self._spans.extend(spans)
            self._cond.notify_all()

    def _accept_other(self, kind: str, body: bytes, log: dict[str, Any]) -> None:
        if kind == "logs":
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

            logs_request = ExportLogsServiceRequest()
            logs_request.ParseFromString(body)
            records = decode_logs(logs_request)
            with self._cond:
                self.requests.append(log)
                if log["status"] == 200:
                    self._logs.extend(records)
                self._cond.notify_all()
        else:
            from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

            metrics_request = ExportMetricsServiceRequest()
            metrics_request.ParseFromString(body)
            with self._cond:
                self.requests.append(log)
                if log["status"] == 200:
                    self._metric_names.extend(_metric_names(metrics_request))
                self._cond.notify_all()

    def _stop_hanging(self) -> None:
        self._release.set()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def do_POST(self) -> None:
        collector = self.server.collector
        length = int(self.headers.get("Content-Length") or 0)
        if collector.max_body_bytes is not None and length > collector.max_body_bytes:
            # The Collector's confighttp refuses a body over max_request_body_size: 413, nothing kept.
            with collector._cond:
                collector.requests.append({"path": self.path, "status": 413, "content_length": length})
            while length > 0:  # read and drop it, so the client hears the answer rather than a reset
                length -= len(self.rfile.read(min(length, 1 << 20)) or b"x" * length)
            self._reply(413, b"request body too large", "text/plain")
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = self._read_chunked()  # Node's OTLP exporter streams its body with no Content-Length
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        log: dict[str, Any] = {
            "path": self.path,
            "headers": headers,
            "content_type": headers.get("content-type", ""),
            "content_encoding": headers.get("content-encoding"),
            "span_count": 0,
        }
        other = next((k for k in ("logs", "metrics") if self.path.rstrip("/").endswith(f"/v1/{k}")), None)
        if other is not None:
            log["status"] = collector._before_answer() or 200
            if log["content_encoding"] == "gzip":
                body = gzip.decompress(body)
            collector._accept_other(other, body, log)
            self._reply(log["status"], b"", "application/x-protobuf")
            return
        if not self.path.rstrip("/").endswith("/v1/traces"):
            log["status"] = 404
            with collector._cond:
                collector.requests.append(log)
            self._reply(404, b"not found", "text/plain")
            return
        status = collector._before_answer() or 200
        log["status"] = status
        try:
            if log["content_encoding"] == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            if "json" in log["content_type"]:
                json_format.Parse(body.decode("utf-8"), request)
            else:
                request.ParseFromString(body)
        except Exception as exc:
            log["status"] = 400
            with collector._cond:
                collector.requests.append(log)
            self._reply(400, f"cannot decode: {exc}".encode(), "text/plain")
            return
        collector._accept(request, log)
        if status != 200:
            self._reply(status, b"scripted failure", "text/plain")
            return
        self._reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    collector: _Collector


class OTLPReceiver(_Collector):
    """An OTLP/HTTP receiver on 127.0.0.1 (a free port) that keeps the spans it is sent.

    Accepts POSTs to any path ending in ``/v1/traces`` (so ``/api/public/otel/v1/traces`` works
    for Langfuse-style tests), protobuf or JSON bodies, gzip or not.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self._server = _Server((host, port), _Handler)
        self._server.collector = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:4318`` (what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_url(self) -> str:
        """The full traces URL, ``{endpoint}/v1/traces``."""
        return self.endpoint + "/v1/traces"

    def start(self) -> OTLPReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop_hanging()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OTLPGrpcReceiver(_Collector):
    """An OTLP/gRPC receiver on 127.0.0.1 (insecure, free port), same span store as :class:`OTLPReceiver`."""

    def __init__(self) -> None:
        super().__init__()
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        collector = self

        class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                status = collector._before_answer() or 200
                metadata = {k: v for k, v in context.invocation_metadata()}
                log = {
                    "path": "grpc",
                    "headers": metadata,
                    "content_type": "application/grpc",
                    "content_encoding": None,
                    "span_count": 0,
                    "status": status,
                }
                collector._accept(request, log)
                if status != 200:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "scripted failure")
                return ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (the http scheme tells the exporter to connect insecurely)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OTLPGrpcReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._stop_hanging()
        self._server.stop(grace=None)

    def __enter__(self) -> OTLPGrpcReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
