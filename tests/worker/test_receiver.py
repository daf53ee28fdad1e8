"""The worker's OTLP/HTTP receiver and its turns, over real HTTP, with an injected clock.

Spans are made with the real OTel SDK (tests/worker/spans.py) and sent with its real OTLP/HTTP
exporter or posted as the bodies it sends; the worker's output goes to a real OTLP receiver.
"""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.worker.conftest import wait_for
from tests.worker.file_exporter import Records
from tests.worker.spans import ANSWER, DOCS, QUESTION, SpanMaker, encode, genai_trace, rag_trace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker(make_worker: Any, clock: Clock) -> Any:
    return make_worker(clock=clock, quiet_s=2.0, max_wait_s=30.0, tick_s=0.02)


def post(url: str, body: bytes, content_type: str = "application/x-protobuf",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def judge_after(worker: Any, clock: Clock, collector: Any, count: int = 1) -> list[dict[str, Any]]:
    """Step the clock past quiet_s and wait for *count* judgements at the receiver."""
    clock.now += 2.5
    wait_for(lambda: worker.stats()["turns_judged"] + worker.stats()["turns_judge_failed"] >= count,
             what=f"{count} judgement(s)")
    worker.auditor.force_flush(10)
    return collector.wait_for_spans(count, predicate=lambda s: s["name"] == "ragaudit.judge")


def test_sdk_exporter_gzip_is_judged_with_evidence_ids(worker: Any, clock: Clock, collector: Any) -> None:
    spans = rag_trace(SpanMaker())
    exporter = OTLPSpanExporter(endpoint=worker.url + "/v1/traces", compression=Compression.Gzip)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert worker.stats()["traces_in_flight"] == 1  # not before quiet_s has passed on the clock
    [judge] = judge_after(worker, clock, collector)
    shown = json.loads(judge["attributes"]["input.value"])
    assert (shown["query"], shown["answer"], shown["document_ids"]) == (QUESTION, ANSWER, [d for d, _ in DOCS])
    root = next(s for s in spans if s.parent is None)
    assert judge["trace_id"] == f"{root.context.trace_id:032x}"
    assert judge["parent_span_id"] == f"{root.context.span_id:016x}"


def test_json_body_with_hex_ids(worker: Any, clock: Clock, collector: Any) -> None:
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode(rag_trace(SpanMaker())))
    doc = json_format.MessageToDict(request)
    for rs in doc["resourceSpans"]:  # OTLP/JSON: ids are hex, not protobuf JSON's base64
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        import base64

                        span[key] = base64.b64decode(span[key]).hex()
    status, headers, body = post(worker.url + "/v1/traces", json.dumps(doc).encode(), "application/json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {}
    [judge] = judge_after(worker, clock, collector)
    assert judge["trace_id"] == doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]


def test_chunked_body_without_content_length(worker: Any, clock: Clock, collector: Any) -> None:
    # Node's OTLP exporter streams its body: Transfer-Encoding: chunked, no Content-Length.
    body = gzip.compress(encode(rag_trace(SpanMaker())))
    conn = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=10)
    conn.request("POST", "/v1/traces", body=iter([body[:50], body[50:]]), encode_chunked=True,
                 headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    response = conn.getresponse()
    assert response.status == 200
    ExportTraceServiceResponse().ParseFromString(response.read())
    conn.close()
    judge_after(worker, clock, collector)


def test_partial_success_for_invalid_ids(worker: Any) -> None:
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode(rag_trace(SpanMaker())))
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id, bad.name = b"\x01\x02\x03", b"\x00" * 8, "broken"
    status, _, body = post(worker.url + "/v1/traces", request.SerializeToString())
    response = ExportTraceServiceResponse()
    response.ParseFromString(body)
    assert status == 200 and response.partial_success.rejected_spans == 1
    assert "invalid" in response.partial_success.error_message
    assert worker.stats()["spans_rejected"] == 1 and worker.stats()["spans_received"] == 3


def test_bad_requests_named(worker: Any) -> None:
    status, _, body = post(worker.url + "/v1/traces", b"{}", "text/plain")
    assert status == 415 and b"application/x-protobuf" in body
    status, _, body = post(worker.url + "/v1/traces", b"\xff\xff\xff garbage")
    assert status == 400 and b"not an OTLP protobuf" in body
    status, _, body = post(worker.url + "/v1/traces", b"[1, 2]", "application/json")
    assert status == 400 and b"OTLP/JSON" in body


