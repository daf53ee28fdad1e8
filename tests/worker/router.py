"""A test router standing in for the OpenTelemetry Collector's ``load_balancing`` exporter.

The real Collector runs the examples in test_otelcol_fleet.py (where Go builds it: ``make otelcol``);
this router stays for test_scale.py, which needs what the Collector does not give a test: every trace's
worker known (``routed``) and a lock under which nothing is forwarded, to count exactly what a worker
killed under 8 senders' load held. It does what tier 1 of ``examples/collector/`` does: it receives
OTLP/HTTP, splits each request's spans by trace id and forwards each group to one worker chosen with
the ``load_balancing`` exporter's ring
(``exporter/loadbalancingexporter/consistent_hashing.go``: 100 points per endpoint at
``crc32(endpoint + byte(i)) % 36000``, a trace at ``crc32(trace id bytes) % 36000`` goes to the
next point clockwise), so every span of a trace reaches the same worker. A worker that refuses
connections is taken out of the ring, as the Collector's DNS / k8s resolver does when a pod goes, and
the request that found it dead is answered 500 (the sender's exporter counts it as failed, no retry).
"""

from __future__ import annotations

import bisect
import http.client
import threading
import zlib
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_MAX_POSITIONS = 36_000
_WEIGHT = 100


class HashRing:
    """The ``load_balancing`` exporter's consistent hash ring over *endpoints*."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        taken: dict[int, str] = {}
        for endpoint in endpoints:
            for i in range(_WEIGHT):
                pos = zlib.crc32(endpoint.encode() + bytes([i])) % _MAX_POSITIONS
                taken.setdefault(pos, endpoint)  # an occupied point stays with the first endpoint
        self._positions = sorted(taken)
        self._endpoints = [taken[p] for p in self._positions]

    def endpoint_for(self, trace_id: bytes) -> str:
        pos = zlib.crc32(trace_id) % _MAX_POSITIONS
        i = bisect.bisect_left(self._positions, pos)
        return self._endpoints[i % len(self._endpoints)]


class Router:
    """A loopback OTLP/HTTP router to the given worker base URLs (see the module docstring)."""

    def __init__(self, workers: Sequence[str]) -> None:
        self.workers = list(workers)
        self._alive = list(workers)
        self.ring = HashRing(self._alive)
        self.lock = threading.RLock()  # held while forwarding: the test kills a worker between forwards
        self.routed: dict[str, set[str]] = {}  # trace id -> the workers its spans were sent to
        self.failed_forwards = 0
        self._local = threading.local()
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = router.forward(body)
                reply = ExportTraceServiceResponse().SerializeToString() if ok else b"worker unreachable"
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _split(self, request: ExportTraceServiceRequest) -> dict[str, ExportTraceServiceRequest]:
        out: dict[str, ExportTraceServiceRequest] = {}
        with self.lock:
            ring = self.ring
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    worker = ring.endpoint_for(span.trace_id)
                    self.routed.setdefault(span.trace_id.hex(), set()).add(worker)
                    part = out.setdefault(worker, ExportTraceServiceRequest())
                    if not part.resource_spans or part.resource_spans[-1].resource != rs.resource:
                        target = part.resource_spans.add()
                        target.resource.CopyFrom(rs.resource)
                    target_rs = part.resource_spans[-1]
                    if not target_rs.scope_spans or target_rs.scope_spans[-1].scope != ss.scope:
                        target_rs.scope_spans.add().scope.CopyFrom(ss.scope)
                    target_rs.scope_spans[-1].spans.add().CopyFrom(span)
        return out

    def _connection(self, worker: str) -> http.client.HTTPConnection:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        if worker not in conns:
            parts = urlsplit(worker)
            conns[worker] = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        return conns[worker]

    def forward(self, body: bytes) -> bool:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        ok = True
        with self.lock:
            for worker, part in self._split(request).items():
                try:
                    conn = self._connection(worker)
                    conn.request("POST", "/v1/traces", body=part.SerializeToString(),
                                 headers={"Content-Type": "application/x-protobuf"})
                    response = conn.getresponse()
                    response.read()
                    ok = ok and response.status == 200
                except OSError:
                    self._local.conns.pop(worker, None)
                    self.failed_forwards += 1
                    self._drop(worker)
                    ok = False
        return ok

    def _drop(self, worker: str) -> None:
        if worker in self._alive:
            self._alive.remove(worker)
            self.ring = HashRing(self._alive)

    def start(self) -> Router:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
