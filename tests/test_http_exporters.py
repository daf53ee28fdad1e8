from __future__ import annotations

import base64
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import Auditor, ConfigurationError, FakeJudge, Judgement, RagTurn, Retrieval, RetrievedDoc
from ragaudit.tracing import LangfuseExporter, PhoenixExporter, SpanRecorder
from tests.support.http_recorder import HttpRecorder
from tests.support.records import judged

ROOT = Path(__file__).resolve().parents[1]
TRACE, SPAN = "ab" * 16, "cd" * 8


def turn(relevant: bool = True) -> RagTurn:
    docs = (RetrievedDoc(id="kb-1", content="one", rank=1), RetrievedDoc(id="kb-2", content="two", rank=2))
    return RagTurn(turn_id="t1", query="q", answer="a", documents=docs, trace_id=TRACE, span_id=SPAN,
                   relevant_ids=["kb-2"] if relevant else None,
                   retrievals=(Retrieval(name="kb", documents=docs),))


JUDGEMENT = Judgement(faithfulness=0.9, context_relevance=None, answer_relevance=0.4, reason="because",
                      judge="fake")


def test_langfuse_scores_wire_format() -> None:
    with HttpRecorder() as rec:
        sink = LangfuseExporter(rec.url, public_key="pk-lf-1", secret_key="sk-lf-secret")
        sink.export([judged(turn(), JUDGEMENT)])
        assert sink.force_flush(10)
        sink.shutdown()
        reqs = rec.requests
    assert {r["path"] for r in reqs} == {"/api/public/scores"}
    assert reqs[0]["headers"]["authorization"] == "Basic " + base64.b64encode(b"pk-lf-1:sk-lf-secret").decode()
    bodies = {r["body"]["name"]: r["body"] for r in reqs}
    # the missing score is not sent at all (never as 0); retrieval metrics are scores too
    assert set(bodies) == {"faithfulness", "answer_relevance", "retrieval.recall@5", "retrieval.precision@5",
                           "retrieval.mrr@10", "retrieval.ndcg@10"}
    f = bodies["faithfulness"]
    assert f["traceId"] == TRACE and f["observationId"] == SPAN and f["dataType"] == "NUMERIC"
    assert f["value"] == 0.9 and f["comment"] == "because"
    assert bodies["retrieval.mrr@10"]["value"] == 0.5
    assert "sk-lf-secret" not in repr(sink)
    assert sink.stats()["sent"] == 6


def test_langfuse_exporter_needs_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="public_key"):
        LangfuseExporter("http://127.0.0.1:1")


def test_phoenix_annotations_wire_format_with_documents() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    recorder = SpanRecorder(provider)
    traced = recorder.record_turn(turn())
    with HttpRecorder() as rec:
        sink = PhoenixExporter(rec.url + "/v1/traces")
        sink.export([judged(traced, JUDGEMENT, recorder)])
        assert sink.force_flush(10)
        sink.shutdown()
        reqs = rec.requests
    spans = [r for r in reqs if r["path"].startswith("/v1/span_annotations")]
    docs = [r for r in reqs if r["path"].startswith("/v1/document_annotations")]
    # the worker batches what is queued when it wakes: the annotations may come in one POST or several
    data = [d for r in spans for d in r["body"]["data"]]
    assert sorted(d["name"] for d in data) == ["answer_relevance", "faithfulness"]
    assert all(d["span_id"] == traced.span_id and d["annotator_kind"] == "LLM" for d in data)
    by_name = {d["name"]: d["result"] for d in data}
    assert by_name["faithfulness"] == {"label": "pass", "score": 0.9, "explanation": "because"}
    assert by_name["answer_relevance"]["label"] == "fail"
    doc_data = sorted((d for r in docs for d in r["body"]["data"]), key=lambda d: d["document_position"])
    assert [(d["document_position"], d["result"]["label"]) for d in doc_data] == [(0, "irrelevant"), (1, "relevant")]
    assert traced.retrieval_span_ids and doc_data[0]["span_id"] == traced.retrieval_span_ids[0]