def test_full_buffer_answers_503_with_retry_after(make_worker: Any, clock: Clock) -> None:
    worker = make_worker(clock=clock, max_spans=4)
    body = encode(rag_trace(SpanMaker()))  # 3 spans: fits
    assert post(worker.url + "/v1/traces", body)[0] == 200
    status, headers, _ = post(worker.url + "/v1/traces", body)  # 6 > 4: refused whole, nothing half-taken
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert get_json(worker.url + "/readyz")[0] == 200  # 3 of 4: still ready
    stats = worker.stats()
    assert (stats["spans_refused"], stats["spans_received"], stats["requests_refused_full"]) == (3, 3, 1)


def test_operational_endpoints(worker: Any) -> None:
    assert get_json(worker.url + "/healthz") == (200, {"status": "ok"})
    assert get_json(worker.url + "/readyz") == (200, {"ready": True, "reason": "ok"})
    status, stats = get_json(worker.url + "/stats")
    assert status == 200 and stats["spans_received"] == 0 and stats["accepting"] is True


def test_loop_guard_and_already_judged_traces(worker: Any, clock: Clock, collector: Any) -> None:
    own = rag_trace(SpanMaker(service="ragaudit-worker"))
    assert OTLPSpanExporter(endpoint=worker.url + "/v1/traces").export(own) is SpanExportResult.SUCCESS
    maker = SpanMaker()
    judged = rag_trace(maker)
    root = next(s for s in judged if s.parent is None)
    from opentelemetry import trace

    with maker.tracer.start_as_current_span("ragaudit.judge", context=trace.set_span_in_context(
            trace.NonRecordingSpan(root.context)), attributes={"openinference.span.kind": "EVALUATOR"}):
        pass
    assert post(worker.url + "/v1/traces", encode([*judged, *maker.take()]))[0] == 200
    clock.now += 2.5
    wait_for(lambda: worker.stats()["traces_assembled"] == 2, what="both traces read")
    stats = worker.stats()
    assert (stats["traces_own"], stats["spans_own"], stats["traces_already_judged"], stats["turns_found"]) == (
        1, 3, 1, 0)


def test_late_spans_counted_not_judged_twice(worker: Any, clock: Clock, collector: Any) -> None:
    spans = rag_trace(SpanMaker())
    assert post(worker.url + "/v1/traces", encode(spans))[0] == 200
    judge_after(worker, clock, collector)
    assert post(worker.url + "/v1/traces", encode(spans[:1]))[0] == 200
    clock.now += 5
    wait_for(lambda: worker.stats()["late_spans"] == 1, what="the late span counted")
    assert worker.stats()["turns_found"] == 1


def test_error_turn_traced_not_judged(worker: Any, clock: Clock) -> None:
    assert post(worker.url + "/v1/traces", encode(rag_trace(SpanMaker(), fail=True)))[0] == 200
    clock.now += 2.5
    wait_for(lambda: worker.stats()["turns_found"] == 1, what="the turn read")
    stats = worker.stats()
    assert stats["turns_unjudged_failed"] == 1 and stats["turns_submitted"] == 0


def _failed_trace_through_the_worker(make_worker: Any, clock: Clock) -> tuple[Any, dict[str, Any]]:
    """A failed run's trace sent to a worker: its one record and its Auditor's counts."""
    records = Records()
    worker = make_worker(clock=clock, tick_s=0.02, exporters=[records])
    assert post(worker.url + "/v1/traces", encode(rag_trace(SpanMaker(), fail=True)))[0] == 200
    clock.now += 2.5
    wait_for(lambda: worker.stats()["turns_found"] == 1, what="the turn read")
    assert worker.auditor.force_flush(10)
    assert worker.stats()["turns_unjudged_failed"] == 1
    [record] = records.records
    return record, worker.auditor.stats()


def test_error_turn_ends_as_a_record_with_its_reason(make_worker: Any, clock: Clock) -> None:
    # As in-process, and the same way (TurnSource.close_turn): every finished turn ends as a record; a failed
    # one says why it was not judged, and its Auditor counts it (score metrics and the records' readers count it).
    record, counts = _failed_trace_through_the_worker(make_worker, clock)
    assert (record.status, record.unjudged, record.judgement, record.turn.query) == (
        "unjudged", "failed", None, QUESTION)
    assert "model overloaded" in (record.turn.error or "")
    assert counts["unjudged_failed"] == 1 and counts["submitted"] == 0


