"""The worker as an internet-facing service (issue 46, items 1-6): bearer token and TLS, a gzip bomb,
malformed bodies, in-flight memory in bytes, slowloris and a connection cap, one owner of a gRPC port.

Senders are the real OTel OTLP exporters (HTTP and gRPC) or raw sockets where the attack is the
point; memory is read from /proc of a real ``ragaudit worker`` process (VmHWM: its peak).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.ports import free_port
from tests.worker.conftest import wait_for
from tests.worker.hostile import gzip_bomb, raw_post, spawn_worker, worker_env, worker_process
from tests.worker.spans import SpanMaker, encode, rag_trace

TOKEN = "s3cret-0f-the-w0rker"
MIB = 1024 * 1024
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _stats(url: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url + "/stats", headers=headers), timeout=10) as response:
        return dict(json.loads(response.read()))


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


# -- 1. bearer token and TLS ----------------------------------------------------------------------------


def test_bearer_token_on_http_and_grpc_with_the_real_exporters(make_worker: Any, caplog: Any) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    caplog.set_level(logging.DEBUG)
    worker = make_worker(auth_token=TOKEN, grpc_port=0)
    traces = worker.url + "/v1/traces"
    grpc_endpoint = f"http://127.0.0.1:{worker.grpc_port}"
    bearer = {"authorization": f"Bearer {TOKEN}"}

    assert OTLPSpanExporter(endpoint=traces).export(rag_trace(SpanMaker())) is SpanExportResult.FAILURE
    wrong = OTLPSpanExporter(endpoint=traces, headers={"authorization": "Bearer s3cret-0f-the-w0rkeR"})
    assert wrong.export(rag_trace(SpanMaker())) is SpanExportResult.FAILURE
    assert OTLPSpanExporter(endpoint=traces, headers=bearer).export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS

    no_token = GrpcExporter(endpoint=grpc_endpoint, insecure=True, timeout=5)
    assert no_token.export(rag_trace(SpanMaker())) is SpanExportResult.FAILURE
    with_token = GrpcExporter(endpoint=grpc_endpoint, insecure=True, headers=bearer)
    assert with_token.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    no_token.shutdown()
    with_token.shutdown()

    # /stats tells nothing without the token; the probes stay open for the kubelet.
    assert _status(worker.url + "/stats") == 401
    assert _status(worker.url + "/healthz") == 200 and _status(worker.url + "/readyz") == 200
    stats = _stats(worker.url, TOKEN)
    assert stats["requests_unauthorized"] == 4 and stats["spans_received"] == 6  # 3 exports, 1 /stats
    assert worker.stats()["requests_unauthorized"] == 4  # /stats says what stats() says
    # Never printed: not in repr, not in the log.
    assert TOKEN not in repr(worker) and TOKEN not in repr(worker.auth_token) and TOKEN not in str(worker.auth_token)
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]


@pytest.mark.slow
def test_cli_token_from_env_or_file_never_printed(collector: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    for args, env in ((("--host", "0.0.0.0"), worker_env(RAGAUDIT_WORKER_TOKEN=TOKEN)),
                      (("--auth-token-file", str(token_file)), worker_env())):
        with worker_process(collector, *args, env=env) as worker:
            traces = worker.url + "/v1/traces"
            assert OTLPSpanExporter(endpoint=traces).export(rag_trace(SpanMaker())) is SpanExportResult.FAILURE
            sent = OTLPSpanExporter(endpoint=traces, headers={"authorization": f"Bearer {TOKEN}"})
            assert sent.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
            stats = _stats(worker.url, TOKEN)
            assert (stats["requests_unauthorized"], stats["spans_received"]) == (1, 3)
        err = worker.stop()
        assert worker.proc.returncode == 0 and TOKEN not in err and "Traceback" not in err
        assert "no bearer token" not in err  # the token was found, whichever way it came


def test_open_host_without_a_token_warns(collector: Any) -> None:
    with worker_process(collector, "--host", "0.0.0.0") as worker:
        assert _stats(worker.url)["spans_received"] == 0
    assert "with no bearer token" in worker.stop()


def _self_signed(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def test_tls_with_token_on_http_and_grpc(make_worker: Any, tmp_path: Path, monkeypatch: Any) -> None:
    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    from ragaudit.integrations.otlp import ServerTLS

    cert, key = _self_signed(tmp_path)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # requests lets these override the exporter's CA file
        monkeypatch.delenv(name, raising=False)
    worker = make_worker(auth_token=TOKEN, tls=ServerTLS(cert, key), grpc_port=0)
    assert worker.url.startswith("https://")
    bearer = {"authorization": f"Bearer {TOKEN}"}
    https = OTLPSpanExporter(endpoint=worker.url + "/v1/traces", certificate_file=cert, headers=bearer)
    assert https.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    credentials = grpc.ssl_channel_credentials(root_certificates=Path(cert).read_bytes())
    secure = GrpcExporter(endpoint=f"127.0.0.1:{worker.grpc_port}", credentials=credentials, headers=bearer)
    assert secure.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    secure.shutdown()
    # Plain HTTP to the TLS port gets nothing (the handshake fails), and nothing is taken.
    plain = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{worker.port}/v1/traces", headers=bearer, timeout=3)
    assert plain.export(rag_trace(SpanMaker())) is SpanExportResult.FAILURE
    assert worker.stats()["spans_received"] == 6


# -- 2. gzip bomb ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gzip_bomb_refused_in_memory_bounded_by_the_limit(collector: Any) -> None:
    bomb = gzip_bomb(2048)  # 2 MB on the wire, 2 GiB inflated
    assert len(bomb) < 3 * MIB
    senders = 4
    with worker_process(collector) as worker:
        assert raw_post(worker.port, encode(rag_trace(SpanMaker())), PROTOBUF) == 200  # every code path warm
        before = worker.memory_kb("VmRSS")
        statuses: list[int | None] = []
        threads = [threading.Thread(target=lambda: statuses.append(raw_post(
            worker.port, bomb, {**PROTOBUF, "Content-Encoding": "gzip"}))) for _ in range(senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        peak = worker.memory_kb("VmHWM")
        stats = _stats(worker.url)
    assert statuses == [413] * senders
    assert stats["requests_too_large"] == senders and stats["inflight_bytes"] < MIB
    # Each body is inflated up to the 32 MiB limit and no further, so the peak is at most one limit's
    # worth per sender (with the bytearray's slack); on main it was ~900 MB for these four.
    limit = 32 * MIB
    growth = (peak - before) * 1024
    print(f"gzip bomb x{senders}: peak growth {growth / MIB:.1f} MiB")
    assert growth < senders * limit * 1.5 + 32 * MIB, f"the worker grew {growth / MIB:.0f} MiB"


@pytest.mark.slow
def test_grpc_compressed_message_past_the_limit_is_refused_in_bounded_memory(collector: Any) -> None:
    # grpcio checks max_receive_message_length (our --max-request-bytes) after decompression: held on
    # main too; kept here so that it stays so.
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    request = ExportTraceServiceRequest()
    request.ParseFromString(_heavy_span())
    request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="blob").value.string_value = \
        "\0" * (128 * MIB)
    grpc_port = free_port()
    with worker_process(collector, "--grpc-port", str(grpc_port)) as worker:
        before = worker.memory_kb("VmRSS")
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}", compression=grpc.Compression.Gzip,
                                        options=[("grpc.max_send_message_length", -1)])
        with pytest.raises(grpc.RpcError) as refused:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=60)
        channel.close()
        peak = worker.memory_kb("VmHWM")
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    growth = (peak - before) * 1024
    print(f"gRPC bomb: peak growth {growth / MIB:.1f} MiB")
    assert growth < 2 * 32 * MIB, f"the worker grew {growth / MIB:.0f} MiB"


# -- 3. malformed bodies ------------------------------------------------------------------------------


def _nested_json(depth: int) -> bytes:
    """An OTLP/JSON request whose attribute is a kvlist *depth* deep (written as text: json.dumps
    would recurse as deep as the parser does)."""
    value = '{"stringValue": "x"}'
    for _ in range(depth):
        value = '{"kvlistValue": {"values": [{"key": "k", "value": ' + value + "}]}}"
    span = f'{{"traceId": "{"01" * 16}", "spanId": "{"02" * 8}", "name": "s", "attributes": [{{"key": "a", ' \
           f'"value": {value}}}]}}'
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()


def _nested_protobuf(depth: int) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "s"
    value = span.attributes.add(key="a").value
    for _ in range(depth):
        value = value.kvlist_value.values.add(key="k").value
    value.string_value = "x"
    return bytes(request.SerializeToString())


def test_malformed_bodies_answer_400_counted_never_500(make_worker: Any, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    worker = make_worker()
    good = encode(rag_trace(SpanMaker()))
    json_ct, gz = {"Content-Type": "application/json"}, {**PROTOBUF, "Content-Encoding": "gzip"}
    cases = [
        (_nested_json(400), json_ct),                                        # RecursionError in json_format
        (b'{"resourceSpans": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", json_ct),  # RecursionError in json
        (good, gz),                                                          # labelled gzip, is not
        (gzip.compress(good)[:-12], gz),                                     # a gzip stream cut short
        (gzip.compress(good) + b"not gzip", gz),                             # gzip, then garbage
        (good[:-5], PROTOBUF),                                               # protobuf cut short
        (b"\xff\xff\xff garbage", PROTOBUF),
        (_nested_protobuf(300), PROTOBUF),                                   # deeper than upb parses
    ]
    statuses = [raw_post(worker.port, body, headers) for body, headers in cases]
    assert statuses == [400] * len(cases)
    assert worker.stats()["requests_bad"] == len(cases)
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    # The worker is fine after all of it: a real export still lands, deflate and gzip members too.
    assert OTLPSpanExporter(endpoint=worker.url + "/v1/traces").export(rag_trace(SpanMaker())) \
        is SpanExportResult.SUCCESS
    two_members = gzip.compress(good[:40]) + gzip.compress(good[40:])
    assert raw_post(worker.port, two_members, gz) == 200
    assert raw_post(worker.port, good, {**PROTOBUF, "Content-Encoding": "br"}) == 415


# -- 4. in-flight memory in bytes -----------------------------------------------------------------------


def _heavy_span(big: int = 0, small: int = 0) -> bytes:
    """One span, not a root (so it waits for its trace), with one *big*-byte attribute or *small*
    tiny ones."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.parent_span_id = os.urandom(16), os.urandom(8), os.urandom(8)
    span.name = "heavy"
    if big:
        span.attributes.add(key="blob").value.string_value = "x" * big
    for i in range(small):
        span.attributes.add(key=f"k{i}").value.string_value = "v"
    return bytes(request.SerializeToString())


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["few-big-attributes", "many-small-attributes"])
def test_inflight_memory_bounded_in_bytes_with_503(collector: Any, shape: str) -> None:
    limit, requests = 20_000_000, 12
    bodies = [_heavy_span(big=5_000_000) if shape == "few-big-attributes" else _heavy_span(small=40_000)
              for _ in range(requests)]
    with worker_process(collector, "--max-inflight-bytes", str(limit), "--max-request-bytes", "8000000",
                        "--quiet", "300", "--max-wait", "600") as worker:
        assert raw_post(worker.port, encode(rag_trace(SpanMaker())), PROTOBUF) == 200  # every code path warm
        before = worker.memory_kb("VmRSS")
        statuses = []
        for body in bodies:
            request = urllib.request.Request(worker.url + "/v1/traces", data=body, headers=PROTOBUF)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    statuses.append((response.status, None))
            except urllib.error.HTTPError as exc:
                statuses.append((exc.code, exc.headers.get("Retry-After")))
        peak = worker.memory_kb("VmHWM")
        stats = _stats(worker.url)
    accepted = [s for s, _ in statuses if s == 200]
    refused = [(s, retry) for s, retry in statuses if s != 200]
    assert accepted and refused and all(s == 503 and retry and int(retry) >= 1 for s, retry in refused)
    assert stats["inflight_bytes"] <= limit and stats["requests_refused_full"] == len(refused)
    growth = (peak - before) * 1024
    # What is held is bounded by the limit, plus one request being decoded (its body, protobuf and
    # Python objects: a few times 8 MB at most); on main every request was taken.
    print(f"in-flight {shape}: {len(accepted)} of {requests} taken, {stats['inflight_bytes']} bytes counted, "
          f"peak growth {growth / MIB:.1f} MiB")
    assert growth < 2 * limit + 4 * 8_000_000, f"the worker grew {growth / MIB:.0f} MiB ({len(accepted)} taken)"


