"""The legacy ``CallbackManager`` handler, for code that still sets ``Settings.callback_manager``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler

from ...auditor import DEFAULT_TURN_MEASURES, Auditor
from .._common import report_failure
from ._collector import Collector
from ._instrument import Audited
from ._state import LEGACY_LLM, RootInfo
from ._values import LEGACY_ROOT, UNSET, messages_of, messages_text, model_from, provider_from, query_text

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ...judges.base import RagJudge

__all__ = ["RagAuditLlamaIndexHandler"]


class RagAuditLlamaIndexHandler(Audited, BaseCallbackHandler):
    """A legacy LlamaIndex callback handler: each root ``QUERY`` (or a ``RETRIEVE`` of its own)
    becomes an audited [`RagTurn`][ragaudit.RagTurn].

    >>> from llama_index.core import Settings
    >>> from llama_index.core.callbacks import CallbackManager
    >>> Settings.callback_manager = CallbackManager([RagAuditLlamaIndexHandler()])

    For code that still sets ``Settings.callback_manager``; new code should prefer
    [`instrument`][ragaudit.integrations.llamaindex.instrument], which sees chat engines as one turn. The question is
    the ``QUERY`` event's query string (for a chat engine, the condensed question), the answer its response, the
    documents the response's ``source_nodes``; ``RETRIEVE`` events become retrieval spans and
    ``LLM`` events generation spans (a chat model implemented over completion counts once). The
    arguments are those of [`instrument`][ragaudit.integrations.llamaindex.instrument].
    """

    def __init__(
        self,
        judge: RagJudge | None = None,
        auditor: Auditor | None = None,
        tracer_provider: TracerProvider | None = None,
        capture_content: bool | None = None,
        *,
        redact: Callable[[str], str] | None = None,
        max_runs: int = 10_000,
        turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
    ) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self._collector = Collector(judge, auditor, tracer_provider, capture_content, redact, max_runs,
                                     turn_measures, "RagAuditLlamaIndexHandler")

    def on_event_start(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                       event_id: str = "", parent_id: str = "", **kwargs: Any) -> str:
        try:
            self._start(event_type, payload or {}, event_id, parent_id)
        except Exception as exc:
            report_failure("LlamaIndex callback start", exc)
        return event_id

    def _start(self, event_type: CBEventType, payload: Mapping[Any, Any], event_id: str,
               parent_id: str) -> None:
        now = time.time_ns()
        collector = self._collector
        parent = parent_id if parent_id and parent_id != LEGACY_ROOT else None
        if event_type == CBEventType.EXCEPTION:  # an event that never ends: only its error counts
            error = payload.get(EventPayload.EXCEPTION)
            if parent is not None and isinstance(error, BaseException):
                collector.turn_failed(parent, error)
            return
        root: RootInfo | None = None
        if event_type in (CBEventType.QUERY, CBEventType.RETRIEVE):
            kind = "query" if event_type == CBEventType.QUERY else "retrieve"
            root = (kind, event_type.value, query_text(payload.get(EventPayload.QUERY_STR)), None)
        turn = collector.start_run(event_id, parent, root, now)
        if turn is None:
            return
        if event_type == CBEventType.RETRIEVE:
            collector.retrieval_started(event_id, "retriever", payload.get(EventPayload.QUERY_STR), now)
        elif event_type == CBEventType.LLM:
            outer = LEGACY_LLM.get()
            with collector.store.lock:
                outer_id = outer[1] if outer is not None and outer[0] is collector else None
                running = turn.generations.get(turn.llm_key.get(outer_id, "")) if outer_id else None
                inside = outer_id if running is not None and running.ended_at is None else None
                collector.generation_started(turn, event_id, inside, now)
                turn.legacy_outer[event_id] = outer
            LEGACY_LLM.set((collector, event_id))
            serialized = payload.get(EventPayload.SERIALIZED)
            prompt = payload.get(EventPayload.PROMPT)
            messages: tuple[tuple[str, str], ...] = ()
            if not isinstance(prompt, str):
                prompt = messages_text(payload.get(EventPayload.MESSAGES))
                messages = messages_of(payload.get(EventPayload.MESSAGES))
            collector.model_called(event_id, model_from(serialized), prompt, now, messages, provider_from(serialized))

    def on_event_end(self, event_type: CBEventType, payload: dict[str, Any] | None = None,
                     event_id: str = "", **kwargs: Any) -> None:
        try:
            self._end(event_type, payload or {}, event_id)
        except Exception as exc:
            report_failure("LlamaIndex callback end", exc)

    def _end(self, event_type: CBEventType, payload: Mapping[Any, Any], event_id: str) -> None:
        now = time.time_ns()
        collector = self._collector
        error = payload.get(EventPayload.EXCEPTION)
        error = error if isinstance(error, BaseException) else None
        if event_type == CBEventType.RETRIEVE:
            collector.retrieval_ended(event_id, payload.get(EventPayload.NODES), now)
        elif event_type == CBEventType.LLM:
            response = payload.get(EventPayload.RESPONSE)
            if response is None:
                response = payload.get(EventPayload.COMPLETION)
            collector.model_answered(event_id, response, now, error)
            with collector.store.lock:
                turn = collector.store.state_of(event_id)
                outer = turn.legacy_outer.pop(event_id, UNSET) if turn is not None else UNSET
            if outer is not UNSET:
                LEGACY_LLM.set(outer)
        elif event_type in (CBEventType.QUERY, CBEventType.SYNTHESIZE):
            response = payload.get(EventPayload.RESPONSE)
            if response is not None:
                collector.response_seen(event_id, response)
        result = payload.get(EventPayload.RESPONSE) if event_type == CBEventType.QUERY else None
        if event_type == CBEventType.RETRIEVE:
            result = payload.get(EventPayload.NODES)
        collector.end_run(event_id, result=result, error=error)

    def start_trace(self, trace_id: str | None = None) -> None:
        """Nothing to do: turns are grouped by event parents, not by traces."""

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        """Nothing to do: a turn closes with its root event."""

    def __repr__(self) -> str:
        return f"RagAuditLlamaIndexHandler(auditor={self.auditor!r})"
