"""The Auditor's admission at hand-off (`ragaudit.auditor._admission`), a part on its own: sampling decided once at
construction, the backlog's bound over the ledger's pending turns plus the turns waiting above, and the judge's
measured pace. Real parts: the Auditor's `Ledger` and `JudgingPace`, no Auditor."""

from __future__ import annotations

from ragaudit import Auditor, CostControl
from ragaudit._log import RateLimitedLog
from ragaudit.auditor._admission import Admission, JudgingPace
from ragaudit.auditor._ledger import Ledger
from ragaudit.judges.lexical import LexicalJudge


def _admission(ledger: Ledger, waiting: list[int], *, sample_rate: float = 1.0, sample_early: bool = True,
               shed: bool = True, max_queue: int = 8) -> Admission:
    return Admission(ledger, lambda: sum(waiting), sample_rate=sample_rate, sample_early=sample_early, shed=shed,
                     max_queue=max_queue, max_concurrency=2, exit_timeout_s=30.0, log=RateLimitedLog())


def test_a_turn_outside_the_sample_costs_a_counter_at_hand_off() -> None:
    ledger = Ledger()
    admission = _admission(ledger, [], sample_rate=0.0)
    assert admission.sample_early
    assert [admission.admit_turn(f"t{i}") for i in range(5)] == [False] * 5
    counts = ledger.snapshot()
    assert counts["submitted"] == counts["sampled_out"] == 5 and counts["pending"] == 0


def test_sampling_stays_at_submission_when_the_auditor_decided_so_once() -> None:
    # Sampled-out turns kept for feedback (or counted in their session): the built turn is needed.
    ledger = Ledger()
    admission = _admission(ledger, [], sample_rate=0.0, sample_early=False)
    assert not admission.sample_early and admission.admit_turn("t1")
    assert ledger.snapshot()["submitted"] == 0
    # At sample_rate 1 there is nothing to decide early at all.
    assert not _admission(Ledger(), [], sample_rate=1.0).sample_early


def test_the_backlog_counts_turns_waiting_above_and_sheds_the_newest_at_its_bound() -> None:
    ledger = Ledger()
    waiting = [5]  # turns waiting in the closers above (their stats()["closing"])
    admission = _admission(ledger, waiting, max_queue=8)
    ledger.pending = 2
    assert admission.admit_turn("t1")  # 2 + 5 < 8
    ledger.pending = 3
    assert not admission.admit_turn("t2")  # 3 + 5 == 8: shed, counted like a full queue
    counts = ledger.snapshot()
    assert counts["submitted"] == counts["dropped"] == 1
    waiting[0] = 0
    assert admission.admit_turn("t3")
    ledger.closed = True
    ledger.pending = 100
    assert admission.admit_turn("t4")  # a closed Auditor counts the turn where it lands


def test_no_shedding_where_turns_are_not_judged_in_the_background() -> None:
    ledger = Ledger()
    ledger.pending = 100
    assert _admission(ledger, [100], shed=False).admit_turn("t1")
    assert ledger.snapshot()["dropped"] == 0


def test_the_bound_follows_the_measured_pace() -> None:
    admission = _admission(Ledger(), [], max_queue=10_000)
    assert admission.backlog_bound() == 10_000  # not measured yet
    pace = admission.pace
    pace.update(0.0, 0, saturated=True)
    pace.update(1.0, 40, saturated=True)  # 40 turns a second while saturated
    assert pace.rate == 40.0
    assert admission.backlog_bound() == 600  # what is finished within half of exit_timeout_s=30
    pace.update(2.0, 40, saturated=False)
    assert pace.rate == 40.0  # an idle judge says nothing of its pace
    admission.after_fork()
    assert pace.rate is None and admission.backlog_bound() == 10_000


def test_the_pace_needs_a_whole_window_and_smooths() -> None:
    pace = JudgingPace()
    pace.update(0.0, 0, saturated=True)
    pace.update(JudgingPace.WINDOW_S / 2, 100, saturated=True)
    assert pace.rate is None
    pace.update(1.0, 10, saturated=True)
    assert pace.rate == 10.0
    pace.update(2.0, 40, saturated=True)
    assert pace.rate == 20.0  # half the old (10), half the new (30)


def test_the_auditor_decides_early_sampling_once_by_its_mode_and_settings() -> None:
    made = [Auditor(LexicalJudge(), sample_rate=0.5, audit_log=None, handle_signals=False),
            Auditor(LexicalJudge(), sample_rate=0.5, cost=CostControl(retain_s=60), audit_log=None,
                    handle_signals=False),
            Auditor(LexicalJudge(), sample_rate=0.5, sessions=True, audit_log=None, handle_signals=False),
            Auditor(mode="worker", audit_log=None, handle_signals=False),
            Auditor(LexicalJudge(), mode="inline", sample_rate=0.5, audit_log=None, handle_signals=False)]
    try:
        assert [a._admission.sample_early for a in made] == [True, False, False, False, True]
        assert [a._admission.shed for a in made] == [True, True, True, False, False]
    finally:
        for auditor in made:
            auditor.shutdown(5)