def test_max_request_bytes_must_fit_the_inflight_budget() -> None:
    from ragaudit.errors import ConfigurationError
    from ragaudit.integrations.otlp import Worker

    with pytest.raises(ConfigurationError, match="max_request_bytes"):
        Worker(max_request_bytes=10 * MIB, max_inflight_bytes=5 * MIB, auditor=object())


# -- 5. slowloris and the connection cap ---------------------------------------------------------------


class Trickle:
    """*n* connections that send a request line and then one header byte every 0.2 s, for ever."""

    def __init__(self, port: int, n: int) -> None:
        self.socks: list[socket.socket] = []
        for _ in range(n):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                sock.setblocking(False)
                self.socks.append(sock)
            except OSError:
                pass
        self.closed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for i, sock in enumerate(self.socks):
                if i in self.closed:
                    continue
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        self.closed.add(i)
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed.add(i)
                    continue
                try:
                    sock.send(b"a")
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed.add(i)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


def test_slowloris_closed_after_the_header_timeout_while_a_real_export_succeeds(make_worker: Any) -> None:
    from ragaudit.integrations.otlp import ConnectionLimits

    worker = make_worker(limits=ConnectionLimits(header_timeout_s=2.0))
    slow = Trickle(worker.port, 40)
    try:
        assert len(slow.socks) == 40
        exporter = OTLPSpanExporter(endpoint=worker.url + "/v1/traces")
        assert exporter.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
        wait_for(lambda: len(slow.closed) == 40, timeout=60, what="every trickling connection closed")
    finally:
        slow.close()
    assert worker.stats()["connections_closed_header_timeout"] >= 40