def test_a_failed_run_ends_as_the_same_record_through_the_worker_and_in_process(make_worker: Any,
                                                                                 clock: Clock) -> None:
    # The same failed run, traced to the worker or run under the LangChain handler: the same unjudged record
    # (with its reason) and the same counts in its Auditor.
    runnables = pytest.importorskip("langchain_core.runnables", reason="the in-process half needs LangChain")
    from ragaudit import Auditor
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    def overloaded(question: str) -> str:
        raise RuntimeError("model overloaded")

    in_process = Records()
    with Auditor(audit_log=None, exporters=[in_process]) as auditor:
        chain = runnables.RunnableLambda(lambda q: q) | runnables.RunnableLambda(overloaded)
        with pytest.raises(RuntimeError, match="model overloaded"):
            chain.invoke(QUESTION, config={"callbacks": [RagAuditCallbackHandler(auditor=auditor)]})
        assert auditor.force_flush(10)
        local_counts = auditor.stats()
    record, counts = _failed_trace_through_the_worker(make_worker, clock)
    [local] = in_process.records
    assert (local.status, local.unjudged, local.judgement, local.turn.query) == (
        record.status, record.unjudged, record.judgement, record.turn.query) == ("unjudged", "failed", None, QUESTION)
    assert "model overloaded" in (local.turn.error or "") and "model overloaded" in (record.turn.error or "")
    unjudged = sorted(key for key in local_counts if key.startswith("unjudged_"))
    assert [local_counts[k] for k in unjudged] == [counts[k] for k in unjudged]
    assert local_counts["submitted"] == counts["submitted"] == 0


def test_genai_conventions_only(worker: Any, clock: Clock, collector: Any) -> None:
    spans = genai_trace(SpanMaker())
    assert post(worker.url + "/v1/traces", encode(spans))[0] == 200
    [judge] = judge_after(worker, clock, collector)
    shown = json.loads(judge["attributes"]["input.value"])
    assert (shown["query"], shown["answer"], shown["document_ids"]) == (QUESTION, ANSWER, [d for d, _ in DOCS])
    logs = collector.wait_for_logs(3)
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert {r["span_id"] for r in logs} == {f"{chat.context.span_id:016x}"}  # on the evaluated model call
    assert {r["attributes"]["gen_ai.response.id"] for r in logs} == {"chatcmpl-abc"}


def test_same_trace_twice_gives_the_same_ids(make_worker: Any, clock: Clock, collector: Any) -> None:
    # A redelivery or a restart: a second worker judges the same trace; backends store it once.
    body = encode(rag_trace(SpanMaker()))
    for _ in range(2):
        worker = make_worker(clock=clock, tick_s=0.02)
        assert post(worker.url + "/v1/traces", body)[0] == 200
        clock.now += 2.5
        wait_for(lambda w=worker: w.stats()["turns_judged"] == 1, what="the judgement")
        worker.stop(10)
    judges = collector.wait_for_spans(2, predicate=lambda s: s["name"] == "ragaudit.judge")
    assert judges[0]["span_id"] == judges[1]["span_id"] and judges[0]["trace_id"] == judges[1]["trace_id"]
    logs = collector.wait_for_logs(6)
    ids = [(r["attributes"]["ragaudit.judgement.id"], r["attributes"]["ragaudit.score.id"]) for r in logs]
    assert ids[:3] == ids[3:] and len(set(ids)) == 3


def test_otlp_grpc(make_worker: Any, clock: Clock, collector: Any) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    worker = make_worker(clock=clock, grpc_port=0, tick_s=0.02)
    exporter = GrpcExporter(endpoint=f"http://127.0.0.1:{worker.grpc_port}", insecure=True)
    assert exporter.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    [judge] = judge_after(worker, clock, collector)
    assert json.loads(judge["attributes"]["input.value"])["document_ids"] == [d for d, _ in DOCS]
    exporter.shutdown()


def test_budget_is_the_workers_auditors(make_worker: Any, clock: Clock, collector: Any) -> None:
    # Worker(cost=CostControl(budget=...)): the Auditor the worker makes holds it; the second turn is over it, counted.
    from ragaudit import Auditor, Budget, CostControl
    from ragaudit.errors import ConfigurationError
    from ragaudit.integrations.otlp import Worker

    worker = make_worker(clock=clock, quiet_s=2.0, max_wait_s=30.0, tick_s=0.02,
                         cost=CostControl(budget=Budget(max_calls=1)))
    exporter = OTLPSpanExporter(endpoint=worker.url + "/v1/traces")
    for _ in range(2):
        assert exporter.export(rag_trace(SpanMaker())) is SpanExportResult.SUCCESS
    clock.now += 2.5
    wait_for(lambda: worker.stats()["turns_submitted"] == 2 and worker.stats()["judge_pending"] == 0,
             what="both turns through the auditor")
    assert worker.stats()["turns_judged"] == 1 and worker.stats()["auditor"]["over_budget"] == 1
    with pytest.raises(ConfigurationError, match="cost"):
        Worker(auditor=Auditor(audit_log=None), cost=CostControl(budget=Budget(max_calls=1)))
