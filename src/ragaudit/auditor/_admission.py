"""The Auditor's admission at hand-off: what becomes of a finished turn before any closing work.

`Admission` is a base class of the Auditor, kept apart like its draining and its sessions. An integration
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

``submitted == judged + failed + dropped + sampled_out + pending + ...`` holds as before: a turn decided here
is submitted and counted in the same step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._sampling import sampled
from ._governor import NOT_SENT

if TYPE_CHECKING:
    from .._log import RateLimitedLog
    from ._governor import CostGate

__all__ = ["Admission", "JudgingPace"]


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


class Admission:
    """Sampling and overload shedding at hand-off, for the Auditor (see the module docstring)."""

    mode: str
    sample_rate: float
    max_queue: int
    max_concurrency: int
    exit_timeout_s: float
    _lock: Any
    _counts: dict[str, int]
    _pending: int
    _closing: int
    _closed: bool
    _cost: CostGate
    _log: RateLimitedLog
    _sessions: Any
    _pace: JudgingPace

    def admit_turn(self, turn_id: str) -> bool:
        """At hand-off, before any closing work: True when the finished turn *turn_id* is to be closed (built,
        traced, submitted). False when it was decided here, and counted: sampled out, or shed because the
        backlog is at its bound (``dropped``). Never raises, never blocks."""
        try:
            early = self.mode != "worker" and not self._cost.retained.enabled and self._sessions is None
            if early and self.sample_rate < 1.0 and not sampled(turn_id, self.sample_rate):
                with self._lock:
                    self._counts["submitted"] += 1
                    self._counts["sampled_out"] += 1
                return False
            if self.mode != "background":
                return True
            with self._lock:
                if self._closed:
                    return True  # counted where it lands (dropped, or closed at once by a closer shut down)
                backlog = self._pending + self._closing
                counts = self._counts
                done = counts["judged"] + counts["failed"] + sum(map(counts.__getitem__, NOT_SENT))
                self._pace.update(time.monotonic(), done, self._pending >= self.max_concurrency)
                bound = self._backlog_bound()
                if backlog < bound:
                    return True
                counts["submitted"] += 1
                counts["dropped"] += 1
            self._log.warning("shed", "ragaudit: turns arrive faster than the judge finishes them: turn %s shed "
                              "at hand-off, counted in stats()['dropped'] (backlog %d, bound %d: max_queue=%d, "
                              "exit_timeout_s=%g)", turn_id, backlog, bound, self.max_queue, self.exit_timeout_s)
            return False
        except Exception:  # never into the host: the turn takes the ordinary path
            return True

    def _backlog_bound(self) -> int:
        """*max_queue*, or less: what the judge finishes within half of *exit_timeout_s* at its measured pace."""
        rate = self._pace.rate
        if rate is None:
            return self.max_queue
        return min(self.max_queue, max(2 * self.max_concurrency, int(rate * self.exit_timeout_s / 2)))