def test_connection_cap_closes_idle_and_slow_ones_for_a_real_export(make_worker: Any) -> None:
    from ragaudit.integrations.otlp import ConnectionLimits

    worker = make_worker(limits=ConnectionLimits(header_timeout_s=120.0, max_connections=20))
    slow = Trickle(worker.port, 60)
    try:
        wait_for(lambda: worker.stats()["connections_open"] <= 20 and len(slow.closed) >= 40, timeout=30,
                 what="the connections past the cap closed")
        exporter = OTLPSpanExporter(endpoint=worker.url + "/v1/traces")
        assert exporter.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    finally:
        slow.close()
    stats = worker.stats()
    assert stats["connections_evicted"] >= 41 and stats["connections_open"] <= 20


def test_body_trickled_past_the_body_timeout_is_408(make_worker: Any) -> None:
    from ragaudit.integrations.otlp import ConnectionLimits

    worker = make_worker(limits=ConnectionLimits(body_timeout_s=1.0))
    body = encode(rag_trace(SpanMaker()))
    sock = socket.create_connection(("127.0.0.1", worker.port), timeout=30)
    try:
        sock.sendall(f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        answer = sock.recv(65536)  # the rest of the body never comes
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert worker.stats()["requests_timed_out"] == 1


# -- 6. one owner of a gRPC port ------------------------------------------------------------------------


@pytest.mark.slow
def test_second_worker_on_a_taken_grpc_port_exits_2(collector: Any) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    grpc_port = free_port()
    with worker_process(collector, "--grpc-port", str(grpc_port)) as first:
        second = spawn_worker(collector, "--grpc-port", str(grpc_port))
        try:
            _, err = second.communicate(timeout=60)
        finally:
            if second.poll() is None:
                second.kill()
        assert second.returncode == 2, err
        assert f"cannot listen for OTLP/gRPC on 127.0.0.1:{grpc_port}" in err and "Traceback" not in err
        # The first one still owns the port and takes every span.
        exporter = GrpcExporter(endpoint=f"http://127.0.0.1:{grpc_port}", insecure=True)
        for _ in range(4):
            assert exporter.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert _stats(first.url)["spans_received"] == 12


def test_service_settings_that_cannot_work_are_said_at_construction(tmp_path: Path) -> None:
    from ragaudit.errors import ConfigurationError
    from ragaudit.integrations.otlp import BearerToken, ConnectionLimits, ServerTLS, Worker

    missing = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigurationError, match="cannot load the TLS certificate"):
        Worker(tls=ServerTLS(missing, missing), auditor=object())
    with pytest.raises(ConfigurationError, match="empty"):
        BearerToken("  ")
    with pytest.raises(ConfigurationError, match="header_timeout_s"):
        ConnectionLimits(header_timeout_s=float("nan"))
    with pytest.raises(ConfigurationError, match="cannot read the worker's token file"):
        BearerToken.from_file(missing)
