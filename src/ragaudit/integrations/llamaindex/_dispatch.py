"""The handlers on LlamaIndex's instrumentation dispatcher: spans follow the run tree, events carry data."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.chat_engine import StreamChatErrorEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
    LLMPredictStartEvent,
    LLMStructuredPredictStartEvent,
)
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent
from llama_index.core.instrumentation.events.synthesis import SynthesizeEndEvent
from llama_index.core.instrumentation.span import BaseSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import Field

from .._common import report_failure
from ._collector import Collector
from ._values import (
    agent_name,
    messages_of,
    messages_text,
    model_from,
    provider_from,
    query_from_args,
    retriever_name,
    span_name,
    template_variables,
    turn_kind,
)

__all__ = ["EventHandler", "SpanHandler"]


class SpanHandler(BaseSpanHandler[BaseSpan]):
    """Follows the dispatcher's span tree. Keeps no span objects (``open_spans`` stays empty): the
    collector's run store is the record, so each span costs a few dictionary operations."""

    # A field, not a private attribute: pydantic serves private attributes through __getattr__,
    # too slow for a call made on every span.
    collector: Any = Field(default=None, exclude=True, repr=False)

    def __init__(self, collector: Collector) -> None:
        super().__init__()
        self.collector = collector

    @classmethod
    def class_name(cls) -> str:
        return "RagAuditSpanHandler"

    def new_span(self, id_: str, bound_args: inspect.BoundArguments, instance: object | None = None,
                 parent_span_id: str | None = None, tags: dict[str, Any] | None = None,
                 **kwargs: Any) -> BaseSpan | None:
        try:
            now = time.time_ns()
            name = span_name(id_)
            kind = turn_kind(name, instance)
            collector: Collector = self.collector
            # an agent's turn is named after the agent (its ``name``, "Agent" by default), not the span
            run_name = agent_name(instance) or name if kind == "agent" else name
            root = (kind, run_name, query_from_args(bound_args, collector.query_keys), _own_tags(tags)) \
                if kind is not None else None
            turn = collector.start_run(id_, parent_span_id, root, now)
            if turn is None:
                return None
            if kind == "retrieve":
                collector.retrieval_started(id_, retriever_name(instance), root[2] if root else None, now)
            elif kind == "chat":
                if turn.root_id == id_:
                    turn.history = chat_history_of(bound_args, instance)
            elif name.endswith(_TOOL_STEP) and turn.kind in _TOOL_TURNS:
                collector.tool_started(id_, bound_args, now)
            elif isinstance(instance, BaseLLM):
                with collector.store.lock:
                    collector.generation_started(turn, id_, parent_span_id, now, instance)
        except Exception as exc:
            report_failure("LlamaIndex span start", exc)
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments, instance: object | None = None,
                             result: object | None = None, **kwargs: Any) -> BaseSpan | None:
        try:
            self.collector.end_run(id_, result=result, instance=instance)
        except Exception as exc:
            report_failure("LlamaIndex span end", exc)
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments, instance: object | None = None,
                             err: BaseException | None = None, **kwargs: Any) -> BaseSpan | None:
        try:
            self.collector.end_run(id_, error=err if err is not None else "span dropped", instance=instance)
        except Exception as exc:
            report_failure("LlamaIndex span drop", exc)
        return None


def _own_tags(tags: dict[str, Any] | None) -> dict[str, Any] | None:
    """The instrument tags the application set; not those LlamaIndex sets itself (a workflow run's
    ``llamaindex.start_event`` summary of its inputs)."""
    if tags and any(key.startswith(_LLAMAINDEX_TAG) for key in tags):
        tags = {key: value for key, value in tags.items() if not key.startswith(_LLAMAINDEX_TAG)}
    return tags or None


_LLAMAINDEX_TAG = "llamaindex."
_EventFn = Callable[[Collector, Any, str, int], None]  # Any: each reader takes its own event class
_TOOL_STEP = ".call_tool"  # the step of a workflow agent that runs one tool call
_TOOL_TURNS = frozenset({"agent", "workflow"})  # turns an agent runs in: its own, or a workflow step's


