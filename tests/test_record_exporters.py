"""One record per finished turn, the same record for every exporter, and judging that fails said out loud."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import (
    Auditor,
    AuditRecord,
    BaseExporter,
    ChatRagJudge,
    ConfigurationError,
    Exporter,
    ExportResult,
    Judgement,
    LexicalJudge,
    RagTurn,
    RetrievedDoc,
)
from ragaudit.auditor._judge_health import JudgeFailureLog
from ragaudit.content import ContentPolicy
from ragaudit.integrations import closer_for
from ragaudit.metrics import score_ranking
from tests.support.http_recorder import HttpRecorder

DOCS = (RetrievedDoc(id="kb-1", content="Returns are accepted within 30 days of delivery for a full refund.", rank=1),
        RetrievedDoc(id="kb-2", content="Shipping is free on orders over 50 euros.", rank=2))


def _turn(n: int = 1, documents: tuple[RetrievedDoc, ...] = DOCS) -> RagTurn:
    return RagTurn(turn_id=f"t{n}", query="How long do I have to return an item?",
                   answer="You can return an item within 30 days of delivery [1].", documents=documents,
                   relevant_ids=["kb-1"])


class Collect(BaseExporter):
    """An exporter of the kind a user writes: keeps every record it is given."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []
        self.batches = 0
        self.lock = threading.Lock()

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        with self.lock:
            self.records.extend(records)
            self.batches += 1
        return ExportResult.SUCCESS


def test_every_exporter_gets_the_same_record_with_every_derived_value() -> None:
    first, second = Collect(), Collect()
    seen: list[tuple[RagTurn, Judgement]] = []
    auditor = Auditor(LexicalJudge(), audit_log=None, exporters=[first, second],
                      on_judgement=lambda turn, judgement: seen.append((turn, judgement)))
    try:
        for n in range(5):
            assert auditor.submit(_turn(n)) == "queued"
        assert auditor.force_flush(30)
    finally:
        auditor.shutdown(10)
    assert isinstance(first, Exporter)
    assert len(first.records) == 5 and [id(r) for r in first.records] == [id(r) for r in second.records]
    record = first.records[0]
    assert record.status == "judged" and record.unjudged is None and record.judgement is not None
    # Ground-truth metrics: those of the turn's ranking against its relevant ids, computed once.
    assert dict(record.ground_truth_metrics or {}) == score_ranking(["kb-1", "kb-2"], {"kb-1": 1},
                                                                    ("recall@5", "precision@5", "mrr@10", "ndcg@10"))
    # The full audit of a LexicalJudge judgement: judged metrics and the check of the [1] citation.
    assert record.audit is not None and record.audit.metrics and record.audit.citation_checks
    assert record.content_policy is auditor.content_policy
    assert record.judge_identity is record.judgement.identity
    assert sorted(id(j) for _, j in seen) == sorted(id(r.judgement) for r in first.records)  # on_judgement: same
    assert auditor.stats()["judged"] == 5


def test_a_turn_with_no_evidence_ends_as_an_unjudged_record() -> None:
    exporter = Collect()
    auditor = Auditor(LexicalJudge(), audit_log=None, exporters=[exporter])
    try:
        assert auditor.record_unjudged(_turn(1, documents=()), "no_evidence") is True
        assert auditor.force_flush(10)
    finally:
        auditor.shutdown(10)
    (record,) = exporter.records
    assert record.status == "unjudged" and record.unjudged == "no_evidence" and record.judgement is None
    stats = auditor.stats()
    assert stats["unjudged_no_evidence"] == 1 and stats["pending"] == 0 and stats["judged"] == 0


def test_inline_judging_returns_the_record_and_its_ground_truth_metrics() -> None:
    auditor = Auditor(LexicalJudge(), mode="inline", audit_log=None)
    try:
        submitted = auditor.submit_turn(_turn())
    finally:
        auditor.shutdown(10)
    assert submitted.status == "judged" and submitted.record is not None
    assert submitted.record.ground_truth_metrics == submitted.ground_truth_metrics


def test_record_turn_gives_the_retrieval_span_ids_the_record_carries() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from ragaudit.tracing import SpanRecorder

    traced = SpanRecorder(provider).record_turn(_turn())
    retrieval = [s for s in exporter.get_finished_spans() if s.name.startswith("retrieval")]
    assert traced.retrieval_span_ids == tuple(format(s.context.span_id, "016x") for s in retrieval)


def test_a_record_needs_a_judgement_or_a_reason() -> None:
    policy = ContentPolicy()
    with pytest.raises(ConfigurationError, match="exactly one"):
        AuditRecord(turn=_turn(), content_policy=policy)
    with pytest.raises(ConfigurationError, match="unjudged"):
        AuditRecord(turn=_turn(), content_policy=policy, unjudged="bored")
    with pytest.raises(ConfigurationError, match="exactly one"):
        AuditRecord(turn=_turn(), content_policy=policy, judgement=Judgement(judge="j"), unjudged="dropped")


