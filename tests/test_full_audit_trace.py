"""The full audit in the trace (judge span attributes and sentence events), the sinks (Phoenix document
annotations from grades, Langfuse scores for graded metrics) and the audit log, through the Auditor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import Auditor
from ragaudit.citations import find_citations
from ragaudit.integrations import closer_for
from ragaudit.judges.chat import ChatRagJudge
from ragaudit.records import DocumentGrade, Judgement, RagTurn, Retrieval, RetrievedDoc, SentenceVerdict
from ragaudit.tracing import LangfuseExporter, PhoenixExporter, SpanRecorder
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.support.http_recorder import HttpRecorder
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer
from tests.support.records import judged

pytestmark = pytest.mark.timeout(60)

DOCS = (RetrievedDoc(id="kb-refunds", content="A full refund within 30 days of purchase.", rank=1),
        RetrievedDoc(id="kb-gifts", content="Gift cards are not refundable.", rank=2))
ANSWER = "You get a refund within 30 days [1]. Gift cards are refundable [1]."
TURN = RagTurn(turn_id="t1", query="Refund window?", answer=ANSWER, documents=DOCS,
               citations=find_citations(ANSWER, DOCS), trace_id="ab" * 16, span_id="cd" * 8,
               retrievals=(Retrieval(name="kb", documents=DOCS),))
JUDGEMENT = Judgement(
    faithfulness=0.5, context_relevance=1.0, answer_relevance=1.0, reason="r", judge="chat:m",
    sentences=(SentenceVerdict(1, "You get a refund within 30 days [1].", "supported", (1,), ("kb-refunds",)),
               SentenceVerdict(2, "Gift cards are refundable [1].", "contradicted")),
    document_grades=(DocumentGrade(1, "kb-refunds", 3), DocumentGrade(2, "kb-gifts", 1)),
)


def test_judge_span_carries_grades_metrics_citation_scores_and_sentence_events() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    SpanRecorder(provider).record_judgement(TURN, JUDGEMENT)
    [span] = [s for s in exporter.get_finished_spans() if s.name == c.SPAN_JUDGE]
    attrs = dict(span.attributes or {})
    assert json.loads(attrs[c.ATTR_DOCUMENT_GRADES])[0] == {"rank": 1, "doc_id": "kb-refunds", "grade": 3,
                                                           "method": "llm"}
    assert attrs[c.retrieval_metric_key("graded_ndcg@10")] == 1.0
    assert attrs[c.retrieval_metric_key("graded_P@5")] == pytest.approx(0.2)
    assert attrs[c.ATTR_CITATION_PRECISION] == 0.5  # [1] holds for S1, not for S2
    assert attrs[c.ATTR_CITATION_RECALL] == 1.0
    assert attrs[c.ATTR_SENTENCES_UNSUPPORTED] == 1
    events = [e for e in span.events if e.name == c.EVENT_SENTENCE]
    # the problem sentence first
    assert [(e.attributes[c.ATTR_SENTENCE_INDEX], e.attributes[c.ATTR_SENTENCE_VERDICT])  # type: ignore[index]
            for e in events] == [(2, "contradicted"), (1, "supported")]
    assert events[1].attributes[c.ATTR_SENTENCE_TEXT] == "You get a refund within 30 days [1]."  # type: ignore[index]


def test_sentence_events_are_capped_and_the_rest_counted() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    many = tuple(SentenceVerdict(i, f"s{i}", "supported" if i % 2 else "unsupported") for i in range(1, 71))
    SpanRecorder(provider, capture_content=False).record_judgement(TURN, Judgement(judge="j", sentences=many))
    [span] = exporter.get_finished_spans()
    events = [e for e in span.events if e.name == c.EVENT_SENTENCE]
    assert len(events) == c.MAX_SENTENCE_EVENTS
    assert (span.attributes or {})[c.ATTR_SENTENCES_EVENTS_DROPPED] == 70 - c.MAX_SENTENCE_EVENTS
    assert all(e.attributes[c.ATTR_SENTENCE_VERDICT] == "unsupported" for e in events[:35])  # type: ignore[index]
    assert all(c.ATTR_SENTENCE_TEXT not in (e.attributes or {}) for e in events)  # content capture off


def test_phoenix_document_annotations_from_grades_and_langfuse_graded_scores() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    recorder = SpanRecorder(provider)
    traced = recorder.record_turn(TURN)
    with HttpRecorder() as rec:
        phoenix = PhoenixExporter(rec.url + "/v1/traces")
        phoenix.export([judged(traced, JUDGEMENT, recorder)])
        langfuse = LangfuseExporter(rec.url, public_key="pk", secret_key="sk")
        langfuse.export([judged(traced, JUDGEMENT, recorder)])
        assert phoenix.force_flush(10) and langfuse.force_flush(10)
        phoenix.shutdown()
        langfuse.shutdown()
        reqs = rec.requests
    docs = [d for r in reqs if r["path"].startswith("/v1/document_annotations") for d in r["body"]["data"]]
    assert [(d["name"], d["document_position"], d["result"]["score"], d["annotator_kind"]) for d in docs] == [
        ("graded_relevance", 0, 3.0, "LLM"), ("graded_relevance", 1, 1.0, "LLM")]
    assert traced.retrieval_span_ids and docs[0]["span_id"] == traced.retrieval_span_ids[0]
    scores = {r["body"]["name"]: r["body"]["value"] for r in reqs if r["path"] == "/api/public/scores"}
    assert scores["retrieval.graded_ndcg@10"] == 1.0 and scores["retrieval.graded_mrr@10"] == 1.0
    assert scores["citation_precision"] == 0.5 and scores["citation_recall"] == 1.0


def test_auditor_with_full_audit_judge_writes_the_audit_log(srv: LLMServer, tmp_path: Path) -> None:
    srv.enqueue(json.dumps({
        "faithfulnessScore": 1, "contextRelevanceScore": 1, "answerRelevanceScore": 1, "reason": "r",
        "sentences": [{"n": 1, "verdict": "supported", "docs": [1]}, {"n": 2, "verdict": "contradicted", "docs": []}],
        "documents": [{"n": 1, "grade": 3}, {"n": 2, "grade": 1}]}))
    judge = open_judge(ChatRagJudge, srv, protocol="full-audit")
    log = tmp_path / "audit.jsonl"
    with Auditor(judge, mode="inline", audit_log=log) as auditor:
        auditor.submit(TURN)
    [line] = read_audit_log(log)
    assert line["faithfulness"] == 0.5 and line["details"]["judge_faithfulness"] == 1
    assert [s["verdict"] for s in line["sentences"]] == ["supported", "contradicted"]
    assert [g["grade"] for g in line["document_grades"]] == [3, 1]
    assert line["graded_metrics"]["graded_ndcg@10"] == 1.0
    assert [(ch["sentence"], ch["doc_id"], ch["holds"]) for ch in line["citation_checks"]] == [
        (1, "kb-refunds", True), (2, "kb-refunds", False)]
    assert (line["citation_precision"], line["citation_recall"]) == (0.5, 1.0)


def test_inline_judging_puts_graded_metrics_on_the_turn_span_and_grades_on_the_retrieval_span() -> None:
    """Through a real LangChain chain: judged before the turn span ends, so the turn and retrieval spans
    carry the full audit too (in background mode only the judge span can, see _audit_spans)."""
    from ragaudit.demo.kb import QUESTIONS
    from ragaudit.demo.pipelines import build_langchain_chain
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from ragaudit.judges.lexical import LexicalJudge

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    auditor = Auditor(LexicalJudge(), mode="inline", tracer_provider=provider)
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    try:
        build_langchain_chain().invoke(QUESTIONS[0].text, config={"callbacks": [handler]})
        assert closer_for(auditor).force_flush(30)
    finally:
        auditor.shutdown(10)
    spans = {s.name.split(" ")[0]: s for s in exporter.get_finished_spans()}
    judge, turn, retrieval = (dict(spans[n].attributes or {}) for n in (c.SPAN_JUDGE, c.SPAN_TURN, "retrieval"))
    key = c.retrieval_metric_key("graded_ndcg@10")
    assert turn[key] == judge[key]
    assert turn[c.ATTR_CITATION_PRECISION] == judge[c.ATTR_CITATION_PRECISION] == 1.0
    grades = [g["grade"] for g in json.loads(judge[c.ATTR_DOCUMENT_GRADES])]
    assert json.loads(retrieval[c.ATTR_RETRIEVAL_DOCUMENT_GRADES]) == grades == [3, 3]
