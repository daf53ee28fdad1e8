"""Flushing and shutting down the Auditor: every deadline holds, whatever a judge, backend or exporter does.

`Drain` is a part the Auditor owns (as a TracerProvider owns its span processors): made with the Auditor's
workers and exporters, it keeps the registry of [`Upstream`][ragaudit.auditor.Upstream] stages and runs
``force_flush`` and ``shutdown`` for the Auditor. They go down the flow only: the upstream stages, judging,
export, each exporter. Turns still being closed above the Auditor are the integrations'
closer's to hand down first (`ragaudit.integrations._closing`, which calls these afterwards).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .. import _fork
from .._export import Exporter
from .._lifecycle import report
from .._worker import BatchWorker, call_with_deadline

if TYPE_CHECKING:
    from ..content import ContentPolicy
    from ..judges.base import RagJudge
    from ..tracing._judge_spans import JudgeSpanExporter
    from ._exporting import ExportStage
    from ._ledger import Ledger
    from ._session_part import SessionJudging
    from ._submitting import JudgingJob

__all__ = ["Drain", "Upstream"]

logger = logging.getLogger("ragaudit")

_CALL_MARGIN_S = 0.05


@runtime_checkable
class Upstream(Protocol):
    """A stage above the Auditor holding turns that ended but are not submitted yet (a turn closer:
    its sources' ended turns, its close jobs). Registered with
    [`Auditor.add_upstream`][ragaudit.Auditor.add_upstream]; the Auditor's `force_flush` and `shutdown` call it first,
    and its ``stats()`` are the stage's counts summed with the other stages'."""

    def hand_down(self, timeout_s: float | None) -> bool:
        """Submit every turn that ended before the call, within *timeout_s*; True when all were.
        Calls nothing of the Auditor's but what takes turns in. Never raises."""
        ...

    def stop(self, timeout_s: float) -> bool:
        """[`hand_down`][ragaudit.auditor.Upstream.hand_down], then take no more turns in the background (a turn ending
        later is handed down at once and meets the closed Auditor, which counts it). True when nothing was
        left behind; what was is said on stderr. Never raises."""
        ...

    def stats(self) -> Mapping[str, int]:
        """The stage's counts, summed over every stage into the Auditor's ``stats()``: ``closing`` (finished turns
        waiting here to be recorded) and ``close_dropped`` (turns dropped here, at the stage's bound). Never
        raises."""
        ...


class Drain:
    """Flush, shutdown and the upstream registry: a part the Auditor owns (see the module docstring).

    Given at construction what it drains, top down: the *ledger* (``closed``, ``pending``), the *judging* worker
    (and the *blocking* one of a sync judge), the *export* stage and its *spans* exporter, the *sessions* part
    (None without sessions), the *judge* (its loop clients are closed at shutdown), *describe* (the
    ``stats()`` a report on stderr shows) and *failed* (how a failure of ours is logged)."""

    def __init__(self, ledger: Ledger, judging: BatchWorker[JudgingJob],
                 blocking: BatchWorker[Callable[[], None]] | None, export: ExportStage, spans: JudgeSpanExporter,
                 sessions: SessionJudging | None, judge: RagJudge, *,
                 exit_timeout_s: float, policy: ContentPolicy, describe: Callable[[], Mapping[str, int]],
                 failed: Callable[[BaseException], None]) -> None:
        self._ledger = ledger
        self._judging = judging
        self._blocking = blocking
        self._export = export
        self._spans = spans
        self._sessions = sessions
        self._judge = judge
        self.exit_timeout_s = exit_timeout_s
        self._policy = policy
        self._describe = describe
        self._failed = failed
        self._lock = _fork.lock()
        self._upstream: list[weakref.ref[Upstream]] = []  # held weakly: a stage lives as long as its maker keeps it

    def add_upstream(self, stage: Upstream) -> None:
        """See [`Auditor.add_upstream`][ragaudit.Auditor.add_upstream]."""
        if not isinstance(stage, Upstream):
            from ..errors import ConfigurationError

            raise ConfigurationError(f"{stage!r} is no upstream stage (hand_down(timeout_s), stop(timeout_s), stats())")
        with self._lock:
            self._upstream = [ref for ref in self._upstream if ref() is not None and ref() is not stage]
            self._upstream.append(weakref.ref(stage))

    def upstream_stages(self) -> list[Upstream]:
        with self._lock:
            return [stage for ref in self._upstream if (stage := ref()) is not None]

    def upstream_stats(self) -> dict[str, int]:
        """The upstream stages' ``stats()``, summed key by key (a stage whose ``stats()`` fails counts nothing)."""
        total: dict[str, int] = {}
        for stage in self.upstream_stages():
            try:
                for key, value in stage.stats().items():
                    total[key] = total.get(key, 0) + int(value)
            except Exception as exc:  # the protocol says never raises; a third party's may
                self._failed(exc)
        return total

    def closing(self) -> int:
        """How many finished turns wait in the upstream stages to be recorded."""
        return self.upstream_stats().get("closing", 0)

    def _hand_down(self, deadline: float | None, stop: bool) -> bool:
        # Upstream first: the turns it holds must reach judging before judging is waited for.
        ok = True
        for stage in self.upstream_stages():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ok = (stage.stop(left or 0.0) if stop else stage.hand_down(left)) and ok
            except Exception as exc:  # the protocol says never raises; a third party's may
                self._failed(exc)
                ok = False
        return ok

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """See [`Auditor.force_flush`][ragaudit.Auditor.force_flush]. Never raises."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        try:
            handed = self._hand_down(deadline, stop=False)
            return self._flush(deadline) and handed
        except Exception as exc:  # never into the host
            self._failed(exc)
            return False

    def _flush(self, deadline: float | None) -> bool:
        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        errors_before = self._export.errors
        spans_failed_before = self._spans.spans_not_exported()
        ok = self._judging.force_flush(remaining())
        ok = self._export.worker.force_flush(remaining()) and ok
        if self._sessions is not None:
            if self._ledger.closed:  # shutting down: every open session, its last turns judged by now, is judged too
                self._sessions.end_all()
            # Sessions the last turns made due (or shutdown ended): judged and exported too. Always, not
            # only while one is pending: a session judged at once (a judge without sessions answers
            # instantly) is no longer pending while its record still waits in the export queue.
            ok = self._judging.force_flush(remaining()) and ok
            ok = self._export.worker.force_flush(remaining()) and ok
        # Exporters in order: spans first, as an exporter may refer to them (Phoenix annotations need the
        # span to exist); the judge-span exporter flushes every provider turns were judged through.
        for exporter in self._export.exporters:
            ok = self._bounded(exporter.force_flush, remaining(), exporter) and ok
        with self._ledger.lock:
            pending = self._ledger.pending
        return (ok and pending == 0 and self._export.errors == errors_before
                and self._spans.spans_not_exported() == spans_failed_before)

    def _bounded(self, call: Callable[[float], bool], timeout_s: float | None, target: object) -> bool:
        """Run a flush of code we do not control (an exporter's) within *timeout_s*."""
        budget = 30.0 if timeout_s is None else timeout_s
        try:
            finished, result = call_with_deadline(lambda: call(budget), budget + _CALL_MARGIN_S)
        except Exception as exc:
            self._export.count_failure(target, exc)
            return False
        return finished and bool(result)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """See [`Auditor.shutdown`][ragaudit.Auditor.shutdown]. Idempotent; never raises."""
        budget = self.exit_timeout_s if timeout_s is None else max(0.0, timeout_s)
        try:
            return self._shutdown(time.monotonic() + budget, budget)
        except Exception as exc:  # never into the host (a full disk, a failing exporter, ...)
            self._failed(exc)
            return False

    def _shutdown(self, deadline: float, budget: float) -> bool:
        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        ledger = self._ledger
        with ledger.lock:
            if ledger.closed:
                return ledger.pending == 0
        handed = self._hand_down(deadline, stop=True)
        with ledger.lock:
            if ledger.closed:  # a concurrent shutdown got here first
                return ledger.pending == 0 and handed
            ledger.closed = True
        ok = self._flush(deadline) and handed
        with ledger.lock:
            lost = ledger.pending
        if not lost:
            self._release_loop_clients(remaining())
        self._judging.shutdown(0)
        if self._blocking is not None:
            self._blocking.shutdown(0)
        self._export.worker.shutdown(0)
        for exporter in self._export.exporters:
            ok = self._bounded(_shutdown_call(exporter), remaining(), exporter) and ok
        stats = self._describe()  # after the exporters' shutdown: what they could not deliver is counted now
        if lost:
            report(f"{lost} judgement(s) still pending at shutdown were not recorded (flush timeout "
                   f"{budget:g}s); stats={stats}")
        if not ok and not lost:
            report(f"spans or exporter deliveries were not all confirmed at shutdown (flush timeout {budget:g}s; "
                   f"{stats.get('export_errors', 0)} exporter item(s) not delivered); stats={stats}")
        return ok and not lost

    def _release_loop_clients(self, timeout_s: float) -> None:
        # A judge's async HTTP client belongs to our loop: close it while the loop still runs, or
        # its connections can never be closed ("Event loop is closed" later).
        if not self._judging.started:
            return
        try:
            self._judging.run_coroutine(self._judge.aclose_loop()).result(timeout=min(timeout_s, 5.0))
        except Exception as exc:
            logger.debug("ragaudit: closing the judge's client for the auditor loop failed: %s",
                         self._policy.exception(exc))


def _shutdown_call(exporter: Exporter) -> Callable[[float], bool]:
    def call(timeout_s: float) -> bool:
        exporter.shutdown(timeout_s)  # bounded by the caller too (it runs on a worker thread)
        return True

    return call

