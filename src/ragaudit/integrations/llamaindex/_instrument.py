"""instrument() / uninstrument(): the handlers on LlamaIndex's root dispatcher, one set at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from llama_index.core.instrumentation import get_dispatcher

from ... import _fork
from ...auditor import DEFAULT_TURN_MEASURES, Auditor
from ._collector import Collector
from ._dispatch import EventHandler, SpanHandler
from ._streams import stream_closer

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ...judges.base import RagJudge
    from ...tracing.spans import SpanRecorder

__all__ = ["Audited", "LlamaIndexInstrumentation", "instrument", "instrumented", "uninstrument"]

class Audited:
    """What both entry points offer: their auditor and span recorder, flush and turn counts."""

    _collector: Collector

    @property
    def auditor(self) -> Auditor:
        """The [`Auditor`][ragaudit.Auditor] turns are submitted to."""
        return self._collector.auditor

    @property
    def recorder(self) -> SpanRecorder | None:
        """The [`SpanRecorder`][ragaudit.tracing.SpanRecorder] that writes the turn spans."""
        return self._collector.recorder

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Close the turns of streams dropped unfinished, then wait for every pending judgement.

        Returns False when *timeout_s* (seconds) ran out first.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ok = stream_closer.force_flush(timeout_s)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._collector.force_flush(remaining) and ok

    def stats(self) -> dict[str, int]:
        """``open_turns`` (in flight now), ``closed_turns`` and ``evicted`` (ended early at *max_runs*)."""
        return self._collector.stats()


class LlamaIndexInstrumentation(Audited):
    """What [`instrument`][ragaudit.integrations.llamaindex.instrument] attached to LlamaIndex's root dispatcher;
    [`uninstrument`][ragaudit.integrations.llamaindex.LlamaIndexInstrumentation.uninstrument] detaches it.

    ``auditor`` judges the turns, ``recorder`` writes the turn spans. `force_flush` waits for the
    judgements of the turns closed so far; `stats` counts turns. ``attached``: whether runs
    that start now are audited. Once detached, its handlers stay on the dispatcher only until the
    turns in flight then have closed (each as one turn), and ignore everything else.
    """

    def __init__(self, collector: Collector) -> None:
        self._collector = collector
        self.span_handler = SpanHandler(collector)
        self.event_handler = EventHandler(collector)
        self.attached = False
        self._on_dispatcher = False
        collector.outside = {}
        collector.on_idle = self._drained

    def uninstrument(self) -> None:
        """Stop auditing runs that start from now on (idempotent); runs in flight finish as one turn each."""
        with registration_lock:
            self._detach()

    def _attach(self) -> None:
        """Audit runs that start from now on (registration lock held)."""
        collector = self._collector
        with collector.store.lock:
            collector.accepting = True
        if not self._on_dispatcher:
            # New lists rather than in-place changes: the dispatcher may be iterating the old ones.
            dispatcher = get_dispatcher()
            dispatcher.span_handlers = [*dispatcher.span_handlers, self.span_handler]
            dispatcher.event_handlers = [*dispatcher.event_handlers, self.event_handler]
            self._on_dispatcher = True
        self.attached = True
        _draining.discard(self)

    def _detach(self) -> None:
        """Audit no run that starts from now on; leave the dispatcher once the open turns have closed
        (registration lock held). The handlers stay until then: LlamaIndex sends a run's later spans
        and events to the handlers attached at that moment, not to those attached when it began."""
        collector = self._collector
        with collector.store.lock:
            collector.accepting = False
            idle = not collector.store
        self.attached = False
        if idle:
            self._leave()
        elif self._on_dispatcher:
            _draining.add(self)

    def _leave(self) -> None:
        if self._on_dispatcher:
            dispatcher = get_dispatcher()
            dispatcher.span_handlers = [h for h in dispatcher.span_handlers if h is not self.span_handler]
            dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not self.event_handler]
            self._on_dispatcher = False
        _draining.discard(self)
        collector = self._collector
        with collector.store.lock:  # spans seen so far mean nothing once we stop seeing their ends
            if collector.outside is not None:
                collector.outside.clear()
            collector.ended_outside.clear()

    def _idle(self) -> bool:
        collector = self._collector
        with collector.store.lock:
            return not collector.accepting and not collector.store

    def _drained(self) -> None:
        """The collector's ``on_idle``: on a host thread, no store lock held by this call."""
        # Never wait for the registration lock here: this may run inside a garbage-collector
        # finalizer on a thread that holds it (or the store lock another thread waits for under
        # it). Left attached for now, the handlers try again on the next span, and every
        # instrument() / uninstrument() sweeps the drained ones.
        if not registration_lock.acquire(blocking=False):
            return
        try:
            if not self.attached and self._idle():
                self._leave()
        finally:
            registration_lock.release()

    def __repr__(self) -> str:
        return f"LlamaIndexInstrumentation(attached={self.attached}, auditor={self.auditor!r})"


