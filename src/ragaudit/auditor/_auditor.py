"""The :class:`Auditor`: takes finished turns and judges them off the host's hot path."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from .._deprecation import renamed_kwargs
from .._log import RateLimitedLog
from .._sampling import sampled
from .._sink import JudgementSink, emitting_with
from .._turn_metrics import turn_metrics
from .._worker import BatchWorker, call_on, call_with_deadline, on_fork_in_child, run_jobs
from ..content import ContentPolicy, log_exception
from ..errors import ConfigurationError
from ..judges.base import RagJudge
from ..records import Judgement, JudgeRequest, RagTurn
from ._lifecycle import flush_on_sigterm, report, track

_CLOSE_BATCH = 64
_CLOSE_DELAY_S = 0.1
_CALL_MARGIN_S = 0.05

__all__ = ["Auditor", "JudgementSink", "OnJudgement", "SubmitStatus"]

logger = logging.getLogger("ragaudit")

SubmitStatus = Literal["queued", "judged", "failed", "dropped", "sampled_out"]
"""What :meth:`Auditor.submit` did with a turn."""

OnJudgement = Callable[[RagTurn, Judgement], None]


class _JudgeRaised(Exception):
    """A SystemExit or KeyboardInterrupt from a judge, carried as an ordinary error."""


async def _contained(awaitable: Awaitable[Any]) -> Any:
    # asyncio re-raises SystemExit and KeyboardInterrupt out of the event loop, which would stop the
    # worker with every later turn stuck pending: a judge's own are turned into an error here.
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _JudgeRaised(f"{type(exc).__name__} raised by the judge: {exc}") from exc


class Auditor:
    """Judges finished :class:`~ragaudit.RagTurn` s in the background and sends the judgements on.

    A :class:`~ragaudit._worker.BatchWorker` runs the judging (an asyncio loop on one thread, sync
    judges on threads of a second one); :meth:`submit` hands it a turn without blocking and
    without raising. Constructing an Auditor starts no thread and opens no file: threads start
    with the first turn, the audit log opens with its first line (a failure there is counted in
    ``sink_errors`` and logged once, and the traces still flow). An Auditor nobody references any
    more stops its threads and closes its file (its worker threads hold it weakly). At most
    *max_queue* turns wait or are being judged; past that a turn is
    **dropped and counted**, never lost silently. At most *max_concurrency* judgements run at once,
    each bounded by *timeout_s*. *sample_rate* keeps a deterministic share of turns (by turn id).
    ``mode="inline"`` judges before :meth:`submit` returns (for scripts and tests). Integrations
    hand finished turns over with :meth:`defer`; at most *max_closing* wait to be recorded (a burst
    past that drops whole turns, spans included, counted in ``stats()["close_dropped"]``), a bound
    separate from *max_queue* so that a small judging queue never costs traces.

    Each judgement goes to: the OTel judge span (through *tracer_provider* or the global one; a
    child of the turn's span, or with ``judge_trace="separate"`` the root of its own trace linked
    to the turn, so the turn's trace lasts as long as the answer did), the JSONL *audit_log*
    (``None`` to disable), every
    *sinks* entry, and *on_judgement(turn, judgement)*. A judge or sink that fails is recorded
    (judgement ``error``, ``stats()["sink_errors"]``), never raised.

    Every text recorded (spans, audit log, sinks, ragaudit's log lines) goes through one
    :class:`~ragaudit.content.ContentPolicy`, :attr:`content`, made of *capture_content* (None: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` setting), *capture_reason* (keep the judge's
    reason even with capture off; None: as *capture_content*) and *redact*. A turn an integration
    handler submits carries the handler's span recorder (:meth:`recorder_for`: its tracer provider
    and content policy); that turn's judge span, audit-log line, sink records and log lines follow
    it, so handlers with different settings share one Auditor (one set of threads, one file) and
    none of them has its texts recorded more loosely than it asked. Known secrets (API keys,
    credential headers and URL parts of the judge client and sinks, key-like environment variables,
    OTLP headers) are scrubbed always; a *redact* that raises withholds the text, never the turn.

    Pending judgements are flushed at normal interpreter exit (within *exit_timeout_s*); a
    shortfall is written to stderr. ``stats()`` always satisfies ``submitted == judged + failed +
    dropped + sampled_out + pending``.

    SIGTERM (``docker stop``, Kubernetes) kills a Python process without running exit hooks, so
    judgements still pending then are lost. With ``handle_signals=True`` (from the main thread),
    SIGTERM first flushes every such auditor (within its *exit_timeout_s*, a shortfall reported on
    stderr) and then terminates the process the default way. A SIGTERM handler the application
    installed itself is never replaced: it is left in place (with a warning), and the normal exit
    flush runs if that handler exits the interpreter (``sys.exit``).
    """

    def __init__(
        self,
        judge: RagJudge | None = None,
        *,
        mode: Literal["background", "inline"] = "background",
        sample_rate: float = 1.0,
        max_queue: int = 10_000,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        audit_log: str | os.PathLike[str] | None = "ragaudit-audit.jsonl",
        tracer_provider: Any = None,
        on_judgement: OnJudgement | None = None,
        sinks: Iterable[JudgementSink] = (),
        capture_content: bool | None = None,
        redact: Callable[[str], str] | None = None,
        capture_reason: bool | None = None,
        max_context_chars: int = 24_000,
        exit_timeout_s: float = 30.0,
        handle_signals: bool = False,
        max_closing: int = 10_000,
        judge_trace: Literal["turn", "separate"] | None = None,
    ) -> None:
        if mode not in ("background", "inline"):
            raise ConfigurationError(f"mode must be 'background' or 'inline', got {mode!r}")
        if not isinstance(sample_rate, (int, float)) or not 0.0 <= float(sample_rate) <= 1.0:
            raise ConfigurationError(f"sample_rate must be in [0, 1], got {sample_rate!r}")
        if not isinstance(max_queue, int) or max_queue < 1:
            raise ConfigurationError(f"max_queue must be an int >= 1, got {max_queue!r}")
        if not isinstance(max_closing, int) or max_closing < 1:
            raise ConfigurationError(f"max_closing must be an int >= 1, got {max_closing!r}")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ConfigurationError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ConfigurationError(f"timeout_s must be > 0, got {timeout_s!r}")
        if on_judgement is not None and not callable(on_judgement):
            raise ConfigurationError("on_judgement must be callable(turn, judgement)")
        if redact is not None and not callable(redact):
            raise ConfigurationError("redact must be callable(text) -> text")
        if judge is None:
            from ..judges import default_judge

            judge = default_judge()
        if not isinstance(judge, RagJudge):
            raise ConfigurationError(f"judge must implement RagJudge (name, judge, ajudge, blocking, aclose_loop): "
                                     f"derive it from ragaudit.BaseRagJudge; got {type(judge).__name__}")
        sinks = tuple(sinks)
        for sink in sinks:
            if not isinstance(sink, JudgementSink):
                raise ConfigurationError(f"sink {sink!r} does not implement JudgementSink (emit, force_flush, "
                                         "shutdown, bind_recorder, errors): derive it from "
                                         "ragaudit.auditor.BaseJudgementSink")

        from ..tracing.spans import SpanRecorder

        self.judge = judge
        self.mode = mode
        self.sample_rate = float(sample_rate)
        self.max_queue = max_queue
        self.max_closing = max_closing
        self._turn_sources: weakref.WeakSet[Any] = weakref.WeakSet()
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_context_chars = max_context_chars
        self.exit_timeout_s = exit_timeout_s
        self._on_judgement = on_judgement
        self._sinks = sinks
        # The one policy for every text this auditor and its recorder, audit log and sinks record.
        self.content = ContentPolicy(capture_content=capture_content, capture_reason=capture_reason,
                                     redact=redact)
        # Settings given on purpose bind every turn submitted here (recorder_for); the defaults
        # (the environment's capture setting, no hook) leave each handler's own settings in charge.
        self._content_given = capture_content is not None or capture_reason is not None or redact is not None
        self._recorder = SpanRecorder(tracer_provider, content=self.content, judge_trace=judge_trace)
        # Recorders made by recorder_for (held weakly: they go with their handlers): flush() flushes
        # their providers too, and a turn submitted with one is recorded with it as it is.
        self._handler_recorders: weakref.WeakSet[Any] = weakref.WeakSet()
        # Recorders from elsewhere, mapped to the one recorder_for makes of their settings.
        self._foreign_recorders: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        for sink in sinks:
            sink.bind_recorder(self._recorder)
        self._audit_log = None
        if audit_log is not None:
            from ..tracing.files import AuditLog

            # Opened with its first line: a read-only working directory must not make constructing
            # an Auditor (or a handler) raise into the host; a failed write is counted instead.
            self._audit_log = AuditLog(audit_log, content=self.content, lazy=True)
        # Sync-only judges (LexicalJudge, a user's BaseRagJudge with judge()) are called in
        # threads of a worker of ours, not through asyncio.to_thread: at interpreter exit the
        # default executor refuses new work, and exit is exactly when we flush.
        self._sync_judge = bool(judge.blocking)

        self._lock = threading.Lock()
        self._counts = {"submitted": 0, "judged": 0, "failed": 0, "dropped": 0, "sampled_out": 0,
                        "sink_errors": 0, "close_dropped": 0, "unjudged_no_evidence": 0,
                        "unjudged_empty_answer": 0}
        self._pending = 0
        self._closed = False
        self._log = RateLimitedLog()
        # The workers' handlers reach this auditor through a weak reference, so a running worker
        # thread never keeps an Auditor nobody else references alive; when it goes, they stop.
        ref = weakref.ref(self)

        async def judge_turn(item: tuple[RagTurn, Any]) -> None:
            auditor = ref()
            if auditor is not None:
                await auditor._process(*item)

        def job_failed(exc: BaseException) -> None:
            auditor = ref()
            if auditor is not None:
                auditor._job_failed(exc)

        # The worker's own bound leaves room for the judgements in flight: max_queue (pending,
        # counted here under one lock with the judged/failed counts) is what drops turns.
        self._judging: BatchWorker[tuple[RagTurn, Any]] = BatchWorker(
            "auditor", ahandle=judge_turn, max_queue=max_queue + max_concurrency, concurrency=max_concurrency,
            paced=True)
        self._blocking: BatchWorker[Callable[[], None]] | None = None
        if self._sync_judge:
            self._blocking = BatchWorker("judge", run_jobs, max_queue=max_queue + max_concurrency, max_batch=1,
                                         threads=max_concurrency)
        self._closer: BatchWorker[Callable[[], None]] = BatchWorker(
            "closer", run_jobs, max_queue=max_closing, max_batch=_CLOSE_BATCH, delay_s=_CLOSE_DELAY_S,
            on_error=job_failed, paced=True)
        workers = [w for w in (self._closer, self._judging, self._blocking) if w is not None]
        weakref.finalize(self, _release, workers, self._audit_log)
        track(self)
        on_fork_in_child(self._after_fork)
        if handle_signals:
            flush_on_sigterm(self)

    # -- public API -------------------------------------------------------------------------

    @property
    def recorder(self) -> Any:
        """The :class:`~ragaudit.tracing.SpanRecorder` this auditor writes judge spans with."""
        return self._recorder

    @property
    def redact(self) -> Callable[[str], str] | None:
        """The redaction hook applied to every text this auditor records (None: none)."""
        return self.content.redact

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` has begun: turns submitted from then on are dropped."""
        return self._closed

    def recorder_for(
        self,
        tracer_provider: Any = None,
        *,
        capture_content: bool | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> Any:
        """The span recorder for an integration handler with these settings that submits here.

        With none given, this auditor's own :attr:`recorder`. Else a new
        :class:`~ragaudit.tracing.SpanRecorder` (no thread, no file) on *tracer_provider* (None: this
        auditor's provider) whose policy is the handler's settings; when this auditor was given
        content settings itself, the stricter of both applies to each text (capture only when both
        capture, the reason only when both keep it, the handler's *redact* and then the auditor's).
        A turn submitted with it (``submit(turn, recorder=...)``) has its judge span, audit-log
        line, sink records and log lines recorded through it.
        """
        if tracer_provider is None and capture_content is None and redact is None:
            return self._recorder
        from ..tracing.spans import SpanRecorder

        own = self.content
        if capture_content is None and redact is None:
            policy = own  # only a provider of its own: this auditor's policy as it is
        elif self._content_given:
            handler = True if capture_content is None else bool(capture_content)
            policy = ContentPolicy(capture_content=own.capture_content and handler,
                                   capture_reason=own.capture_reason and handler,
                                   redact=_chained(redact, own.redact))
        else:
            policy = ContentPolicy(capture_content=capture_content, redact=redact)
        provider = tracer_provider if tracer_provider is not None else self._recorder.tracer_provider
        recorder = SpanRecorder(provider, content=policy, judge_trace=self._recorder.judge_trace,
                                max_attribute_chars=self._recorder.max_attribute_chars,
                                max_documents=self._recorder.max_documents)
        with self._lock:
            self._handler_recorders.add(recorder)
        return recorder

    def _recording(self, recorder: Any) -> Any:
        """The recorder a turn submitted with *recorder* is recorded with (see :meth:`recorder_for`)."""
        if recorder is None or recorder is self._recorder:
            return self._recorder
        with self._lock:
            if recorder in self._handler_recorders:
                return recorder
            found = self._foreign_recorders.get(recorder)
        if found is None:
            # A recorder made elsewhere: its provider and settings, under the same rule as a handler's.
            content = recorder.content
            found = self.recorder_for(recorder.tracer_provider or self._recorder.tracer_provider,
                                      capture_content=content.capture_content, redact=content.redact)
            with self._lock:
                self._foreign_recorders[recorder] = found
        return found

    def submit(self, turn: RagTurn, *, recorder: Any = None) -> SubmitStatus:
        """Hand *turn* over for judging. Never blocks (except in inline mode) and never raises.

        *recorder*: the span recorder that recorded the turn (an integration handler's, from
        :meth:`recorder_for`); the turn's judge span, audit-log line and sink records go through
        it. None: this auditor's own.

        Returns ``"queued"``, ``"sampled_out"`` or ``"dropped"`` (queue full or auditor shut
        down); in inline mode ``"judged"`` or ``"failed"`` once the judgement is made.
        """
        try:
            return self._submit(turn, self._recording(recorder))
        except Exception as exc:  # the host pipeline must never see our failure
            policy = getattr(recorder, "content", None)
            policy = policy if isinstance(policy, ContentPolicy) else self.content
            logger.error("ragaudit: submit failed; turn counted as dropped: %s", policy.exception(exc),
                         exc_info=exc if policy.capture_content and self.content.capture_content else None)
            with self._lock:
                self._counts["dropped"] += 1
            return "dropped"

    def attach_source(self, source: Any) -> None:
        """Register an integration handler whose half-finished turns :meth:`shutdown` should close.

        *source* has a ``close_ended_turns()`` method; it is held weakly (a handler made per call
        costs nothing once it is gone).
        """
        self._turn_sources.add(source)

    def count_unjudged(self, reason: str) -> bool:
        """Count a finished turn that was traced but not judged: *reason* ``"no_evidence"`` (an answer
        with no evidence) or ``"empty_answer"``; ``stats()["unjudged_<reason>"]``. Returns True the
        first time for *reason* (the caller logs the fix once per auditor)."""
        key = f"unjudged_{reason}"
        with self._lock:
            if key not in self._counts:
                return False
            self._counts[key] += 1
            return self._counts[key] == 1

    def defer(self, job: Callable[[], None]) -> bool:
        """Run *job* soon on the auditor's closing thread, never on the caller's. Never blocks or raises.

        Integrations close a turn this way: at the end of a run they hand over the raw run data,
        and *job* builds the :class:`~ragaudit.RagTurn`, records its spans (with the times the
        framework reported) and :meth:`submit` s it, so none of that work is on the host's thread.
        Jobs run in order, in batches (one gathers for up to 0.1 s); :meth:`flush`,
        :meth:`shutdown` and the exit hook run every job deferred before them. In inline mode, and
        after :meth:`shutdown`, *job* runs at once on the caller's thread. Returns False when
        *max_closing* jobs are already waiting: *job* is dropped and counted in
        ``stats()["close_dropped"]``. *job* should not raise; if it does, the error is logged.
        """
        try:
            if self.mode == "inline" or self._closed or self._closer.closed:
                job()
                return True
            if self._closer.put(job):
                return True
        except Exception as exc:
            self._job_failed(exc)
            return False
        with self._lock:
            self._counts["close_dropped"] += 1
        self._log.warning("close_dropped", "ragaudit: a finished turn was dropped before it was recorded "
                          "(%d turns already waiting to be closed, max_closing=%d); stats=%s",
                          len(self._closer), self.max_closing, self.stats())
        return False

    @renamed_kwargs(timeout="timeout_s")
    def flush_turns(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every job :meth:`defer` got so far has run: the turns integrations handed over
        are built, their spans ended and they are submitted. Does not wait for judgements (that is
        :meth:`flush`). Returns False when *timeout_s* (seconds) ran out first."""
        return self._closer.flush(timeout_s)

    @renamed_kwargs(timeout="timeout_s")
    def flush(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every turn handed over so far is recorded and judged, its spans exported and
        the sinks flushed.

        Returns within *timeout_s* (seconds) plus a few milliseconds whatever the trace backend or a
        sink does (their flushes run on a worker thread and are abandoned at the deadline), and
        says truthfully whether everything was delivered: False when the time ran out, a span
        export or a sink's flush did not succeed, or a delivery failed (``sink_errors`` grew)
        during the flush. Never raises.
        """
        try:
            return self._flush(None if timeout_s is None else time.monotonic() + max(0.0, timeout_s))
        except Exception as exc:  # never into the host
            self._job_failed(exc)
            return False

    def _flush(self, deadline: float | None) -> bool:
        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        from ..tracing.setup import spans_not_exported

        errors_before = self.stats()["sink_errors"]
        spans_failed_before = spans_not_exported()
        ok = self._closer.flush(remaining())
        ok = self._judging.flush(remaining()) and ok
        # Spans first: a sink may refer to spans (Phoenix annotations need the span to exist); every
        # provider a handler's turns were judged through, once each.
        for recorder in self._recorders_by_provider():
            ok = self._bounded(recorder.force_flush, remaining(), recorder) and ok
        for sink in self._sinks:
            ok = self._bounded(sink.force_flush, remaining(), sink) and ok
        stats = self.stats()
        return (ok and stats["pending"] == 0 and stats["sink_errors"] == errors_before
                and spans_not_exported() == spans_failed_before)

    def _recorders_by_provider(self) -> list[Any]:
        with self._lock:
            handlers = list(self._handler_recorders)
        seen = {id(self._recorder.tracer_provider)}
        out = [self._recorder]
        for recorder in handlers:
            key = id(recorder.tracer_provider)
            if key not in seen:
                seen.add(key)
                out.append(recorder)
        return out

    def _bounded(self, call: Callable[[float], bool], timeout_s: float | None, target: object) -> bool:
        """Run a flush of code we do not control (an exporter, a sink) within *timeout_s*."""
        budget = 30.0 if timeout_s is None else timeout_s
        try:
            finished, result = call_with_deadline(lambda: call(budget), budget + _CALL_MARGIN_S)
        except Exception as exc:
            self._sink_failed(target, exc)
            return False
        return finished and bool(result)

    @renamed_kwargs(timeout="timeout_s")
    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Flush (within *timeout_s*, default ``exit_timeout_s``), then stop the workers. Idempotent.

        Never raises, and returns within *timeout_s* plus a small margin whatever a judge, the trace
        backend or a sink does. Turns submitted afterwards are counted as dropped. Returns False
        when something was not delivered by the deadline; what (judgements, turns, spans) is
        reported on stderr.
        """
        budget = self.exit_timeout_s if timeout_s is None else max(0.0, timeout_s)
        try:
            return self._shutdown(time.monotonic() + budget, budget)
        except Exception as exc:  # never into the host (a full disk, a failing sink, ...)
            self._job_failed(exc)
            return False

    def _shutdown(self, deadline: float, budget: float) -> bool:
        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._lock:
            if self._closed:
                return self._pending == 0
        # Turns whose root ended but a child run never did (a hung tool, a lost callback) are closed
        # now, their open children marked unfinished, so that exit records them too.
        for source in list(self._turn_sources):
            try:
                source.close_ended_turns()
            except Exception as exc:
                self._job_failed(exc)
        # Turns still being closed are submitted before the auditor stops accepting them.
        self._closer.flush(remaining())
        unclosed = len(self._closer)
        self._closer.shutdown(0)
        with self._lock:
            if self._closed:
                return self._pending == 0
            self._closed = True
        ok = self._flush(deadline)
        with self._lock:
            lost = self._pending
        if not lost:
            self._release_loop_clients(remaining())
        self._judging.shutdown(0)
        if self._blocking is not None:
            self._blocking.shutdown(0)
        for sink in self._sinks:
            ok = self._bounded(_shutdown_call(sink), remaining(), sink) and ok
        if self._audit_log is not None:
            try:
                self._audit_log.close()
            except Exception as exc:  # the last buffered line could not be written (disk full)
                self._sink_failed(self._audit_log, exc)
        stats = self.stats()  # after the sinks' shutdown: what they could not deliver is counted now
        if lost:
            report(f"{lost} judgement(s) still pending at shutdown were not recorded (flush timeout "
                   f"{budget:g}s); stats={stats}")
        if unclosed:
            report(f"{unclosed} finished turn(s) still waiting to be recorded at shutdown were not "
                   f"recorded (flush timeout {budget:g}s)")
        if not ok and not lost and not unclosed:
            report(f"spans or sink deliveries were not all confirmed at shutdown (flush timeout {budget:g}s; "
                   f"{stats['sink_errors']} sink item(s) not delivered); stats={stats}")
        return ok and not lost and not unclosed

    def _release_loop_clients(self, timeout_s: float) -> None:
        # A judge's async HTTP client belongs to our loop: close it while the loop still runs, or
        # its connections can never be closed ("Event loop is closed" later).
        if not self._judging.started:
            return
        try:
            self._judging.run_coroutine(self.judge.aclose_loop()).result(timeout=min(timeout_s, 5.0))
        except Exception as exc:
            logger.debug("ragaudit: closing the judge's client for the auditor loop failed: %s",
                         self.content.exception(exc))

    def stats(self) -> dict[str, int]:
        """Counts: submitted, judged, failed, dropped, sampled_out, pending, sink_errors, close_dropped,
        closing, unjudged_no_evidence, unjudged_empty_answer.

        ``unjudged_no_evidence`` counts turns with an answer and no evidence (a retriever outside the
        callback tree) and ``unjudged_empty_answer`` turns whose answer was empty; both are traced,
        never submitted (:meth:`count_unjudged`).

        One consistent snapshot (one lock): ``submitted == judged + failed + dropped + sampled_out
        + pending`` always holds, also while judgements are being delivered. ``sink_errors``
        includes the sinks' own delivery failures (items a sink gave up on). ``closing`` is how
        many finished turns wait to be recorded (:meth:`defer`) and ``close_dropped`` how many were
        dropped because *max_closing* were waiting already.
        """
        sink_errors = self._sink_errors()
        closing = len(self._closer)
        with self._lock:
            stats = {**self._counts, "pending": self._pending, "closing": closing}
        stats["sink_errors"] += sink_errors
        return stats

    def _sink_errors(self) -> int:
        total = 0
        for sink in self._sinks:
            try:
                total += int(sink.errors)
            except Exception:  # a sink's counter must not break stats()
                continue
        return total

    def __enter__(self) -> Auditor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- internals --------------------------------------------------------------------------

    def _submit(self, turn: RagTurn, recorder: Any) -> SubmitStatus:
        with self._lock:
            self._counts["submitted"] += 1
            if self._closed:
                self._counts["dropped"] += 1
                status: SubmitStatus = "dropped"
            elif not sampled(turn.turn_id, self.sample_rate):
                self._counts["sampled_out"] += 1
                return "sampled_out"
            elif self._pending >= self.max_queue:
                self._counts["dropped"] += 1
                status = "dropped"
            else:
                self._pending += 1
                status = "queued"
        if status == "dropped":
            self._log.warning("dropped", "ragaudit: turn %s dropped (%s); stats=%s", turn.turn_id,
                              "auditor shut down" if self._closed else f"queue full, max_queue={self.max_queue}",
                              self.stats())
            return status
        if self.mode == "inline":
            try:
                judgement = self._judging.run_coroutine(self._process(turn, recorder)).result()
            except RuntimeError:  # no thread could be started (interpreter shutdown)
                self._unqueue()
                return "dropped"
            return "judged" if judgement.error is None else "failed"
        if not self._judging.put((turn, recorder)):
            self._unqueue()
            return "dropped"
        return "queued"

    def _after_fork(self) -> None:
        # In a forked child (gunicorn --preload): the parent's judgements in flight are the
        # parent's to finish; the child's workers start empty, and so do its counts.
        self._lock = threading.Lock()
        self._pending = 0
        self._counts = dict.fromkeys(self._counts, 0)

    def _unqueue(self) -> None:
        with self._lock:
            self._pending -= 1
            self._counts["dropped"] += 1

    async def _process(self, turn: RagTurn, recorder: Any) -> Judgement:
        start_ns = time.time_ns()
        judgement: Judgement | None = None
        try:
            judgement = await self._judge(turn)
            self._deliver(turn, judgement, start_ns, recorder)
            return judgement
        finally:
            # Counted with the pending count in one step, after delivery: a stats() snapshot
            # taken meanwhile still adds up.
            with self._lock:
                self._pending -= 1
                if judgement is None:
                    self._counts["failed"] += 1
                else:
                    self._counts["judged" if judgement.error is None else "failed"] += 1

    async def _judge(self, turn: RagTurn) -> Judgement:
        judge_name = str(self.judge.name)
        started = time.perf_counter()
        try:
            request = JudgeRequest.from_turn(turn, self.max_context_chars)
            if self._blocking is not None:
                future = call_on(self._blocking, lambda: self.judge.judge(request))
                if future is None:
                    raise RuntimeError("no thread to run the judge (interpreter shutdown)")
                judgement = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
            else:
                judgement = await asyncio.wait_for(_contained(self.judge.ajudge(request)), self.timeout_s)
            if not isinstance(judgement, Judgement):
                raise TypeError(f"judge returned {type(judgement).__name__}, not a Judgement")
            return judgement
        except asyncio.TimeoutError:
            return Judgement.failed(judge_name, f"timeout: no judgement within {self.timeout_s:g}s",
                                    latency_s=time.perf_counter() - started)
        except _JudgeRaised as exc:
            return Judgement.failed(judge_name, str(exc), latency_s=time.perf_counter() - started)
        except Exception as exc:
            return Judgement.failed(judge_name, f"{type(exc).__name__}: {exc}",
                                    latency_s=time.perf_counter() - started)
        except BaseException as exc:
            # A judge's CancelledError (a cancelled inner task), or a SystemExit from a sync judge's
            # thread, would otherwise end this task uncounted. Only a cancellation of this task
            # itself goes on.
            task = asyncio.current_task()
            cancelling = getattr(task, "cancelling", None)  # Python 3.11+
            if isinstance(exc, asyncio.CancelledError) and callable(cancelling) and cancelling():
                raise
            return Judgement.failed(judge_name, f"{type(exc).__name__} raised by the judge: {exc}",
                                    latency_s=time.perf_counter() - started)

    def _deliver(self, turn: RagTurn, judgement: Judgement, start_ns: int, recorder: Any) -> None:
        # Everything recorded of this turn follows its recorder's policy (the handler's, see
        # recorder_for), never this auditor's own when the handler's is stricter.
        policy: ContentPolicy = recorder.content
        recorder.record_judgement(turn, judgement, start_ns=start_ns)
        if self._audit_log is not None:
            try:
                self._audit_log.write(turn, judgement, judge_status="judged" if judgement.error is None
                                      else "failed", retrieval_metrics=turn_metrics(turn), content=policy)
            except Exception as exc:
                self._sink_failed(self._audit_log, exc, policy)
        if self._sinks:
            with emitting_with(recorder):
                for sink in self._sinks:
                    try:
                        sink.emit(turn, judgement)
                    except Exception as exc:
                        self._sink_failed(sink, exc, policy)
        if self._on_judgement is not None:
            try:
                self._on_judgement(turn, judgement)
            except Exception as exc:
                self._sink_failed(self._on_judgement, exc, policy)

    def _job_failed(self, exc: BaseException) -> None:
        # A job is a handler's turn; its policy is not at hand here: the strictest in the process.
        self._log.warning(f"job:{type(exc).__name__}", "ragaudit: closing a turn failed (the pipeline is "
                          "unaffected): %s", log_exception(exc, self.content))

    def _sink_failed(self, sink: object, exc: BaseException, policy: ContentPolicy | None = None) -> None:
        with self._lock:
            self._counts["sink_errors"] += 1
        name = getattr(sink, "__name__", type(sink).__name__)
        self._log.warning(f"sink:{name}:{type(exc).__name__}", "ragaudit: sink %s failed: %s",
                          name, (policy or self.content).exception(exc))

    def _exit(self, deadline: float) -> None:
        """The exit hook's part for this auditor: shut down by *deadline* (shared by all auditors)."""
        if self._closed:
            return
        stats = self.stats()
        if stats["pending"] or stats["closing"]:
            logger.info("ragaudit: flushing %d pending judgement(s) and %d turn(s) at exit", stats["pending"],
                        stats["closing"])
        self.shutdown(min(self.exit_timeout_s, max(0.0, deadline - time.monotonic())))


def _chained(first: Callable[[str], str] | None, then: Callable[[str], str] | None) -> Callable[[str], str] | None:
    """*first* and then *then* as one redact hook (either may be None; the same hook only once)."""
    if first is None or first is then:
        return then
    if then is None:
        return first
    return _Chained(first, then)


class _Chained:
    """Two redact hooks in a row: a handler's, then its auditor's (a failure withholds the text)."""

    __slots__ = ("first", "then")

    def __init__(self, first: Callable[[str], str], then: Callable[[str], str]) -> None:
        self.first = first
        self.then = then

    def __call__(self, text: str) -> str:
        out = self.first(text)
        return self.then(out if isinstance(out, str) else str(out))


def _shutdown_call(sink: JudgementSink) -> Callable[[float], bool]:
    def call(timeout_s: float) -> bool:
        sink.shutdown(timeout_s)  # bounded by the caller too (it runs on a worker thread)
        return True

    return call


def _release(workers: list[BatchWorker[Any]], audit_log: Any) -> None:
    """An Auditor went away without shutdown(): stop its threads, close its file. Never raises."""
    for worker in workers:
        worker.shutdown(0)
    if audit_log is not None:
        try:
            audit_log.close()
        except Exception as exc:
            logger.debug("ragaudit: closing the audit log of a released auditor failed: %r", exc)