@pytest.mark.parametrize("status", [500, 401])
def test_failing_backend_never_blocks_and_is_counted(status: int, caplog: pytest.LogCaptureFixture) -> None:
    with HttpRecorder() as rec:
        rec.status = status
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk", max_retries=2, backoff_s=0.01)
        with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, exporters=[sink]) as aud:
            with caplog.at_level(logging.WARNING, logger="ragaudit"):
                for i in range(5):
                    assert aud.submit(RagTurn(turn_id=f"t{i}", query="q", answer="a", trace_id=TRACE,
                                              span_id=SPAN)) == "queued"
                aud.force_flush(10)
            stats = aud.stats()
    assert stats["judged"] == 5
    assert stats["export_errors"] == 5
    expected_attempts = 5 * (3 if status == 500 else 1)  # 401 is not retried
    assert len(rec.requests) == expected_attempts
    assert sum(f"HTTP {status}" in r.getMessage() for r in caplog.records) == 1  # logged once per kind


def test_unreachable_backend_shutdown_returns_within_timeout() -> None:
    # The backend takes the request and holds it far longer than the shutdown budget (and the sink's
    # own HTTP timeout is longer still), so only shutdown's deadline can bring it back. No clock is
    # read here: "within the timeout" shows as shutdown returning with the request still unanswered,
    # nothing counted sent and every item counted failed; waiting for the backend would have sent them.
    with HttpRecorder() as rec:
        rec.delay_s = 120.0
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk", max_retries=0, timeout_s=600.0)
        items = len(sink.record_requests(judged(turn(), JUDGEMENT)))
        sink.export([judged(turn(), JUDGEMENT)])
        assert len(rec.wait_for(1)) >= 1  # the request is at the backend, unanswered
        sink.shutdown(timeout_s=0.5)
        assert sink.stats() == {"sent": 0, "failed": items, "dropped": 0, "retries": 0, "rejected": 0}
        assert sink.errors == items
        sink.export([judged(turn(), JUDGEMENT)])  # after shutdown: dropped and counted per item, never queued
        assert sink.stats()["dropped"] == items and sink.errors == 2 * items


def test_configure_langfuse_points_otlp_at_langfuse(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, os.getcwd())
        from tests.support.otlp_receiver import OTLPReceiver
        from ragaudit import tracing
        from ragaudit.tracing import SpanRecorder
        from ragaudit import RagTurn
        with OTLPReceiver() as rx:
            os.environ.update(LANGFUSE_HOST=rx.endpoint, LANGFUSE_PUBLIC_KEY="pk-lf", LANGFUSE_SECRET_KEY="sk-lf")
            provider = tracing.configure(langfuse=True)
            SpanRecorder().record_turn(RagTurn(turn_id="t", query="q", answer="a"))
            provider.force_flush()
            spans = rx.wait_for_spans(1, timeout=10)
            req = rx.requests[0]
            print(req["path"], req["headers"]["authorization"], spans[0]["attributes"]["langfuse.observation.type"])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    path, auth, obs_type = proc.stdout.split()[0], proc.stdout.split()[1:3], proc.stdout.split()[3]
    assert path == "/api/public/otel/v1/traces"
    assert auth == ["Basic", base64.b64encode(b"pk-lf:sk-lf").decode()]
    assert obs_type == "span"


