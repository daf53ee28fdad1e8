"""The Auditor's admission at hand-off (`ragaudit.auditor._admission`), a part on its own: sampling decided once at
construction, the backlog's bound over the ledger's pending turns plus the turns waiting above, and the judge's
measured pace, and the CPU share cap (`CpuShare`) on scripted clock readings. Real parts: the Auditor's `Ledger`,
`JudgingPace` and `CpuShare`, no Auditor."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from ragaudit import Auditor, ConfigurationError, CostControl, Limits, _worker
from ragaudit._log import RateLimitedLog
from ragaudit.auditor._admission import Admission, CpuShare, JudgingPace
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


class Readings:
    """Scripted clocks for `CpuShare`: each check reads the wall clock, the process's CPU, ragaudit's threads' CPU
    and the run-queue wait; ``advance`` moves them on by one step of the given rates (cores)."""

    def __init__(self, *, own: float | None = 0.0) -> None:
        self.now, self.process, self.wait = 0.0, 0.0, 0.0
        self.own = own

    def advance(self, seconds: float, *, process: float, own: float, wait: float = 0.0) -> None:
        self.now += seconds
        self.process += process * seconds
        self.wait += wait * seconds
        if self.own is not None:
            self.own += own * seconds

    def share(self, max_share: float | None = 0.1) -> CpuShare:
        return CpuShare(0.1 if max_share is None else max_share, own_cpu=lambda: self.own,
                        process_cpu=lambda: self.process, run_wait=lambda: self.wait, clock=lambda: self.now,
                        run_check=_at_once)


def _at_once(check: Callable[[], None]) -> bool:
    """Scripted readings: the check runs in the admission's call, so a test sees its decision at once."""
    check()
    return True


def _run(readings: Readings, admission: Admission, seconds: float, *, process: float, own: float,
         wait: float = 0.0, per_check: int = 10) -> list[bool]:
    """*per_check* turns every ``CHECK_S`` for *seconds*, at the given rates: what admission decided."""
    decided = []
    for _ in range(int(seconds / CpuShare.CHECK_S)):
        readings.advance(CpuShare.CHECK_S, process=process, own=own, wait=wait)
        decided += [admission.admit_turn(f"t{len(decided) + i}") for i in range(per_check)]
    return decided


def _cpu_admission(ledger: Ledger, cpu: CpuShare | None, *, shed: bool = True) -> Admission:
    return Admission(ledger, lambda: 0, sample_rate=1.0, sample_early=True, shed=shed, max_queue=10_000,
                     max_concurrency=2, exit_timeout_s=30.0, log=RateLimitedLog(), cpu=cpu)


def test_saturated_and_over_the_share_sheds_an_adaptive_share_counted(caplog: pytest.LogCaptureFixture) -> None:
    readings, ledger = Readings(), Ledger()
    admission = _cpu_admission(ledger, readings.share(0.1))
    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        # One core busy, ragaudit's threads at 40 % of it: four times the share.
        decided = _run(readings, admission, 5.0, process=1.0, own=0.4)
    shed = decided.count(False)
    assert shed > 0 and admission.cpu is not None and admission.cpu.keep < 1.0
    counts = ledger.snapshot()
    assert counts["submitted"] == counts["dropped"] == admission.shed_cpu == shed
    assert admission.stats()["shed_backlog"] == 0 and admission.stats()["shed_cpu"] == shed
    # The longer it goes on, the smaller the share kept: it follows max_share / share, not a fixed step.
    later = _run(readings, admission, 5.0, process=1.0, own=0.4)
    assert later.count(True) < decided.count(True)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "Limits(max_cpu_share=0.1)" in said[0] and 'mode="worker"' in said[0], said


def test_the_kept_share_settles_where_the_cpu_share_is_met() -> None:
    # ragaudit's CPU follows what it keeps: 0.5 of a core when it keeps every turn.
    readings, ledger = Readings(), Ledger()
    cpu = readings.share(0.1)
    admission = _cpu_admission(ledger, cpu)
    for _ in range(300):
        readings.advance(CpuShare.CHECK_S, process=1.0, own=0.5 * cpu.keep)
        admission.admit_turn("t")
    assert 0.15 < cpu.keep < 0.25  # 0.5 x keep == 0.1 of the process's core
    assert cpu.share is not None and abs(cpu.share - 0.1) < 0.03