registration_lock = _fork.rlock()
_current: LlamaIndexInstrumentation | None = None
_last: tuple[tuple[object, ...], LlamaIndexInstrumentation] | None = None  # the last instrument()'s arguments
_draining: set[LlamaIndexInstrumentation] = set()  # detached, still on the dispatcher for turns in flight


def _sweep() -> None:
    """Take the drained instrumentations off the dispatcher (registration lock held)."""
    for installed in list(_draining):
        if installed._idle():
            installed._leave()


def _same_args(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or (isinstance(x, (bool, int, str, tuple)) and x == y)
                                    for x, y in zip(a, b))


def instrument(
    judge: RagJudge | None = None,
    auditor: Auditor | None = None,
    tracer_provider: TracerProvider | None = None,
    capture_content: bool | None = None,
    *,
    redact: Callable[[str], str] | None = None,
    max_runs: int = 10_000,
    turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
    query_key: str | None = None,
) -> LlamaIndexInstrumentation:
    """Audit every LlamaIndex query, chat, workflow and retrieval in the process.

    Attaches a span handler and an event handler to the root dispatcher
    (``llama_index.core.instrumentation.get_dispatcher()``); calling again with the same arguments
    (the same objects), also after [`uninstrument`][ragaudit.integrations.llamaindex.uninstrument], returns the same
    instrumentation, with others replaces it. Returns the
    [`LlamaIndexInstrumentation`][ragaudit.integrations.llamaindex.LlamaIndexInstrumentation]; undo with
    [`uninstrument`][ragaudit.integrations.llamaindex.uninstrument]. Safe while engines run: a run in flight when this
    is called (or when it is replaced) is not audited by it, not even its later steps; one that started under it
    finishes with it as one turn.

    * Question: the root call's argument (the query, or the user's chat message).
    * Answer: the engine's response text; for a streamed response, the full text once the stream
      is consumed (the text so far when it is dropped half way).
    * Documents (what the judge sees): the response's ``source_nodes``, i.e. after node
      post-processors and rerankers, in their order (ranks 1..n, each node id once); each
      retriever call is kept as it returned on its own retrieval span (node ids, scores, text).
      ``metadata["ragaudit.judge_context"]`` says which the judge saw (``"source_nodes"`` or
      ``"retrieval"``, the latter when the engine reports no source nodes).
    * Agents (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``): one turn per ``run``; the
      question is ``user_msg``, the answer the agent's final reply, the evidence every outermost
      retrieval and every tool output (a ``RetrieverTool``'s nodes with their ids, a function
      tool's text as a document with source = tool name, id = tool call id); tool calls and model
      calls are spans of the turn.
    * Workflows (a ``Workflow`` subclass of your own): one turn per ``run``; the question is the
      ``StartEvent``'s ``query``, ``user_msg``, ``input`` or ``question`` (*query_key* first), the
      answer the ``StopEvent`` result (text, a ``Response``, or a stream once consumed); every
      retrieval and model call of its steps is a span of the turn, not a turn of its own.
    * Chat engines and agents with memory: ``history`` (the engine's memory before the message,
      or the agent's first model call) and ``standalone_query`` (the condensed question retrieval
      used) go to the judge.
    * A retriever called on its own and a turn with no answer or an error are traced, not judged;
      an empty answer (``"Empty Response"``) is traced and counted. The rules are the turn
      assembler's (`ragaudit.integrations._assembler`), shared with LangChain.

    Args:
        judge: the judge of the [`Auditor`][ragaudit.Auditor] the turns go to (one per judge object,
            shared with every handler given the same judge). Give *judge* or *auditor*, not both;
            with neither, the process-wide default auditor.
        auditor: the auditor to submit turns to.
        tracer_provider, capture_content, redact: how the turns are recorded (``capture_content``
            None: on unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says
            ``NO_CONTENT``): turn spans, and each turn's judge span, audit-log line and exporter payloads
            ([`recorder_for`][ragaudit.Auditor.recorder_for]); they never make an Auditor of their own. With
            none given, the auditor's recorder is used.
        max_runs: at most this many turns are tracked at once; past it the oldest is ended as an error.
        turn_measures: retrieval metrics put on the turn span when ground truth is known.
        query_key: the ``StartEvent`` field that holds the user's question in workflows that name
            it otherwise (``w.run(topic=...)``: ``query_key="topic"``).

    Raises [`ConfigurationError`][ragaudit.ConfigurationError] for bad arguments. Once attached, the handlers
    never raise into LlamaIndex: a failure is logged (rate-limited) on the ``ragaudit`` logger.
    """
    args = (judge, auditor, tracer_provider, capture_content, redact, max_runs, tuple(turn_measures), query_key)
    installed = _reattach(args)
    if installed is not None:
        return installed
    collector = Collector(judge, auditor, tracer_provider, capture_content, redact, max_runs, turn_measures,
                          "instrument()", query_key)
    return _install(args, LlamaIndexInstrumentation(collector))


