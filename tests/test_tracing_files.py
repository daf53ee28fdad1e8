"""JSONL span files and the audit log: write, read back, content capture off, damaged files."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from ragaudit.errors import ConfigurationError, RagAuditError
from ragaudit.records import Citation, Judgement, RagTurn, RetrievedDoc
from ragaudit.tracing import (
    AuditLog,
    JsonlSpanExporter,
    SpanRecorder,
    read_audit_log,
    read_spans,
)

AUDIT_KEYS = {
    "ts",
    "sentences",
    "document_grades",
    "graded_metrics",
    "citation_checks",
    "citation_precision",
    "citation_recall",
    "details",
    "judge_identity",
    "raw_output",
    "turn_id",
    "trace_id",
    "span_id",
    "framework",
    "model",
    "query",
    "answer",
    "documents",
    "citations",
    "relevant_ids",
    "retrieval_metrics",
    "judge",
    "judge_status",
    "faithfulness",
    "context_relevance",
    "answer_relevance",
    "reason",
    "error",
    "latency_s",
    "usage",
}


def make_turn(turn_id: str = "turn-7") -> RagTurn:
    return RagTurn(
        turn_id=turn_id,
        query="Can I return a sale item?",
        answer="Sale items are final sale (source: return_policy.pdf).",
        documents=(
            RetrievedDoc(
                id="kb-sale",
                content="Items bought on sale are final sale and cannot be returned.",
                score=0.77,
                rank=1,
                source="return_policy.pdf",
                metadata={"section": "Sale items"},
            ),
            RetrievedDoc(id="kb-ship", content="Shipping takes 3-5 days.", score=0.2, rank=2),
        ),
        citations=(Citation("kb-sale", 1, "(source: return_policy.pdf)", "marker"),),
        model="gpt-test",
        framework="llamaindex",
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        relevant_ids={"kb-sale": 2},
    )


def make_judgement() -> Judgement:
    return Judgement(
        faithfulness=1.0,
        context_relevance=None,
        answer_relevance=0.5,
        reason="Grounded in the sale-items rule.",
        judge="lexical",
        latency_s=0.003,
        usage={"calls": 1},
    )


def run_threads(work: Callable[[], None], count: int) -> None:
    threads = [threading.Thread(target=work) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_span_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "spans" / "trace.jsonl"
    exporter = JsonlSpanExporter(path)
    assert isinstance(exporter, SpanExporter)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    recorder = SpanRecorder(provider, judge_trace="separate")  # the judge span links to the turn
    turn = recorder.record_turn(make_turn(), judge_status="queued", retrieval_metrics={"mrr@10": 1.0})
    recorder.record_judgement(turn, make_judgement())
    provider.shutdown()

    spans = {s["name"]: s for s in read_spans(path)}
    assert set(spans) == {"ragaudit.turn", "retrieval", "ragaudit.judge"}
    root, judge = spans["ragaudit.turn"], spans["ragaudit.judge"]
    assert root["trace_id"] == turn.trace_id and root["span_id"] == turn.span_id
    assert root["parent_span_id"] is None
    assert spans["retrieval"]["parent_span_id"] == root["span_id"]
    assert judge["parent_span_id"] is None and judge["trace_id"] != root["trace_id"]
    assert judge["links"] == [
        {
            "trace_id": root["trace_id"],
            "span_id": root["span_id"],
            "attributes": {"ragaudit.link.type": "judged_turn"},
        }
    ]
    assert root["attributes"]["ragaudit.document.ids"] == ["kb-sale", "kb-ship"]
    assert root["attributes"]["ragaudit.retrieval.mrr@10"] == 1.0
    assert judge["attributes"]["ragaudit.judge.faithfulness"] == 1.0
    assert "ragaudit.judge.context_relevance" not in judge["attributes"]
    assert [e["attributes"]["gen_ai.evaluation.name"] for e in judge["events"]] == [
        "faithfulness",
        "context_relevance",
        "answer_relevance",
    ]
    assert root["kind"] == "INTERNAL" and root["status"]["code"] == "UNSET"
    assert root["end_time_ns"] >= root["start_time_ns"] > 0
    assert root["resource"]["telemetry.sdk.language"] == "python"
    assert root["scope"] == "ragaudit"
    assert exporter.export(()) is SpanExportResult.SUCCESS


def test_span_file_appends_whole_lines_from_many_threads(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonlSpanExporter(path)
    provider = TracerProvider(shutdown_on_exit=False)
    tracer = provider.get_tracer("t")
    finished: list[Any] = []
    for i in range(40):
        span = tracer.start_span(f"s{i}", attributes={"payload": "y" * 2000})
        span.end()
        finished.append(span)

    def work() -> None:
        for span in finished:
            assert exporter.export([span]) is SpanExportResult.SUCCESS

    run_threads(work, 8)
    exporter.shutdown()
    spans = read_spans(path)
    assert len(spans) == 8 * 40
    assert all(s["attributes"]["payload"] == "y" * 2000 for s in spans)
    assert exporter.export(finished[:1]) is SpanExportResult.FAILURE  # after shutdown


def test_audit_log_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.write(make_turn(), make_judgement(), judge_status="judged", retrieval_metrics={"ndcg@10": 0.63})
        log.write(
            make_turn("turn-8"),
            Judgement.failed("lexical", "JudgeError: unparseable output"),
            judge_status="failed",
        )
    first, second = read_audit_log(path)
    assert set(first) == AUDIT_KEYS
    assert first["turn_id"] == "turn-7"
    assert first["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert first["span_id"] == "b7ad6b7169203331"
    assert (first["framework"], first["model"]) == ("llamaindex", "gpt-test")
    assert first["query"] == "Can I return a sale item?"
    assert first["documents"][0] == {
        "id": "kb-sale",
        "rank": 1,
        "score": 0.77,
        "source": "return_policy.pdf",
        "metadata": {"section": "Sale items"},
        "content": "Items bought on sale are final sale and cannot be returned.",
    }
    assert first["citations"] == [
        {"doc_id": "kb-sale", "rank": 1, "marker": "(source: return_policy.pdf)", "method": "marker"}
    ]
    assert first["relevant_ids"] == {"kb-sale": 2}
    assert first["retrieval_metrics"] == {"ndcg@10": 0.63}
    assert (first["faithfulness"], first["context_relevance"], first["answer_relevance"]) == (1.0, None, 0.5)
    assert first["judge"] == "lexical" and first["judge_status"] == "judged"
    assert first["reason"] == "Grounded in the sale-items rule."
    assert first["usage"] == {"calls": 1}
    assert first["ts"].endswith("Z")
    assert second["error"] == "JudgeError: unparseable output"
    assert (second["faithfulness"], second["context_relevance"], second["answer_relevance"]) == (
        None,
        None,
        None,
    )
    assert second["retrieval_metrics"] is None


def test_audit_log_without_content(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, capture_content=False)
    log.write(make_turn(), make_judgement(), judge_status="judged")
    log.close()
    raw = path.read_text(encoding="utf-8")
    for secret in ("return a sale item", "final sale", "sale-items rule", "Shipping takes", "Sale items"):
        assert secret not in raw, secret
    (line,) = read_audit_log(path)
    assert line["query"] is None and line["answer"] is None and line["reason"] is None
    assert line["query_chars"] == len("Can I return a sale item?")
    assert line["answer_chars"] == len("Sale items are final sale (source: return_policy.pdf).")
    assert line["reason_chars"] == len("Grounded in the sale-items rule.")
    assert [d["content"] for d in line["documents"]] == [None, None]
    assert [d["content_chars"] for d in line["documents"]] == [59, 24]
    assert [d["id"] for d in line["documents"]] == ["kb-sale", "kb-ship"]
    assert line["citations"][0]["marker"] is None
    assert line["faithfulness"] == 1.0


def test_audit_log_redacts_every_text(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, redact=lambda text: re.sub("final|rule|Sale items", "[x]", text)) as log:
        log.write(make_turn(), make_judgement(), judge_status="judged")
    raw = path.read_text(encoding="utf-8")
    for secret in ("final", "rule", "Sale items"):  # in content, answer, reason, metadata
        assert secret not in raw, secret
    assert "[x]" in raw
    assert '"kb-sale"' in raw  # ids are not text


def test_audit_log_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    turn, j = make_turn(), make_judgement()

    def work() -> None:
        for _ in range(50):
            log.write(turn, j, judge_status="judged")

    run_threads(work, 8)
    log.close()
    assert len(read_audit_log(path)) == 400


def test_closed_audit_log_refuses_writes(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.close()
    log.close()
    assert log.closed
    with pytest.raises(RagAuditError, match="closed"):
        log.write(make_turn(), make_judgement(), judge_status="judged")


def test_truncated_last_line_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.write(make_turn(), make_judgement(), judge_status="judged")
        log.write(make_turn("turn-9"), make_judgement(), judge_status="judged")
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - 40], encoding="utf-8")  # killed mid-write
    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        lines = read_audit_log(path)
    assert [line["turn_id"] for line in lines] == ["turn-7"]
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_last_line_without_newline_but_complete_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(json.dumps({"turn_id": "a"}) + "\n" + json.dumps({"turn_id": "b"}), encoding="utf-8")
    assert [line["turn_id"] for line in read_audit_log(path)] == ["a", "b"]


def test_corrupt_line_in_the_middle_raises(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text('{"name": "a"}\n{"name": \n{"name": "c"}\n', encoding="utf-8")
    with pytest.raises(RagAuditError, match="line 2"):
        read_spans(path)


def test_missing_file_and_unwritable_path(tmp_path: Path) -> None:
    with pytest.raises(RagAuditError, match="cannot read"):
        read_audit_log(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigurationError, match="audit log"):
        AuditLog(tmp_path)  # a directory
    with pytest.raises(ConfigurationError, match="span file"):
        JsonlSpanExporter(tmp_path)
