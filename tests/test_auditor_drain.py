"""The Auditor's drain (`ragaudit.auditor._draining`), a part on its own: the registry of upstream stages (driven
first, in order, by ``force_flush`` and ``shutdown``; their ``stats()`` summed), shutdown once, and the Auditor's
``stats()`` gathering ``closing`` and ``close_dropped`` from the stages. Real parts: the ledger, batch workers, the
export stage with an exporter, the judge-span exporter on an SDK tracer provider; upstream stages of the app's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from ragaudit import Auditor, ConfigurationError
from ragaudit._worker import BatchWorker
from ragaudit.auditor import Upstream
from ragaudit.auditor._draining import Drain
from ragaudit.auditor._exporting import ExportStage, OnJudgementExporter
from ragaudit.auditor._ledger import Ledger
from ragaudit.content import ContentPolicy
from ragaudit.judges.lexical import LexicalJudge
from ragaudit.tracing._judge_spans import JudgeSpanExporter
from ragaudit.tracing.spans import SpanRecorder


class _Stage:
    """An upstream stage of the app's own: says what it holds, notes when it is driven."""

    def __init__(self, name: str, driven: list[str], counts: Mapping[str, int]) -> None:
        self.name, self.driven, self.counts = name, driven, dict(counts)

    def hand_down(self, timeout_s: float | None) -> bool:
        self.driven.append(f"{self.name}.hand_down")
        return True

    def stop(self, timeout_s: float) -> bool:
        self.driven.append(f"{self.name}.stop")
        return True

    def stats(self) -> Mapping[str, int]:
        return self.counts


class _Broken(_Stage):
    def stats(self) -> Mapping[str, int]:
        raise RuntimeError("a third party's stage")


@pytest.fixture
def drain() -> Iterator[tuple[Drain, Ledger, list[BaseException]]]:
    ledger, failures = Ledger(), []

    async def handle(job: Any) -> None:
        return None

    judging: BatchWorker[Any] = BatchWorker("auditor", ahandle=handle, max_queue=8)
    exporters = [OnJudgementExporter(lambda turn, judgement: None)]
    export = ExportStage(exporters, ledger.delivered, ContentPolicy(), max_queue=8)
    spans = JudgeSpanExporter(SpanRecorder(TracerProvider()))
    part = Drain(ledger, judging, None, export, spans, None, LexicalJudge(), exit_timeout_s=5.0,
                 policy=ContentPolicy(), describe=lambda: {"export_errors": export.errors}, failed=failures.append)
    yield part, ledger, failures
    part.shutdown(1.0)


def test_upstream_stages_are_driven_first_in_order_and_their_stats_summed(drain: Any) -> None:
    part, ledger, failures = drain
    driven: list[str] = []
    first = _Stage("closer", driven, {"closing": 2, "close_dropped": 1})
    second = _Stage("app", driven, {"closing": 3})
    broken = _Broken("broken", driven, {})
    for stage in (first, second, broken):
        assert isinstance(stage, Upstream)
        part.add_upstream(stage)
    part.add_upstream(first)  # added again: moves to the end, held once
    assert part.upstream_stats() == {"closing": 5, "close_dropped": 1}
    assert part.closing() == 5 and len(failures) >= 1  # the broken stage counts nothing, and is logged
    assert part.force_flush(5.0)
    assert driven == ["app.hand_down", "broken.hand_down", "closer.hand_down"]
    assert part.shutdown(5.0) and ledger.closed
    assert driven[3:] == ["app.stop", "broken.stop", "closer.stop"]
    assert part.shutdown(5.0) and driven[6:] == []  # once
    with pytest.raises(ConfigurationError, match="upstream"):
        part.add_upstream(object())  # type: ignore[arg-type]


def test_a_stage_is_held_weakly(drain: Any) -> None:
    part, _, _ = drain
    part.add_upstream(_Stage("gone", [], {"closing": 7}))
    assert part.upstream_stages() == [] and part.upstream_stats() == {}


def test_shutdown_says_what_was_left_pending(drain: Any, capfd: pytest.CaptureFixture[str]) -> None:
    part, ledger, _ = drain
    ledger.pending = 1  # a judgement that never comes back
    assert part.shutdown(0.2) is False
    assert "1 judgement(s) still pending at shutdown" in capfd.readouterr().err
    assert part.force_flush(0.1) is False


def test_the_auditor_gathers_closing_and_close_dropped_from_its_stages() -> None:
    auditor = Auditor(LexicalJudge(), audit_log=None, handle_signals=False)
    try:
        first = _Stage("closer", [], {"closing": 2, "close_dropped": 1})
        second = _Stage("other", [], {"closing": 3, "close_dropped": 4})
        auditor.add_upstream(first)
        auditor.add_upstream(second)
        assert not auditor.count("close_dropped")  # not the Auditor's count: its stages keep it
        stats = auditor.stats()
        assert stats["closing"] == 5 and stats["close_dropped"] == 5
        first.counts["closing"] = 0
        assert auditor.stats()["closing"] == 3
    finally:
        auditor.shutdown(5)
