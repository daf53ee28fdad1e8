"""The Auditor's admission at hand-off: what becomes of a finished turn before any closing work.

`Admission` is a part the Auditor owns (as it owns its drain and its session judging). An integration
asks [`Auditor.admit_turn`][ragaudit.Auditor.admit_turn] with the turn's id at the moment its run ends, before
it hands the raw events to the closer (`ragaudit.integrations._closing`). Two decisions are made there, each
for the price of a counter, so that a turn that will not be judged costs no assembly, no spans and no record:

- **Sampling** (*sample_rate*): the deterministic by-turn-id decision of `ragaudit._sampling`, the very one
  `submit` makes. A turn outside the sample is counted ``sampled_out`` (and ``submitted``) and never built.
  Where the built turn of a sampled-out turn is needed (``retain_s``: kept for feedback; ``sessions``: its
  session counts it), the decision stays at submission, as before.
- **Overload** (the documented policy of the serving guide): when the backlog -- turns waiting to be closed
  plus turns waiting for or in judgement -- is at its bound, the newest turn is shed here, counted ``dropped``
  (the counter of a full judging queue) and said once a minute on the ``ragaudit`` logger. The bound is
  *max_queue*, lowered to what the judge can finish within half of *exit_timeout_s* at the rate it was
  measured to judge while saturated (``stats()["backlog_bound"]``, at least twice *max_concurrency*): memory
  stays bounded and what waits at exit is judged before the exit deadline, instead of a pile that grows for
  as long as the overload lasts.

- **CPU share** (*max_cpu_share*, `CpuShare`): while the process is CPU-saturated, ragaudit's own threads (closing,
  spans, the judging loop, export: work done under the host's GIL) take at most that share of the process's CPU
  (saturated: it used or waited in the run queue for at least 0.85 of a core over the last second).
  Past it, an adaptive share of finished turns is shed here, counted ``dropped`` and ``shed_cpu``, and said once a
  minute: ragaudit's threads stay within the share (its callbacks on the host's thread come on top). A process that
  is not saturated sheds nothing for CPU.

Both kinds of shedding apply to background judging only (*shed*; not inline, not worker mode) and are counted by
reason besides ``dropped``: ``shed_backlog`` and ``shed_cpu``.

``submitted == judged + failed + dropped + sampled_out + pending + ...`` holds as before: a turn decided here
is submitted and counted in the same step.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import _fork
from .._sampling import sampled
from .._worker import call_later, own_cpu

if TYPE_CHECKING:
    from .._log import RateLimitedLog
    from ._ledger import Ledger

__all__ = ["Admission", "CpuShare", "JudgingPace", "run_wait"]


class JudgingPace:
    """How fast the judge finishes turns while saturated: measured over windows of at least ``WINDOW_S`` during
    which at least *max_concurrency* turns were pending the whole time (so the rate is the judge's capacity,
    not the arrival rate), smoothed (half the old value, half the new). ``rate`` is None until measured."""

    WINDOW_S = 0.25

    __slots__ = ("_done", "_start", "rate")

    def __init__(self) -> None:
        self._start: float | None = None  # start of the current window (None: not saturated now)
        self._done = 0
        self.rate: float | None = None

    def update(self, now: float, done: int, saturated: bool) -> None:
        """At an admission: *done* turns finished in all so far; *saturated*: the judge has a full load now."""
        if not saturated:
            self._start = None
            return
        if self._start is None or done < self._done:
            self._start, self._done = now, done
            return
        elapsed = now - self._start
        if elapsed < self.WINDOW_S:
            return
        measured = (done - self._done) / elapsed
        self.rate = measured if self.rate is None else 0.5 * (self.rate + measured)
        self._start, self._done = now, done

    def reset(self) -> None:
        self._start, self._done, self.rate = None, 0, None


def run_wait() -> float | None:
    """Seconds the process's threads have spent runnable but waiting for a core (Linux: each thread's
    ``/proc/self/task/<tid>/schedstat``), or None where that cannot be read. A thread that ended drops out of the
    sum: `CpuShare` adds up only the increases. One directory listing and a read per thread: read it at intervals."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    total = 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as stat:
                total += int(stat.read().split()[1])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return total / 1e9