def chat_history_of(bound_args: object, instance: Any) -> list[Any] | None:
    """A chat engine's history before this message: the ``chat_history`` passed in, else its memory."""
    arguments = getattr(bound_args, "arguments", None)
    history = arguments.get("chat_history") if isinstance(arguments, Mapping) else None
    if history is None:
        try:
            history = instance.chat_history
        except Exception:  # an engine whose memory cannot be read: no history, still a turn
            return None
    return list(history) if isinstance(history, (list, tuple)) and history else None


def _on_retrieval_start(c: Collector, e: RetrievalStartEvent, span_id: str, now: int) -> None:
    c.retrieval_started(span_id, span_name(span_id).rpartition(".")[0] or "retriever",
                        e.str_or_query_bundle, now)


def _on_retrieval_end(c: Collector, e: RetrievalEndEvent, span_id: str, now: int) -> None:
    c.retrieval_ended(span_id, e.nodes, now)


def _on_response(c: Collector, e: QueryEndEvent | SynthesizeEndEvent, span_id: str, now: int) -> None:
    c.response_seen(span_id, e.response)


def _on_chat_start(c: Collector, e: LLMChatStartEvent, span_id: str, now: int) -> None:
    c.model_called(span_id, model_from(e.model_dict), messages_text(e.messages), now, messages_of(e.messages),
                   provider_from(e.model_dict))
    c.conversation_seen(span_id, e.messages)


def _on_completion_start(c: Collector, e: LLMCompletionStartEvent, span_id: str, now: int) -> None:
    c.model_called(span_id, model_from(e.model_dict), e.prompt if isinstance(e.prompt, str) else None, now,
                   provider=provider_from(e.model_dict))


def _on_predict_start(c: Collector, e: LLMPredictStartEvent | LLMStructuredPredictStartEvent, span_id: str,
                      now: int) -> None:
    c.template_filled(span_id, template_variables(e.template, e.template_args), now)


def _on_model_end(c: Collector, e: LLMChatEndEvent | LLMCompletionEndEvent, span_id: str, now: int) -> None:
    c.model_answered(span_id, e.response, now)


def _on_stream_chat_error(c: Collector, e: StreamChatErrorEvent, span_id: str, now: int) -> None:
    c.turn_failed(span_id, e.exception)


_EVENTS: dict[type, _EventFn] = {
    RetrievalStartEvent: _on_retrieval_start,
    RetrievalEndEvent: _on_retrieval_end,
    QueryEndEvent: _on_response,
    SynthesizeEndEvent: _on_response,
    LLMChatStartEvent: _on_chat_start,
    LLMCompletionStartEvent: _on_completion_start,
    LLMPredictStartEvent: _on_predict_start,
    LLMStructuredPredictStartEvent: _on_predict_start,
    LLMChatEndEvent: _on_model_end,
    LLMCompletionEndEvent: _on_model_end,
    StreamChatErrorEvent: _on_stream_chat_error,
}


_EVENT_FNS: dict[type, _EventFn | None] = {}  # every event type seen -> its reader (None: ignored)


def _event_fn(event_type: type) -> _EventFn | None:
    for base in event_type.__mro__:
        fn = _EVENTS.get(base)
        if fn is not None:
            return fn
    return None


class EventHandler(BaseEventHandler):
    """Reads the events that carry data (retrieved nodes, responses, model calls) into the turn
    their span belongs to; every other event costs one dictionary lookup."""

    collector: Any = Field(default=None, exclude=True, repr=False)

    def __init__(self, collector: Collector) -> None:
        super().__init__()
        self.collector = collector

    @classmethod
    def class_name(cls) -> str:
        return "RagAuditEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        try:
            event_type = type(event)
            if event_type in _EVENT_FNS:
                fn = _EVENT_FNS[event_type]
            else:
                fn = _EVENT_FNS[event_type] = _event_fn(event_type)
            span_id = event.span_id
            if fn is not None and span_id is not None:
                fn(self.collector, event, span_id, time.time_ns())
        except Exception as exc:
            report_failure("LlamaIndex event", exc)
