"""Turn closing: where integrations hand finished runs over to be built into turns, off the host's thread.

A :class:`TurnCloser` is one BatchWorker of close jobs (a job builds the turn, records its spans and
submits it) and the sources whose half-finished turns must be closed before shutdown. The Auditor
holds one (so that ``Auditor.force_flush()``, ``shutdown()`` and the exit hook cover turns still being
closed) but never looks inside a job: it only drains the closer before it stops taking turns.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .. import _fork
from .._log import RateLimitedLog
from .._worker import BatchWorker, run_jobs

__all__ = ["TurnCloser", "TurnSource"]

_CLOSE_BATCH = 64
_CLOSE_DELAY_S = 0.1


@runtime_checkable
class TurnSource(Protocol):
    """An integration handler with turns of its own to close at shutdown."""

    def close_ended_turns(self) -> int:
        """Close the turns whose root run ended (children still open are marked unfinished);
        returns how many. Never raises."""
        ...


class TurnCloser:
    """Runs close jobs in order, in batches (one gathers for up to 0.1 s), at most *max_closing*
    waiting; a job past that is dropped and counted (:attr:`dropped`). *failed* is told about a
    job that raised."""

    def __init__(self, max_closing: int, failed: Callable[[BaseException], None], *, inline: bool = False) -> None:
        self.max_closing = max_closing
        self.inline = inline
        self._failed = failed
        self._lock = _fork.lock()
        self.dropped = 0
        self._log = RateLimitedLog()
        self._sources: weakref.WeakSet[TurnSource] = weakref.WeakSet()
        self.worker: BatchWorker[Callable[[], None]] = BatchWorker(
            "closer", run_jobs, max_queue=max_closing, max_batch=_CLOSE_BATCH, delay_s=_CLOSE_DELAY_S,
            on_error=failed, paced=True)

    def attach(self, source: TurnSource) -> None:
        """Have :meth:`close_sources` close *source*'s ended turns before shutdown (held weakly: a
        handler made per call costs nothing once it is gone)."""
        self._sources.add(source)

    def defer(self, job: Callable[[], None]) -> bool:
        """Run *job* soon on the closing thread, never on the caller's. Never blocks or raises.

        Integrations close a turn this way: at the end of a run they hand over the raw run data,
        and *job* builds the :class:`~ragaudit.RagTurn`, records its spans (with the times the
        framework reported) and submits it, so none of that work is on the host's thread. Jobs run
        in order, in batches; the Auditor's ``force_flush()``, ``shutdown()`` and the exit hook drain
        them first. With an inline Auditor, and after shutdown, *job* runs at once on the caller's
        thread. Returns False when *max_closing* jobs are already waiting: *job* is dropped and
        counted (``stats()["close_dropped"]``). A raise from *job* is logged.
        """
        try:
            if self.inline or self.worker.closed:
                job()
                return True
            if self.worker.put(job):
                return True
        except Exception as exc:
            self._failed(exc)
            return False
        with self._lock:
            self.dropped += 1
        self._log.warning("close_dropped", "ragaudit: a finished turn was dropped before it was recorded "
                          "(%d turns already waiting to be closed, max_closing=%d)", len(self.worker),
                          self.max_closing)
        return False

    def close_sources(self) -> None:
        """Close every attached source's ended turns (before a shutdown stops taking turns)."""
        for source in list(self._sources):
            try:
                source.close_ended_turns()
            except Exception as exc:
                self._failed(exc)

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every job deferred so far has run (the turns built, their spans ended, they are
        submitted); not for their judgements. False when *timeout_s* ran out first."""
        return self.worker.force_flush(timeout_s)

    def __len__(self) -> int:
        return len(self.worker)

    def after_fork(self) -> None:
        self._lock = _fork.lock()
        self.dropped = 0