class CpuShare:
    """Which share of finished turns to keep so that ragaudit's own threads take at most *max_share* of the
    process's CPU while the process is saturated (``Limits.max_cpu_share``).

    At most every ``CHECK_S``, an admission finds a check due and hands it to one of ragaudit's threads (*run_check*:
    `ragaudit._worker.call_later`); the host's thread only reads the cached decision (one ``time.monotonic`` per
    turn), never the ``/proc`` files: a check costs a directory listing and a read per thread, and on the host's
    thread that cost would land in its requests. The check reads the process's CPU (*process_cpu*:
    ``time.process_time``), the CPU of ragaudit's threads (*own_cpu*: `ragaudit._worker.own_cpu`) and the time the
    process's threads waited for a core (*run_wait*: `run_wait`; None: not known, counted as 0), and looks back over
    the last ``WINDOW_S``. The process is saturated when it used or
    waited for at least ``SATURATED`` cores: a CPython process, with its GIL, is saturated near one core, and on a
    machine with more work than cores (two server workers, the load, other processes on two cores) a CPU-bound
    process gets less than a core, the rest of its demand waiting in the run queue. ragaudit's share is its threads'
    CPU over the process's, the latter counted as at least ``SATURATED`` cores (a process that mostly waits for a
    core is not held to a share of the little it got). No decision before a whole window was seen. Saturated
    and ragaudit's share over *max_share*: ``keep`` (the share of turns kept) is multiplied by
    ``max_share / share``, spread over a window (an integral step per check, so that the window's lag does not
    overshoot); under it, ``keep`` rises again the same way (at most doubling per window). Not saturated: ``keep``
    is 1 at once. Turns are kept evenly (a credit of ``keep`` per turn, a turn kept per whole credit), not in
    bursts. Where *own_cpu* gives None (threads' CPU clocks cannot be read: Windows) the cap is off. The readers,
    the clock and *run_check* are injectable so that the policy is tested on scripted readings."""

    CHECK_S = 0.1
    WINDOW_S = 1.0
    SATURATED = 0.85
    MIN_KEEP = 0.01

    __slots__ = ("_checking", "_clock", "_credit", "_last", "_next", "_own_cpu", "_process_cpu", "_run_check",
                 "_run_wait", "_samples", "_sums", "cores", "keep", "max_share", "share")

    def __init__(self, max_share: float, *, own_cpu: Callable[[], float | None] = own_cpu,
                 process_cpu: Callable[[], float] = time.process_time,
                 run_wait: Callable[[], float | None] = run_wait, clock: Callable[[], float] = time.monotonic,
                 run_check: Callable[[Callable[[], None]], bool] = call_later) -> None:
        self.max_share = max_share
        self._run_check = run_check
        self._own_cpu = own_cpu
        self._process_cpu = process_cpu
        self._run_wait = run_wait
        self._clock = clock
        self._checking = _fork.lock()
        # (wall, process CPU, ragaudit's CPU, run-queue wait), the last three as running sums of the readings'
        # increases (a reader that goes back -- a thread that ended, a fork -- adds nothing).
        self._samples: deque[tuple[float, float, float, float]] = deque()
        self._last: tuple[float, float, float] | None = None  # the last raw readings
        self._sums = (0.0, 0.0, 0.0)
        self._next = -math.inf  # when to check next
        self._credit = 0.0
        self.keep = 1.0  # the share of turns kept
        self.share: float | None = None  # ragaudit's share of the process's CPU over the last window, when saturated
        self.cores: float | None = None  # the process's demand (CPU used and waited for) over the last window

    def admit(self) -> bool:
        """True to keep this turn (cheap: the decision is re-made at most every ``CHECK_S``)."""
        # One check at a time; one not handed over (ragaudit's threads are shutting down) is due again next turn.
        if (self._clock() >= self._next and self._checking.acquire(blocking=False)
                and not self._run_check(self._checked)):
            self._checking.release()
        keep = self.keep
        if keep >= 1.0:
            return True
        credit = self._credit + keep
        kept = credit >= 1.0
        self._credit = credit - 1.0 if kept else credit
        return kept

    def _read(self) -> tuple[float, float, float] | None:
        own = self._own_cpu()
        if own is None:
            return None
        raw = (self._process_cpu(), own, self._run_wait() or 0.0)
        last, self._last = self._last, raw
        if last is not None:
            self._sums = tuple(total + max(0.0, new - old)  # type: ignore[assignment]
                               for total, new, old in zip(self._sums, raw, last, strict=True))
        return self._sums

    def _checked(self) -> None:
        """The check, on one of ragaudit's threads."""
        try:
            self._check(self._clock())
        finally:
            self._checking.release()

    def _check(self, now: float) -> None:
        self._next = now + self.CHECK_S
        sums = self._read()
        if sums is None:  # no thread CPU clocks here: the cap is off
            self._next, self.keep = math.inf, 1.0
            return
        samples = self._samples
        if samples and now <= samples[-1][0]:
            return
        previous = samples[-1][0] if samples else now
        samples.append((now, *sums))
        while len(samples) > 2 and samples[1][0] <= now - self.WINDOW_S:
            samples.popleft()
        start, process_start, own_start, wait_start = samples[0]
        elapsed = now - start
        if elapsed < self.WINDOW_S:
            return  # less than a window seen yet: the last decision holds (a short burst never sheds)
        used = sums[0] - process_start
        self.cores = (used + sums[2] - wait_start) / elapsed
        if self.cores < self.SATURATED or used <= 0:
            self.keep, self.share = 1.0, None
            return
        # Of the CPU the process used, counted as at least SATURATED cores: a process that mostly waits for a core
        # (a light app on a busy machine) is not held to a share of the little it got.
        share = self.share = min(1.0, (sums[1] - own_start) / max(used, self.SATURATED * elapsed))
        factor = min(2.0, self.max_share / share) if share > 0 else 2.0
        step = min(1.0, (now - previous) / self.WINDOW_S)
        self.keep = min(1.0, max(self.MIN_KEEP, self.keep * factor ** step))

    def reset(self) -> None:
        self._samples.clear()
        self._last, self._sums = None, (0.0, 0.0, 0.0)
        self._next, self._credit, self.keep, self.share, self.cores = -math.inf, 0.0, 1.0, None, None