def test_an_object_that_is_no_exporter_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="Exporter"):
        Auditor(LexicalJudge(), audit_log=None, exporters=[object()])  # type: ignore[list-item]


def test_an_object_of_the_old_emit_shape_is_told_what_to_implement() -> None:
    """The interface before exporters (``emit(turn, judgement)``, ``bind_recorder``) is gone: such an
    object is refused when the Auditor is made, naming what to implement instead."""

    class OldShape:
        def emit(self, turn: RagTurn, judgement: Judgement) -> None: ...
        def force_flush(self, timeout_s: float = 30.0) -> bool: return True
        def shutdown(self, timeout_s: float = 30.0) -> None: ...
        def bind_recorder(self, recorder: object) -> None: ...
        errors = 0

    with pytest.raises(ConfigurationError) as raised:
        Auditor(LexicalJudge(), audit_log=None, exporters=[OldShape()])  # type: ignore[list-item]
    message = str(raised.value)
    assert "missing export" in message and "emit(turn, judgement)" in message
    assert "ragaudit.BaseExporter" in message and "export(records) -> ExportResult" in message


def test_a_raising_exporter_is_counted_and_the_others_still_get_the_record(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(BaseExporter):
        def export(self, records: Sequence[AuditRecord]) -> ExportResult:
            raise RuntimeError("backend gone")

    after = Collect()
    auditor = Auditor(LexicalJudge(), audit_log=None, exporters=[Broken(), after])
    try:
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            auditor.submit(_turn())
            assert not auditor.force_flush(10)  # a delivery failed during the flush: said truthfully
    finally:
        auditor.shutdown(10)
    assert len(after.records) == 1
    assert auditor.stats()["export_errors"] == 1 and auditor.stats()["judged"] == 1
    assert any("exporter Broken failed" in r.getMessage() for r in caplog.records)


# -- issue 23 item 7: say when judging is failing ------------------------------------------------------


def test_a_judge_failing_on_every_turn_is_said_once_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    # An endpoint that is not a judge: every chat completion answers 404.
    with HttpRecorder() as endpoint:
        endpoint.status = 404
        judge = ChatRagJudge("gpt-4o-mini", base_url=endpoint.url + "/v1", api_key="sk-test", max_retries=0)
        auditor = Auditor(judge, audit_log=None)
        try:
            with caplog.at_level(logging.WARNING, logger="ragaudit"):
                for n in range(4):
                    auditor.submit(_turn(n))
                assert auditor.force_flush(30)
        finally:
            auditor.shutdown(10)
    assert auditor.stats()["failed"] == 4
    said = [r.getMessage() for r in caplog.records if "judging" in r.getMessage()]
    assert len(said) == 1, said  # the first failure at once; the summary waits for its interval
    assert "HTTP 404" in said[0] and "base URL" in said[0] and caplog.records[0].levelno == logging.WARNING
    assert "sk-test" not in said[0]


def test_the_failure_summary_counts_the_failures_since_the_last_line(caplog: pytest.LogCaptureFixture) -> None:
    log = JudgeFailureLog(interval_s=0.0)  # a summary with every failure after the first
    failed = Judgement.failed("chat:gpt-4o-mini", "APIStatusError: Error code: 401", details={"status_code": 401})
    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        log.note(failed)
        log.note(Judgement(faithfulness=1.0, judge="chat:gpt-4o-mini"))  # a success says nothing
        log.note(failed)
    first, summary = (r.getMessage() for r in caplog.records)
    assert "judging failed" in first and "APIStatusError (HTTP 401)" in first and "API key" in first
    assert "1 more judgement(s) failed" in summary and "2 in all" in summary and "HTTP 401" in summary


def test_a_judge_timeout_names_timeout_s() -> None:
    from ragaudit.auditor._judge_health import failure_hint

    assert "timeout_s" in failure_hint("timeout", None)
    assert "rate limiting" in failure_hint("RateLimitError", 429)
    # Issue 44: an SDK the endpoint layer does not fit fails inside the client; the hint says so.
    assert "openai package" in failure_hint("ModuleNotFoundError", None)
    assert "openai package" in failure_hint("RuntimeError", None)


def test_the_closer_shuts_its_sources_then_the_auditor() -> None:
    background = Auditor(LexicalJudge(), audit_log=None)
    try:

        class Source:
            closed = 0

            def close_ended_turns(self) -> int:
                Source.closed += 1
                return 0

        source = Source()  # held here: the closer holds its sources weakly
        closer_for(background).attach(source)
        assert closer_for(background) is closer_for(background)  # one closer per Auditor
    finally:
        assert closer_for(background).shutdown(10) and background.closed  # top down: closer, then Auditor
    assert Source.closed == 1  # closed by the closer's shutdown, never by the Auditor
