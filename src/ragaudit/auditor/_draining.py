"""Flushing and shutting down the Auditor: every deadline holds, whatever a judge, backend or exporter does.

`Draining` is the Auditor's base class for these (its workers and exporters are the
Auditor's); kept apart so the Auditor class stays about taking turns in. They go down the flow only:
judging, export, each exporter. Turns still being closed above the Auditor are the integrations'
closer's to hand down first (`ragaudit.integrations._closing`, which calls these afterwards).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._export import Exporter
from .._lifecycle import report
from .._worker import BatchWorker, call_with_deadline
from ..content import ContentPolicy
from ..judges.base import RagJudge
from ._exporting import ExportStage

if TYPE_CHECKING:
    from ..tracing._judge_spans import JudgeSpanExporter

__all__ = ["Draining", "Upstream"]

logger = logging.getLogger("ragaudit")

_CALL_MARGIN_S = 0.05


@runtime_checkable
class Upstream(Protocol):
    """A stage above the Auditor holding turns that ended but are not submitted yet (a turn closer:
    its sources' ended turns, its close jobs). Registered with `Draining.add_upstream`; the
    Auditor's `force_flush` and `shutdown` call it first."""

    def hand_down(self, timeout_s: float | None) -> bool:
        """Submit every turn that ended before the call, within *timeout_s*; True when all were.
        Calls nothing of the Auditor's but what takes turns in. Never raises."""
        ...

    def stop(self, timeout_s: float) -> bool:
        """[`hand_down`][ragaudit.auditor.Upstream.hand_down], then take no more turns in the background (a turn ending
        later is handed down at once and meets the closed Auditor, which counts it). True when nothing was
        left behind; what was is said on stderr. Never raises."""
        ...


class Draining:
    """Flush, shutdown and the exit hook's part, over the Auditor's workers and exporters."""

    judge: RagJudge
    _content_policy: ContentPolicy
    exit_timeout_s: float
    _lock: threading.Lock
    _closed: bool
    _pending: int
    _judging: BatchWorker[Any]
    _blocking: BatchWorker[Callable[[], None]] | None
    _export: ExportStage
    _spans: JudgeSpanExporter

    _upstream: list[weakref.ref[Upstream]]

    def stats(self) -> dict[str, int]:
        raise NotImplementedError

    def add_upstream(self, stage: Upstream) -> None:
        """Have `force_flush` and `shutdown` (and so the exit hook and SIGTERM) hand
        *stage*'s ended turns down first, in the order the stages were added. Held weakly: a stage
        lives as long as whoever made it keeps it. An integration's turn closer registers itself."""
        if not isinstance(stage, Upstream):
            from ..errors import ConfigurationError

            raise ConfigurationError(f"{stage!r} is no upstream stage (hand_down(timeout_s), stop(timeout_s))")
        with self._lock:
            self._upstream = [ref for ref in self._upstream if ref() is not None and ref() is not stage]
            self._upstream.append(weakref.ref(stage))

    def _upstream_stages(self) -> list[Upstream]:
        with self._lock:
            return [stage for ref in self._upstream if (stage := ref()) is not None]

    def _hand_down(self, deadline: float | None, stop: bool) -> bool:
        # Upstream first: the turns it holds must reach judging before judging is waited for.
        ok = True
        for stage in self._upstream_stages():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ok = (stage.stop(left or 0.0) if stop else stage.hand_down(left)) and ok
            except Exception as exc:  # the protocol says never raises; a third party's may
                self._job_failed(exc)
                ok = False
        return ok

    def _job_failed(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _has_sessions(self) -> bool:
        return False

    def _end_sessions(self) -> None:
        """Queue every open session for judging (at shutdown); nothing without sessions."""

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every turn that ended before the call is recorded and judged, its spans
        exported and the exporters flushed, whichever source produced it: the integrations' closer
        above this Auditor (every [`Upstream`][ragaudit.auditor.Upstream] added) first closes its sources' ended turns
        and runs the close jobs handed over so far, then judging, export and each exporter's
        ``force_flush``, all within the one deadline.

        Returns within *timeout_s* (seconds) plus a few milliseconds whatever the trace backend or a
        exporter does (their flushes run on a worker thread and are abandoned at the deadline), and
        says truthfully whether everything was delivered: False when the time ran out, a span
        export or an exporter's flush did not succeed, or a delivery failed (``export_errors`` grew)
        during the flush. Never raises.
        """
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        try:
            handed = self._hand_down(deadline, stop=False)
            return self._flush(deadline) and handed
        except Exception as exc:  # never into the host
            self._job_failed(exc)
            return False

    def _flush(self, deadline: float | None) -> bool:
        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        errors_before = self.stats()["export_errors"]
        spans_failed_before = self._spans.spans_not_exported()
        ok = self._judging.force_flush(remaining())
        ok = self._export.worker.force_flush(remaining()) and ok
        if self._closed:  # shutting down: every open session, its last turns judged by now, is judged too
            self._end_sessions()
        # Sessions the last turns made due (or shutdown ended): judged and exported too. Always, not
        # only while one is pending: a session judged at once (a judge without sessions answers
        # instantly) is no longer pending while its record still waits in the export queue.
        if self._has_sessions():
            ok = self._judging.force_flush(remaining()) and ok
            ok = self._export.worker.force_flush(remaining()) and ok
        # Exporters in order: spans first, as an exporter may refer to them (Phoenix annotations need the
        # span to exist); the judge-span exporter flushes every provider turns were judged through.
        for exporter in self._export.exporters:
            ok = self._bounded(exporter.force_flush, remaining(), exporter) and ok
        stats = self.stats()
        return (ok and stats["pending"] == 0 and stats["export_errors"] == errors_before
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
        """Flush (within *timeout_s*, default ``exit_timeout_s``), then stop the workers. Idempotent.

        First every [`Upstream`][ragaudit.auditor.Upstream] (the integrations' closer) hands its ended turns down and
        stops closing in the background, so the turns that ended before the call are judged too.

        Never raises, and returns within *timeout_s* plus a small margin whatever a judge, the trace
        backend or an exporter does. Turns submitted afterwards are counted as dropped. Returns False
        when something was not delivered by the deadline; what (judgements, turns, spans) is
        reported on stderr.
        """
        budget = self.exit_timeout_s if timeout_s is None else max(0.0, timeout_s)
        try:
            return self._shutdown(time.monotonic() + budget, budget)
        except Exception as exc:  # never into the host (a full disk, a failing exporter, ...)
            self._job_failed(exc)
            return False

    def _shutdown(self, deadline: float, budget: float) -> bool:
        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._lock:
            if self._closed:
                return self._pending == 0
        handed = self._hand_down(deadline, stop=True)
        with self._lock:
            if self._closed:  # a concurrent shutdown got here first
                return self._pending == 0 and handed
            self._closed = True
        ok = self._flush(deadline) and handed
        with self._lock:
            lost = self._pending
        if not lost:
            self._release_loop_clients(remaining())
        self._judging.shutdown(0)
        if self._blocking is not None:
            self._blocking.shutdown(0)
        self._export.worker.shutdown(0)
        for exporter in self._export.exporters:
            ok = self._bounded(_shutdown_call(exporter), remaining(), exporter) and ok
        stats = self.stats()  # after the exporters' shutdown: what they could not deliver is counted now
        if lost:
            report(f"{lost} judgement(s) still pending at shutdown were not recorded (flush timeout "
                   f"{budget:g}s); stats={stats}")
        if not ok and not lost:
            report(f"spans or exporter deliveries were not all confirmed at shutdown (flush timeout {budget:g}s; "
                   f"{stats['export_errors']} exporter item(s) not delivered); stats={stats}")
        return ok and not lost

    def _release_loop_clients(self, timeout_s: float) -> None:
        # A judge's async HTTP client belongs to our loop: close it while the loop still runs, or
        # its connections can never be closed ("Event loop is closed" later).
        if not self._judging.started:
            return
        try:
            self._judging.run_coroutine(self.judge.aclose_loop()).result(timeout=min(timeout_s, 5.0))
        except Exception as exc:
            logger.debug("ragaudit: closing the judge's client for the auditor loop failed: %s",
                         self._content_policy.exception(exc))


def _shutdown_call(exporter: Exporter) -> Callable[[float], bool]:
    def call(timeout_s: float) -> bool:
        exporter.shutdown(timeout_s)  # bounded by the caller too (it runs on a worker thread)
        return True

    return call