def _reattach(args: tuple[object, ...]) -> LlamaIndexInstrumentation | None:
    """Idempotent, also after uninstrument(): the same arguments get the one instrumentation."""
    global _current
    with registration_lock:
        _sweep()
        if _last is None or not _same_args(args, _last[0]):
            return None
        installed = _last[1]
        if _current is not installed and _current is not None:
            _current._detach()
        _current = installed
        installed._attach()
        return installed


def _install(args: tuple[object, ...], installed: LlamaIndexInstrumentation) -> LlamaIndexInstrumentation:
    global _current, _last
    with registration_lock:
        previous, _current, _last = _current, installed, (args, installed)
        if previous is not None:
            previous._detach()  # its runs in flight finish with it; new ones are this one's
        installed._attach()
    return installed


def uninstrument() -> LlamaIndexInstrumentation | None:
    """Stop auditing runs that start from now on; returns what
    [`instrument`][ragaudit.integrations.llamaindex.instrument] attached (None when nothing was). Idempotent.

    Runs in flight finish with it, each as one turn (its handlers leave the dispatcher when the
    last of them has ended); runs that start afterwards, and their steps, are not audited.
    """
    global _current
    with registration_lock:
        installed, _current = _current, None
        if installed is not None:
            installed._detach()
        _sweep()
    return installed


@contextmanager
def instrumented(**instrument_kwargs: Any) -> Iterator[LlamaIndexInstrumentation]:
    """Audit every LlamaIndex call made inside the ``with`` block, then give back what was there.

    >>> with llamaindex.instrumented(auditor=auditor) as installed:
    ...     engine.query("...")

    *instrument_kwargs* go to [`instrument`][ragaudit.integrations.llamaindex.instrument]. On exit the turns closed so
    far are flushed to the auditor's queue (not waited for judging), this instrumentation is detached and the one
    [`instrument`][ragaudit.integrations.llamaindex.instrument] had installed before, if any, is attached again.
    """
    global _current, _last
    with registration_lock:
        previous, previous_last = _current, _last
    installed = instrument(**instrument_kwargs)
    try:
        yield installed
    finally:
        with registration_lock:
            if installed is not previous:
                installed._detach()
                _current = None
                if previous is not None:
                    previous._attach()
                    _current, _last = previous, previous_last
