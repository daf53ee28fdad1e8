"""gen_ai.evaluation.result as OTel log records in-process (issue 28 items 1-2): an Auditor with the
EvaluationLogExporter, the real Logs SDK and OTLP log exporter, a real OTLP receiver."""

from __future__ import annotations

from typing import Any

import pytest

from ragaudit import Auditor, ContentPolicy, LexicalJudge, RagTurn, RetrievedDoc
from ragaudit.errors import ConfigurationError
from ragaudit.tracing.evaluation_logs import EVALUATED_RESPONSE_ID, EVALUATED_SPAN_ID, EvaluationLogExporter

TRACE, TURN_SPAN, LLM_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "00f067aa0ba902b7"


def _turn(**metadata: Any) -> RagTurn:
    return RagTurn(turn_id="t-1", query="What is the refund window?", answer="Refunds within 30 days.",
                   documents=(RetrievedDoc(id="d1", content="Refunds are accepted within 30 days."),),
                   trace_id=TRACE, span_id=TURN_SPAN, metadata=metadata)


def test_log_records_on_the_evaluated_span(collector: Any, memory_provider: Any, memory_exporter: Any) -> None:
    sink = EvaluationLogExporter(endpoint=collector.endpoint)
    auditor = Auditor(LexicalJudge(), mode="inline", tracer_provider=memory_provider, audit_log=None, exporters=[sink])
    assert auditor.submit(_turn(**{EVALUATED_SPAN_ID: LLM_SPAN, EVALUATED_RESPONSE_ID: "chatcmpl-7"})) == "judged"
    assert auditor.force_flush(10) and sink.force_flush(10)
    logs = collector.wait_for_logs(3)
    assert {(r["trace_id"], r["span_id"], r["event_name"]) for r in logs} == {
        (TRACE, LLM_SPAN, "gen_ai.evaluation.result")}
    assert [r["attributes"]["gen_ai.evaluation.name"] for r in logs] == [
        "faithfulness", "context_relevance", "answer_relevance"]
    assert all(r["attributes"]["gen_ai.response.id"] == "chatcmpl-7" for r in logs)
    assert all(isinstance(r["attributes"]["gen_ai.evaluation.score.value"], float) for r in logs)
    # The span events carry the same attributes: the evaluated completion's id, not the judge's.
    [judge] = [s for s in memory_exporter.get_finished_spans() if s.name == "ragaudit.judge"]
    events = [dict(e.attributes or {}) for e in judge.events if e.name == "gen_ai.evaluation.result"]
    assert [e["gen_ai.response.id"] for e in events] == ["chatcmpl-7"] * 3
    auditor.shutdown(10)
    assert sink.errors == 0


def test_without_an_evaluated_span_the_turn_span_and_no_completion_id(collector: Any) -> None:
    sink = EvaluationLogExporter(endpoint=collector.endpoint)
    auditor = Auditor(LexicalJudge(), mode="inline", audit_log=None, exporters=[sink],
                      content=ContentPolicy(capture_content=False))
    auditor.submit(_turn())
    assert sink.force_flush(10)
    logs = collector.wait_for_logs(3)
    assert {r["span_id"] for r in logs} == {TURN_SPAN}
    assert all("gen_ai.response.id" not in r["attributes"] for r in logs)
    assert all("gen_ai.evaluation.explanation" not in r["attributes"] for r in logs)  # capture off
    auditor.shutdown(10)


def test_failed_exports_are_counted() -> None:
    sink = EvaluationLogExporter(endpoint="http://127.0.0.1:9")  # nothing listens there
    auditor = Auditor(LexicalJudge(), mode="inline", audit_log=None, exporters=[sink])
    auditor.submit(_turn())
    sink.force_flush(20)
    assert sink.errors == 3
    auditor.shutdown(5)


def test_bad_arguments_named() -> None:
    with pytest.raises(ConfigurationError, match="logger_provider"):
        EvaluationLogExporter(logger_provider=object())
