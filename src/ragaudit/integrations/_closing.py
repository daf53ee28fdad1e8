"""Turn closing: where a source hands a finished run over to be built into a turn, off the host's
thread, and where flushing and shutting down the turn pipeline begin.

One [`TurnCloser`][ragaudit.integrations.TurnCloser] per Auditor ([`closer_for`][ragaudit.integrations.closer_for]),
shared by every source that submits there: a BatchWorker of close jobs (a job builds the turn, records its spans and
submits it) and the sources whose half-finished turns must be closed before shutdown. Calls go one way, the way the
turns go: source → closer → Auditor → exporters. The closer registers with its Auditor as an
[`Upstream`][ragaudit.auditor.Upstream] (a protocol of the Auditor's floor: the Auditor imports nothing of
this one), so `Auditor.force_flush` and `Auditor.shutdown` -- and the exit hook and
SIGTERM, which call them -- have it hand its turns down first;
[`TurnCloser.force_flush`][ragaudit.integrations.TurnCloser.force_flush] and
[`TurnCloser.shutdown`][ragaudit.integrations.TurnCloser.shutdown] are the Auditor's. The closer counts for itself, in
its own [`stats`][ragaudit.integrations.TurnCloser.stats]: ``close_dropped`` (what it dropped) and ``closing`` (how
many wait here).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .. import _fork, _lifecycle
from .._log import RateLimitedLog
from .._worker import BatchWorker, run_jobs
from ..content import ContentPolicy, log_exception

if TYPE_CHECKING:
    from ..auditor import Auditor
    from ._source import TurnSource

__all__ = ["TurnCloser", "closer_for"]

_CLOSE_BATCH = 64
_CLOSE_DELAY_S = 0.1


class TurnCloser:
    """Runs close jobs in order, in batches (one gathers for up to 0.1 s), at most the Auditor's
    *max_closing* waiting; a job past that is dropped and counted (``stats()["close_dropped"]``)."""

    def __init__(self, auditor: Auditor) -> None:
        # Weak: the closer lives as long as its Auditor does (see closer_for), never longer.
        self._auditor = weakref.ref(auditor)
        self.max_closing = auditor.max_closing
        self.inline = auditor.mode == "inline"
        self.exit_timeout_s = auditor.exit_timeout_s
        self._log = RateLimitedLog()
        self._failed = _failure_log(self._log, auditor.content_policy)
        self._sources: weakref.WeakSet[TurnSource] = weakref.WeakSet()
        self._dropped = 0  # close jobs dropped at the bound (stats()["close_dropped"])
        self._counting = _fork.lock()
        self.worker: BatchWorker[Callable[[], None]] = BatchWorker(
            "closer", run_jobs, max_queue=self.max_closing, max_batch=_CLOSE_BATCH, delay_s=_CLOSE_DELAY_S,
            on_error=self._failed, paced=True)
        weakref.finalize(self, self.worker.shutdown, 0)

    @property
    def auditor(self) -> Auditor | None:
        """The Auditor this closer hands turns to (None once it is gone)."""
        return self._auditor()

    @property
    def closed(self) -> bool:
        """True once [`shutdown`][ragaudit.integrations.TurnCloser.shutdown] has stopped the closing thread (jobs then
        run at once)."""
        return self.worker.closed

    def attach(self, source: TurnSource) -> None:
        """Have [`shutdown`][ragaudit.integrations.TurnCloser.shutdown] (and the exit hook) close *source*'s ended turns
        first (held weakly: a handler made per call costs nothing once it is gone)."""
        self._sources.add(source)

    def defer(self, job: Callable[[], None]) -> bool:
        """Run *job* soon on the closing thread, never on the caller's. Never blocks or raises.

        A source closes a turn this way: at the end of a run it hands over the raw run data, and *job*
        builds the [`RagTurn`][ragaudit.RagTurn], records its spans (with the times the framework
        reported) and submits it, so none of that work is on the host's thread. Jobs run in order, in
        batches; [`force_flush`][ragaudit.integrations.TurnCloser.force_flush],
        [`shutdown`][ragaudit.integrations.TurnCloser.shutdown] and the exit hook run them before the Auditor's own.
        With an inline Auditor, and after shutdown, *job* runs at once on the caller's thread. Returns False when
        *max_closing* jobs are already waiting: *job* is dropped and counted. A raise from *job* is logged.
        """
        _lifecycle.keep_sigterm_handler()  # a server may have replaced it in this worker (first turn only)
        try:
            if self.inline or self.worker.closed:
                job()
                return True
            if self.worker.put(job):
                return True
        except Exception as exc:
            self._failed(exc)
            return False
        with self._counting:
            self._dropped += 1
        self._log.warning("close_dropped", "ragaudit: a finished turn was dropped before it was recorded "
                          "(%d turns already waiting to be closed, Limits.max_closing=%d)", len(self.worker),
                          self.max_closing)
        return False

    def close_sources(self) -> None:
        """Close every attached source's ended turns (before a shutdown stops taking turns)."""
        for source in list(self._sources):
            try:
                source.close_ended_turns()
            except Exception as exc:
                self._failed(exc)

    def hand_down(self, timeout_s: float | None) -> bool:
        """Close the sources' ended turns and run every job handed over so far (the turns built,
        traced and submitted to the Auditor), within *timeout_s*. The Auditor calls this first in its
        own `force_flush` (this closer is its [`Upstream`][ragaudit.auditor.Upstream]).
        False when the time ran out. Never raises."""
        try:
            self.close_sources()
            ok = self.worker.force_flush(timeout_s)
        except Exception as exc:
            self._failed(exc)
            ok = False
        return ok

    def stop(self, timeout_s: float) -> bool:
        """[`hand_down`][ragaudit.integrations.TurnCloser.hand_down] within *timeout_s*, then stop the closing thread (a
        job handed over later runs at once, on the caller's thread). Called by the Auditor's `shutdown`
        before it stops taking turns. False when turns were left waiting (said on stderr)."""
        # Turns whose root ended but a child run never did (a hung tool, a lost callback) are closed
        # now, their open children marked unfinished, so that exit records them too.
        self.hand_down(timeout_s)
        unclosed = len(self.worker)
        self.worker.shutdown(0)
        if unclosed:
            _lifecycle.report(f"{unclosed} finished turn(s) still waiting to be recorded at shutdown were not "
                              f"recorded (flush timeout {timeout_s:g}s)")
        return not unclosed

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """The Auditor's `force_flush`, which hands this closer's turns down
        first: every turn ended so far built, traced, submitted, judged and exported, all within
        *timeout_s*. False when the time ran out or something was not delivered. Never raises."""
        auditor = self._auditor()
        return auditor.force_flush(timeout_s) if auditor is not None else self.hand_down(timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """The Auditor's `shutdown` (within *timeout_s*, default its
        ``exit_timeout_s``), which stops this closer first. Idempotent; never raises. False when
        something was not recorded (said on stderr)."""
        auditor = self._auditor()
        if auditor is not None:
            return auditor.shutdown(timeout_s)
        return self.stop(self.exit_timeout_s if timeout_s is None else max(0.0, timeout_s))

    def stats(self) -> Mapping[str, int]:
        """``closing``: finished turns waiting here to be recorded; ``close_dropped``: those dropped because
        *max_closing* were waiting already (each logged, rate-limited)."""
        return {"closing": len(self.worker), "close_dropped": self._dropped}

    def __len__(self) -> int:
        return len(self.worker)


def _failure_log(log: RateLimitedLog, policy: ContentPolicy) -> Callable[[BaseException], None]:
    # Holds no closer: the worker's thread must not keep its closer (and so its Auditor) alive.
    def failed(exc: BaseException) -> None:
        log.warning(f"job:{type(exc).__name__}", "ragaudit: closing a turn failed (the pipeline is "
                    "unaffected): %s", log_exception(exc, policy))

    return failed


_lock = _fork.lock()
# The closer lives while its Auditor does (a weak key; the closer holds the Auditor weakly too).
_closers: weakref.WeakKeyDictionary[Auditor, TurnCloser] = weakref.WeakKeyDictionary()


def closer_for(auditor: Auditor) -> TurnCloser:
    """The one [`TurnCloser`][ragaudit.integrations.TurnCloser] above *auditor*, made with the first source that submits
    there and registered with it (`add_upstream`): the Auditor's ``force_flush()`` and
    ``shutdown()`` -- so the exit hook and SIGTERM too -- hand its turns down first."""
    closer = _closers.get(auditor)  # every turn's hand-off: no lock once the closer exists
    if closer is not None:
        return closer
    with _lock:
        closer = _closers.get(auditor)
        if closer is None:
            closer = _closers[auditor] = TurnCloser(auditor)
            auditor.add_upstream(closer)
            if auditor.closed:  # nothing will stop it: later turns go straight down to be counted
                closer.worker.shutdown(0)
        return closer