class Admission:
    """Sampling and overload shedding at hand-off, a part the Auditor owns (see the module docstring).

    *ledger*: the Auditor's counts. *closing*: how many finished turns wait above, in the closers (the upstream
    stages' ``closing``). *sample_early*: whether sampling is decided here (decided once by the Auditor: not in
    worker mode, not when sampled-out turns are kept for feedback or count in their session, and only with a
    *sample_rate* below 1). *shed*: whether the backlog's bound and the CPU share apply (turns judged in the
    background). *cpu*: the CPU share cap (`CpuShare`; None: off, ``Limits(max_cpu_share=None)``)."""

    __slots__ = ("_closing", "_ledger", "_log", "cpu", "exit_timeout_s", "max_concurrency", "max_queue", "pace",
                 "sample_early", "sample_rate", "shed", "shed_backlog", "shed_cpu")

    def __init__(self, ledger: Ledger, closing: Callable[[], int], *, sample_rate: float, sample_early: bool,
                 shed: bool, max_queue: int, max_concurrency: int, exit_timeout_s: float, log: RateLimitedLog,
                 cpu: CpuShare | None = None) -> None:
        self._ledger = ledger
        self._closing = closing
        self._log = log
        self.sample_rate = sample_rate
        self.sample_early = sample_early and sample_rate < 1.0
        self.shed = shed
        self.max_queue = max_queue
        self.max_concurrency = max_concurrency
        self.exit_timeout_s = exit_timeout_s
        self.pace = JudgingPace()  # the judge's measured pace: the backlog's bound
        self.cpu = cpu if shed else None
        self.shed_backlog = 0  # turns shed at the backlog's bound (also in ``dropped``)
        self.shed_cpu = 0  # turns shed for the CPU share (also in ``dropped``)

    def admit_turn(self, turn_id: str) -> bool:
        """True when the finished turn *turn_id* is to be closed; False when it was decided (and counted) here.
        See [`Auditor.admit_turn`][ragaudit.Auditor.admit_turn]. Never raises, never blocks."""
        try:
            if self.sample_early and not sampled(turn_id, self.sample_rate):
                self._ledger.shed("sampled_out")
                return False
            if not self.shed:
                return True
            cpu = self.cpu
            if cpu is not None and not cpu.admit():
                return self._shed_for_cpu(turn_id, cpu)
            closing = self._closing()
            ledger = self._ledger
            with ledger.lock:
                if ledger.closed:
                    return True  # counted where it lands (dropped, or closed at once by a closer shut down)
                backlog = ledger.pending + closing
                self.pace.update(time.monotonic(), ledger.done(), ledger.pending >= self.max_concurrency)
                bound = self.backlog_bound()
                if backlog < bound:
                    return True
                ledger.counts["submitted"] += 1
                ledger.counts["dropped"] += 1
                self.shed_backlog += 1
            self._log.warning("shed", "ragaudit: turns arrive faster than the judge finishes them: turn %s shed "
                              "at hand-off, counted in stats()['dropped'] (backlog %d, bound %d: max_queue=%d, "
                              "exit_timeout_s=%g)", turn_id, backlog, bound, self.max_queue, self.exit_timeout_s)
            return False
        except Exception:  # never into the host: the turn takes the ordinary path
            return True

    def _shed_for_cpu(self, turn_id: str, cpu: CpuShare) -> bool:
        ledger = self._ledger
        with ledger.lock:
            if ledger.closed:
                return True  # counted where it lands
            ledger.counts["submitted"] += 1
            ledger.counts["dropped"] += 1
            self.shed_cpu += 1
        self._log.warning("shed_cpu", "ragaudit: the process is CPU-saturated (%.2f cores) and ragaudit's threads took "
                          "%.0f%% of its CPU, over Limits(max_cpu_share=%g): turn %s shed at hand-off (%.0f%% of turns "
                          "kept now), counted in stats()['dropped'] and ['shed_cpu']. To audit every answer, raise or "
                          "lift the cap (Limits(max_cpu_share=None), at the host's expense) or judge out of the "
                          "process (mode=\"worker\" and `ragaudit worker`)", cpu.cores or 0.0,
                          100 * (cpu.share or 0.0), cpu.max_share, turn_id, 100 * cpu.keep)
        return False

    def stats(self) -> dict[str, int]:
        """``shed_backlog`` and ``shed_cpu``: the turns shed here, by reason (both also counted ``dropped``);
        ``backlog_bound``."""
        return {"shed_backlog": self.shed_backlog, "shed_cpu": self.shed_cpu, "backlog_bound": self.backlog_bound()}

    def backlog_bound(self) -> int:
        """*max_queue*, or less: what the judge finishes within half of *exit_timeout_s* at its measured pace."""
        rate = self.pace.rate
        if rate is None:
            return self.max_queue
        return min(self.max_queue, max(2 * self.max_concurrency, int(rate * self.exit_timeout_s / 2)))

    def after_fork(self) -> None:
        self.pace.reset()
        self.shed_backlog = self.shed_cpu = 0
        if self.cpu is not None:
            self.cpu.reset()
