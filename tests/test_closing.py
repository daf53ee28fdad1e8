"""The closer (`ragaudit.integrations._closing`) and the source base (`ragaudit.integrations.TurnSource`).

A source here is a real subclass of the public base, as a framework adapter would write it: its turns are
steps, handed off on the test's thread and closed on the closer's, through the real Auditor and exporter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ragaudit import Auditor, FakeJudge, Limits, RetrievedDoc
from ragaudit.integrations import ClosedTurn, TurnCloser, TurnSource, closer_for
from ragaudit.integrations.steps import ModelCall, RetrievalStep, RunEnded, RunKind, RunStarted, Step
from ragaudit.tracing.spans import SpanRecorder
from tests.worker.file_exporter import Records

TEXT = "Returns are accepted within 30 days of delivery."


def turn_steps(root: str, now: int, question: str = "How long do returns take?") -> Iterator[Step]:
    yield RunStarted(root, RunKind.CHAIN, now - 10, question=question)
    yield RetrievalStep(f"{root}/r", root, "retriever", now - 9, now - 8, query=question,
                        documents=(RetrievedDoc(id="d1", content=TEXT, rank=1),))
    yield ModelCall(f"{root}/m", root, now - 7, now - 2, messages=(("user", f"{TEXT}\n\n{question}"),),
                    output="Within 30 days.")
    yield RunEnded(root, now - 1, answer="Within 30 days.")


class StepSource(TurnSource):
    """A minimal source: each turn is its steps; ``pending`` turns ended with a child still open."""

    def __init__(self, auditor: Auditor) -> None:
        super().__init__(auditor, SpanRecorder())
        self.pending: list[str] = []
        self.closed: list[ClosedTurn] = []
        self.threads: set[str] = set()

    def finish(self, root: str, gate: threading.Event | None = None, entered: threading.Event | None = None) -> bool:
        def steps(now: int) -> Iterator[Step]:
            self.threads.add(threading.current_thread().name)
            if entered is not None:
                entered.set()
            if gate is not None:
                gate.wait(30)
            return turn_steps(root, now)

        self.closed_turns += 1
        return self.hand_off(root, steps, root_id=root, framework="test")

    def close_ended_turns(self) -> int:
        ended, self.pending = self.pending, []
        for root in ended:
            self.finish(root)
        return len(ended)

    def turn_closed(self, closed: ClosedTurn) -> None:
        self.closed.append(closed)


@pytest.fixture
def records() -> Records:
    return Records()


def test_a_turn_is_handed_off_the_hosts_thread_and_ends_as_a_record(records: Records) -> None:
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None) as auditor:
        source = StepSource(auditor)
        assert source.finish("t1")
        assert source.force_flush(10)
        assert source.threads and threading.current_thread().name not in source.threads
        assert all(name.startswith("ragaudit-closer") for name in source.threads)
        [closed] = source.closed
        assert (closed.status, closed.unjudged, closed.accepted) == ("queued", None, True)
        [record] = records.records
        assert (record.status, record.turn.turn_id, [d.id for d in record.turn.documents]) == ("judged", "t1", ["d1"])
        assert source.stats() == {"closed_turns": 1} and auditor.stats()["judged"] == 1


def test_a_burst_past_max_closing_is_dropped_and_counted(records: Records) -> None:
    gate, entered = threading.Event(), threading.Event()
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None,
                 limits=Limits(max_closing=4)) as auditor:
        source = StepSource(auditor)
        closer = closer_for(auditor)
        try:
            assert source.finish("first", gate, entered)
            assert entered.wait(30)  # the closing thread is inside the first turn: the next ones wait
            handed = [source.finish(f"t{i}") for i in range(20)]
            # The turn being closed counts among the max_closing: three more wait, the other 17 are dropped.
            assert handed == [True] * 3 + [False] * 17
            assert closer.stats() == {"closing": 4, "close_dropped": 17}
        finally:
            gate.set()
        assert auditor.force_flush(10)
        assert closer.stats() == {"closing": 0, "close_dropped": 17}
        assert len(records.records) == auditor.stats()["judged"] == 4
        assert auditor.stats()["close_dropped"] == 17  # also the Auditor's, until it sums its stages' stats


def test_the_auditors_flush_reaches_every_stage(records: Records) -> None:
    # Two sources above one Auditor: their ended turns (close_ended_turns), the close jobs handed over,
    # judging and the exporter are all flushed by the Auditor's own force_flush.
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None) as auditor:
        first, second = StepSource(auditor), StepSource(auditor)
        first.pending = ["a1", "a2"]
        second.pending = ["b1"]
        assert first.finish("a0") and second.finish("b0")
        assert auditor.force_flush(10)
        assert not first.pending and not second.pending
        assert sorted(r.turn.turn_id for r in records.records) == ["a0", "a1", "a2", "b0", "b1"]
        assert {r.status for r in records.records} == {"judged"}
        assert isinstance(closer_for(auditor), TurnCloser) and closer_for(auditor).stats()["closing"] == 0


def test_shutdown_closes_the_ended_turns_first(records: Records) -> None:
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None)
    source = StepSource(auditor)
    source.pending = ["late"]
    assert auditor.shutdown(10)
    assert [r.turn.turn_id for r in records.records] == ["late"]


def test_a_turn_that_cannot_be_read_ends_as_a_failed_record(records: Records) -> None:
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None) as auditor:
        source = StepSource(auditor)

        def unreadable(now: int) -> Iterator[Step]:
            yield RunStarted("bad", RunKind.CHAIN, now - 5, question="q?")
            raise ValueError("a value the source cannot read")

        assert source.hand_off("bad", unreadable, root_id="bad", framework="test")
        assert source.force_flush(10)
        [record] = records.records
        assert (record.status, record.unjudged) == ("unjudged", "failed")
        assert "could not read this turn" in (record.turn.error or "")
        assert auditor.stats()["unjudged_failed"] == 1


def test_an_inline_auditor_closes_the_turn_before_hand_off_returns(records: Records) -> None:
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), exporters=[records], audit_log=None,
                 mode="inline") as auditor:
        source = StepSource(auditor)
        assert source.finish("now")
        assert [c.status for c in source.closed] == ["judged"]
        assert threading.current_thread().name in source.threads
