"""Trace readiness: spans gathered per trace until the trace is whole enough to be a turn.

A trace is *ready* when a root span (no parent) has arrived — OTLP sends a span once it ended, so
the root has ended — and no span of the trace arrived for ``quiet_s``; or, root or not, when
``max_wait_s`` passed since its first span (a root that never comes: a remote parent, a lost
export). A trace handed out is remembered (the last ``max_done`` ids): its later spans are counted
as ``late_spans`` and dropped, never judged a second time. At most ``max_traces`` traces wait; a
new trace beyond that evicts the oldest (counted in ``evicted_traces`` and its spans in
``evicted_spans``).

Everything takes ``now`` from the injected clock: tests step time by hand, nothing sleeps.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..._numbers import check_number
from ...errors import ConfigurationError
from ._decode import SpanData

__all__ = ["PendingTrace", "TraceBuffer"]


@dataclass(slots=True)
class PendingTrace:
    """The spans of one trace so far, with when its first and last span arrived."""

    trace_id: str
    first_at: float
    last_at: float
    spans: list[SpanData] = field(default_factory=list)
    has_root: bool = False
    root_at: float | None = None


class TraceBuffer:
    """Holds spans per trace and hands out traces as they become ready (see the module docstring).

    Not thread-safe: one owner (the worker's event loop) calls every method.
    """

    def __init__(
        self,
        *,
        quiet_s: float = 2.0,
        max_wait_s: float = 30.0,
        max_traces: int = 10_000,
        max_done: int = 100_000,
        clock: Callable[[], float],
    ) -> None:
        check_number("quiet_s", quiet_s, 0)
        check_number("max_wait_s", max_wait_s, 0)
        if max_wait_s < quiet_s:
            raise ConfigurationError(f"max_wait_s ({max_wait_s}) must be >= quiet_s ({quiet_s})")
        for name, count in (("max_traces", max_traces), ("max_done", max_done)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ConfigurationError(f"{name} must be an int >= 1, got {count!r}")
        self.quiet_s = float(quiet_s)
        self.max_wait_s = float(max_wait_s)
        self.max_traces = max_traces
        self.max_done = max_done
        self.clock = clock
        # By last activity (quiet check, oldest first) and by first arrival (max_wait and eviction).
        self._by_activity: OrderedDict[str, PendingTrace] = OrderedDict()
        self._arrivals: deque[tuple[float, str]] = deque()
        self._done: OrderedDict[str, None] = OrderedDict()
        self.spans_buffered = 0
        self.bytes_buffered = 0  # the spans' SpanData.size, summed: the worker's in-flight budget
        self.late_spans = 0
        self.evicted_traces = 0
        self.evicted_spans = 0

    def __len__(self) -> int:
        return len(self._by_activity)

    def add(self, spans: Iterable[SpanData], now: float | None = None) -> list[PendingTrace]:
        """Buffer *spans*; returns the traces evicted to make room (already counted)."""
        now = self.clock() if now is None else now
        evicted: list[PendingTrace] = []
        by_activity = self._by_activity
        for span in spans:
            trace_id = span.trace_id
            pending = by_activity.get(trace_id)
            if pending is None:
                if trace_id in self._done:
                    self.late_spans += 1
                    continue
                if len(by_activity) >= self.max_traces:
                    oldest = self._pop_oldest()
                    if oldest is not None:
                        self.evicted_traces += 1
                        self.evicted_spans += len(oldest.spans)
                        evicted.append(oldest)
                pending = PendingTrace(trace_id, now, now)
                by_activity[trace_id] = pending
                self._arrivals.append((now, trace_id))
            else:
                pending.last_at = now
                by_activity.move_to_end(trace_id)
            pending.spans.append(span)
            self.spans_buffered += 1
            self.bytes_buffered += span.size
            if span.parent_id is None and not pending.has_root:
                pending.has_root = True
                pending.root_at = now
        return evicted

    def _pop_oldest(self) -> PendingTrace | None:
        while self._arrivals:
            _, trace_id = self._arrivals.popleft()
            pending = self._by_activity.pop(trace_id, None)
            if pending is not None:
                self._finish(pending)
                return pending
        return None

    def _finish(self, pending: PendingTrace) -> None:
        self.spans_buffered -= len(pending.spans)
        self.bytes_buffered -= sum(span.size for span in pending.spans)
        self._done[pending.trace_id] = None
        if len(self._done) > self.max_done:
            self._done.popitem(last=False)

    def due(self, now: float | None = None) -> list[PendingTrace]:
        """Remove and return the traces ready at *now* (quiet with a root, or past ``max_wait_s``)."""
        now = self.clock() if now is None else now
        ready: list[PendingTrace] = []
        # Past max_wait_s since the first span, whatever else: the arrival queue's front.
        while self._arrivals and now - self._arrivals[0][0] >= self.max_wait_s:
            _, trace_id = self._arrivals.popleft()
            pending = self._by_activity.pop(trace_id, None)
            if pending is not None:
                self._finish(pending)
                ready.append(pending)
        # Quiet ones with a root: the activity order's front, up to the first trace still active.
        quiet_without_root: list[PendingTrace] = []
        for pending in self._by_activity.values():
            if now - pending.last_at < self.quiet_s:
                break
            if pending.has_root:
                ready.append(pending)
            else:
                quiet_without_root.append(pending)
        for pending in ready:
            if self._by_activity.pop(pending.trace_id, None) is not None:
                self._finish(pending)
        # Quiet traces with no root wait (at the front) for their root or for max_wait_s: moved to
        # the back so that they do not hide quiet traces behind them from the scan above.
        for pending in quiet_without_root:
            self._by_activity.move_to_end(pending.trace_id)
        return ready

    def drain(self) -> list[PendingTrace]:
        """Remove and return every trace still waiting (shutdown: judge what is in flight)."""
        out = list(self._by_activity.values())
        for pending in out:
            self._finish(pending)
        self._by_activity.clear()
        self._arrivals.clear()
        return out