def test_saturated_and_under_the_share_keeps_every_turn() -> None:
    readings, ledger = Readings(), Ledger()
    admission = _cpu_admission(ledger, readings.share(0.1))
    assert all(_run(readings, admission, 5.0, process=1.0, own=0.05))
    assert ledger.snapshot()["dropped"] == admission.shed_cpu == 0


def test_not_saturated_keeps_every_turn_at_once() -> None:
    readings, ledger = Readings(), Ledger()
    cpu = readings.share(0.1)
    admission = _cpu_admission(ledger, cpu)
    # An idle server: ragaudit is most of what runs, but the process is far from a core.
    assert all(_run(readings, admission, 5.0, process=0.3, own=0.2))
    # Saturated: shedding begins; the load goes away: every turn is kept again once the window shows it.
    assert not all(_run(readings, admission, 3.0, process=1.0, own=0.5))
    _run(readings, admission, 1.0, process=0.2, own=0.1)
    assert cpu.keep == 1.0 and all(_run(readings, admission, 1.0, process=0.2, own=0.1))


def test_a_process_waiting_for_a_core_is_saturated_too() -> None:
    # Two server workers and the load on two shared cores: 0.7 of a core used, 0.3 waited for in the run queue.
    readings, ledger = Readings(), Ledger()
    admission = _cpu_admission(ledger, readings.share(0.1))
    assert not all(_run(readings, admission, 3.0, process=0.7, own=0.3, wait=0.3))
    assert admission.shed_cpu > 0


def test_no_cpu_clocks_or_no_cap_or_no_background_judging_sheds_nothing_for_cpu() -> None:
    readings = Readings(own=None)  # threads' CPU clocks cannot be read (Windows): off
    ledger = Ledger()
    admission = _cpu_admission(ledger, readings.share(0.1))
    assert all(_run(readings, admission, 3.0, process=1.0, own=0.9))
    assert admission.cpu is not None and admission.cpu.keep == 1.0
    for cpu, shed in ((None, True), (Readings().share(0.1), False)):  # max_cpu_share=None; inline, worker mode
        readings, ledger = Readings(), Ledger()
        admission = _cpu_admission(ledger, cpu, shed=shed)
        assert all(_run(readings, admission, 3.0, process=1.0, own=0.9))
        assert ledger.snapshot()["dropped"] == 0
    made = [Auditor(LexicalJudge(), audit_log=None, handle_signals=False),
            Auditor(LexicalJudge(), limits=Limits(max_cpu_share=None), audit_log=None, handle_signals=False),
            Auditor(LexicalJudge(), mode="inline", audit_log=None, handle_signals=False)]
    try:
        assert [a._admission.cpu is not None for a in made] == [True, False, False]
        assert made[0]._admission.cpu.max_share == 0.01  # type: ignore[union-attr]
        assert {"shed_cpu", "shed_backlog", "backlog_bound"} <= made[0].stats().keys()
    finally:
        for auditor in made:
            auditor.shutdown(5)


def test_the_cap_starts_over_after_fork() -> None:
    readings, ledger = Readings(), Ledger()
    admission = _cpu_admission(ledger, readings.share(0.1))
    _run(readings, admission, 3.0, process=1.0, own=0.5)
    assert admission.shed_cpu > 0
    admission.after_fork()
    assert admission.shed_cpu == 0 and admission.cpu is not None and admission.cpu.keep == 1.0


def test_the_host_thread_never_reads_the_cpu_clocks() -> None:
    # A check reads /proc (a listing and a read per thread): on ragaudit's thread, never in the host's request.
    read_on: list[int] = []
    checked = threading.Event()

    def own() -> float:
        read_on.append(threading.get_ident())
        checked.set()
        return 0.0

    cpu = CpuShare(0.1, own_cpu=own, process_cpu=lambda: 0.0, run_wait=lambda: 0.0)
    assert cpu.admit() and checked.wait(10)
    assert read_on and threading.get_ident() not in read_on
    # The readers' thread is one of ragaudit's: what a check costs counts as ragaudit's own CPU.
    assert all(ident in _worker._own_clocks for ident in read_on)


@pytest.mark.parametrize("value", [0, -0.1, 1.5, float("nan"), "0.1", True])
def test_max_cpu_share_is_validated(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"Limits\.max_cpu_share"):
        Limits(max_cpu_share=value)  # type: ignore[arg-type]
    assert Limits(max_cpu_share=1).max_cpu_share == 1 and Limits(max_cpu_share=None).max_cpu_share is None