@pytest.mark.timeout(120)
def test_host_chain_unchanged_while_the_backend_answers_500_slowly() -> None:
    """A LangChain chain with the handler returns the same answers while the Langfuse backend answers
    500 after a delay: the chains return while the sink is still failing (nothing waits on it), and
    every failure is counted afterwards."""
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support.langchain_support import KB, rag_chain
    from tests.support.topics import QUESTIONS

    kb = KB()
    chain = rag_chain(kb.retriever)
    questions = list(QUESTIONS)[:4]
    baseline = [chain.invoke(q) for q in questions]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    with HttpRecorder() as rec:
        rec.status, rec.delay_s = 500, 0.3
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk", max_retries=1, backoff_s=0.01)
        auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0, "context_relevance": 1.0,
                                               "answer_relevance": 1.0}),
                          audit_log=None, exporters=[sink], tracer_provider=provider)
        handler = RagAuditCallbackHandler(auditor=auditor)
        answers = [chain.invoke(q, config={"callbacks": [handler]}) for q in questions]
        in_flight = sink.stats()
        # Everything was handled, but the scores never reached the backend: flush says so.
        assert handler.force_flush(60) is False
        stats = auditor.stats()
        auditor.shutdown()
    assert answers == baseline == [kb.answers[q] for q in questions]
    # when the last chain returned, the slow failing backend had not finished with the scores
    assert in_flight["failed"] < 3 * len(questions)
    assert stats["judged"] == len(questions)
    assert stats["export_errors"] == 3 * len(questions)  # three scores per judgement, each given up on
    assert sink.stats()["retries"] == 3 * len(questions)


def test_langfuse_host_precedence_is_the_same_for_traces_and_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragaudit.tracing.setup import _langfuse_target

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    monkeypatch.setenv("LANGFUSE_HOST", "http://old.example:3000")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://new.example:3000")
    url, _ = _langfuse_target(None, None)
    sink = LangfuseExporter()
    try:
        assert url == "http://new.example:3000/api/public/otel/v1/traces"
        assert sink.endpoint == "http://new.example:3000"
    finally:
        sink.shutdown(0.1)
    monkeypatch.delenv("LANGFUSE_BASE_URL")
    sink = LangfuseExporter()
    try:
        assert sink.endpoint == "http://old.example:3000" and _langfuse_target(None, None)[0].startswith(
            "http://old.example:3000/")
    finally:
        sink.shutdown(0.1)


def test_score_ids_are_stable_and_distinct() -> None:
    from ragaudit.tracing.http_exporters import score_id

    ids = {score_id(TRACE, SPAN, judge, name) for judge in ("a", "b") for name in ("faithfulness", "answer_relevance")}
    assert len(ids) == 4
    assert score_id(TRACE, SPAN, "a", "faithfulness") == score_id(TRACE, SPAN, "a", "faithfulness")
    sink = LangfuseExporter("http://127.0.0.1:9", public_key="pk", secret_key="sk")
    try:
        first = [body["id"] for _, body in sink.record_requests(judged(turn(), JUDGEMENT))]
        assert first == [body["id"] for _, body in sink.record_requests(judged(turn(), JUDGEMENT))]
        assert len(set(first)) == len(first) == 6
    finally:
        sink.shutdown(0.1)


def test_every_exporter_of_ragaudit_is_on_the_one_interface() -> None:
    """One interface for every exporter (issue 49): a BaseExporter, with the protocol's 30 s defaults
    for force_flush and shutdown, and nothing of the old sink interface (emit, bind_recorder)."""
    import inspect

    from ragaudit import BaseExporter
    from ragaudit.auditor._exporting import OnJudgementExporter
    from ragaudit.auditor._sessions import OpenSessions
    from ragaudit.tracing import HttpExporter, ScoreMetricsExporter
    from ragaudit.tracing._judge_spans import JudgeSpanExporter
    from ragaudit.tracing.evaluation_logs import EvaluationLogExporter

    for cls in (HttpExporter, PhoenixExporter, LangfuseExporter, EvaluationLogExporter, JudgeSpanExporter,
                ScoreMetricsExporter, OpenSessions, OnJudgementExporter):
        assert issubclass(cls, BaseExporter), cls
        for method in ("force_flush", "shutdown"):
            assert inspect.signature(getattr(cls, method)).parameters["timeout_s"].default == 30.0, (cls, method)
        assert not hasattr(cls, "emit") and not hasattr(cls, "bind_recorder"), cls
