"""The Auditor's submit strategies (`ragaudit.auditor._submitting`): ``mode`` chooses one, once, and each takes a
turn its own way. Real parts: the ledger, cost control, the export stage and an exporter, the Auditor's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragaudit import Auditor, AuditRecord, BaseExporter, CostControl, ExportResult, RagTurn, RetrievedDoc
from ragaudit._log import RateLimitedLog
from ragaudit._worker import BatchWorker
from ragaudit.auditor._exporting import ExportStage
from ragaudit.auditor._governor import CostGate
from ragaudit.auditor._judge_health import JudgeFailureLog
from ragaudit.auditor._ledger import Ledger
from ragaudit.auditor._submitting import SUBMIT_STRATEGIES, Job, TurnJudging
from ragaudit.auditor._worker_mode import WorkerModeJudge
from ragaudit.content import ContentPolicy
from ragaudit.judges.lexical import LexicalJudge

DOCS = (RetrievedDoc(id="d1", content="Returns are accepted within 30 days.", rank=1),)


class _Kept(BaseExporter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[AuditRecord] = []

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        self.records.extend(records)
        return ExportResult.SUCCESS


def _turn(turn_id: str, trace_id: str | None = None) -> RagTurn:
    turn = RagTurn(turn_id=turn_id, query="How long do returns take?", answer="Within 30 days.", documents=DOCS)
    return turn.with_trace(trace_id, "0" * 15 + "1") if trace_id else turn


def test_to_worker_judges_nothing_and_counts_what_has_a_trace() -> None:
    ledger, kept = Ledger(), _Kept()
    judge = WorkerModeJudge()
    cost = CostGate(judge, CostControl())
    export = ExportStage([kept], ledger.delivered, ContentPolicy(), max_queue=8)
    strategy = SUBMIT_STRATEGIES["worker"]
    turns = TurnJudging(ledger, cost, judge, export, timeout_s=1.0, max_context_chars=1000, blocking=None,
                        failures=JudgeFailureLog(on_first=lambda: None, context=lambda: ""), provider=None,
                        deliver=strategy.delivery(export))

    async def never(job: Any) -> None:
        raise AssertionError("worker mode queues no turn")

    judging: BatchWorker[Any] = BatchWorker("auditor", ahandle=never, max_queue=8)
    submitter = strategy(ledger, cost, judging, turns, export, None, sample_rate=1.0, max_queue=8,
                         log=RateLimitedLog(), describe=ledger.snapshot)
    assert not strategy.samples_at_hand_off and not strategy.sheds_at_hand_off
    policy = ContentPolicy()
    assert submitter.submit(Job(_turn("t1", "a" * 32), policy, None, None), True) == ("to_worker", None)
    assert submitter.submit(Job(_turn("t2"), policy, None, None), True) == ("dropped", None)
    submitter.record_unjudged(lambda: (_ for _ in ()).throw(AssertionError("no record is made here")))
    ledger.closed = True
    assert submitter.submit(Job(_turn("t3", "b" * 32), policy, None, None), True) == ("dropped", None)
    counts = ledger.snapshot()
    assert (counts["submitted"], counts["to_worker"], counts["dropped"]) == (3, 1, 2)
    assert not judging.started and kept.records == []


def test_mode_names_the_strategy_and_each_takes_a_turn_its_way() -> None:
    kept = {mode: _Kept() for mode in ("background", "inline")}
    inline = Auditor(LexicalJudge(), mode="inline", exporters=[kept["inline"]], audit_log=None, handle_signals=False)
    background = Auditor(LexicalJudge(), exporters=[kept["background"]], audit_log=None, handle_signals=False)
    try:
        assert type(inline._submitter).__name__ == "_InlineSubmit"
        assert type(background._submitter).__name__ == "_BackgroundSubmit"
        assert inline.submit(_turn("t1")) == "judged" and len(kept["inline"].records) == 1  # exported at once
        assert background.submit(_turn("t2")) == "queued"
        assert background.force_flush(10) and len(kept["background"].records) == 1
        for auditor in (inline, background):
            assert auditor.record_unjudged(_turn("t3"), "no_evidence")
    finally:
        inline.shutdown(5)
        background.shutdown(5)
    assert [r.unjudged for r in kept["inline"].records] == [None, "no_evidence"]
    assert [r.unjudged for r in kept["background"].records] == [None, "no_evidence"]
