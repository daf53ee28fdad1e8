"""LlamaIndex integration: one call makes every query, chat and retrieval an audited, traced turn.

>>> from ragaudit.integrations import llamaindex
>>> llamaindex.instrument()        # every query engine, chat engine and retriever in the process

:func:`instrument` attaches a span handler and an event handler to LlamaIndex's root
instrumentation dispatcher. Each root call (``*QueryEngine.query``/``aquery``,
``*ChatEngine.chat``/``achat``/``stream_chat``/``astream_chat``, a workflow agent's ``run``, or a
retriever's ``retrieve``/``aretrieve`` called on its own) becomes one :class:`~ragaudit.RagTurn`, correlated
through the dispatcher's span tree so concurrent calls (threads, ``asyncio.gather``) never mix.
A streamed answer is followed to its end: the turn closes when the stream is consumed, or when
its consumer drops it half way (with the text received so far, ``metadata["ragaudit.stream"] ==
"abandoned"``). Turns with an answer are judged in the background by an :class:`~ragaudit.Auditor`;
a retriever called on its own, and a failed call, are traced but not judged.

Code that still configures ``Settings.callback_manager`` can use the legacy
:class:`RagAuditLlamaIndexHandler` instead. Use one of the two, not both, or each turn is
recorded twice.

Ground truth for retrieval metrics goes in LlamaIndex's instrument tags::

    from llama_index.core.instrumentation.dispatcher import instrument_tags
    with instrument_tags({"ragaudit_relevant_ids": ["doc-1", "doc-7"]}):
        query_engine.query("...")
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.chat_engine.types import BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.chat_engine import StreamChatErrorEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent
from llama_index.core.instrumentation.events.synthesis import SynthesizeEndEvent
from llama_index.core.instrumentation.span import BaseSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import Field

from .. import _fork
from .._deprecation import renamed_kwargs
from .._worker import BatchWorker, run_jobs
from ..auditor import DEFAULT_TURN_MEASURES, Auditor
from ..records import Generation, Retrieval, RetrievedDoc, ToolCall
from ._assembler import Step, TurnParts, close_turn, step_end
from ._common import (
    RunStore,
    check_measures,
    close_later,
    current_context,
    input_text,
    report_failure,
    resolve_backend,
    retrieved_doc,
)

__all__ = [
    "JUDGE_CONTEXT_KEY",
    "STREAM_KEY",
    "LlamaIndexInstrumentation",
    "RagAuditLlamaIndexHandler",
    "instrument",
    "instrumented",
    "uninstrument",
]

FRAMEWORK = "llamaindex"
JUDGE_CONTEXT_KEY = "ragaudit.judge_context"
"""Turn metadata key: ``"source_nodes"`` when the turn's documents (what the judge saw) are the
nodes the answer was built from (after node post-processors and rerankers), ``"retrieval"`` when
they are the retriever's output (a retriever called on its own, or an engine reporting no sources)."""
STREAM_KEY = "ragaudit.stream"
"""Turn metadata key of a streamed answer: ``"consumed"``, ``"abandoned"`` (dropped by its consumer
before the end; the answer is the text received so far) or ``"error"``."""

_QUERY_METHODS = frozenset({"query", "aquery"})
_CHAT_METHODS = frozenset({"chat", "achat", "stream_chat", "astream_chat"})
_RETRIEVE_METHODS = frozenset({"retrieve", "aretrieve"})
_CHAT_WRITE_METHODS = frozenset({"write_response_to_history", "awrite_response_to_history"})
_QUERY_ARGS = ("str_or_query_bundle", "message", "query_bundle", "query", "query_str")
_UNSET: Any = object()
_LEGACY_ROOT = "root"  # CallbackManager's BASE_TRACE_EVENT: the parent of a trace's first event
_UUID_SUFFIX = 37  # "-" + str(uuid4()) at the end of a dispatcher span id
_ENDED_KEPT = 4096  # ended dispatcher spans outside turns remembered as parents (see _Collector.outside)

# The turn a stream wrapper is pulling from, set only around each step of the stream, so model
# calls the stream makes lazily (their spans have no parent) are recorded in that turn.
_STREAM_TURN: ContextVar[tuple[_Collector, _Turn] | None] = ContextVar("ragaudit_llamaindex_stream",
                                                                       default=None)
# The legacy LLM event open in this context: a model call made inside another (a chat model
# implemented over completion) belongs to the same generation.
_LEGACY_LLM: ContextVar[tuple[_Collector, str] | None] = ContextVar("ragaudit_llamaindex_llm", default=None)


# --- reading LlamaIndex values -------------------------------------------------------------------


def _error_text(error: BaseException | str) -> str:
    return error if isinstance(error, str) else f"{type(error).__name__}: {error}"


def _span_name(span_id: str) -> str:
    """``"RetrieverQueryEngine.query"`` from the dispatcher's ``"RetrieverQueryEngine.query-<uuid4>"``."""
    if len(span_id) > _UUID_SUFFIX and span_id[-_UUID_SUFFIX] == "-":
        return span_id[:-_UUID_SUFFIX]
    return span_id.partition("-")[0]


_AGENT_CLASSES = frozenset({"BaseWorkflowAgent", "AgentWorkflow"})
_AGENT_TYPES: dict[type, bool] = {}


def _is_agent(instance: Any) -> bool:
    """Whether *instance* is a LlamaIndex workflow agent (``FunctionAgent``, ``ReActAgent``,
    ``CodeActAgent``, ``AgentWorkflow``), without importing the agent package."""
    kind = type(instance)
    found = _AGENT_TYPES.get(kind)
    if found is None:
        found = _AGENT_TYPES[kind] = any(
            base.__name__ in _AGENT_CLASSES and base.__module__.startswith("llama_index.core.agent")
            for base in kind.__mro__)
    return found


def _root_kind(name: str, instance: Any) -> str | None:
    if instance is None:
        return None
    method = name.rpartition(".")[2]
    if method == "run" and _is_agent(instance):
        return "agent"
    if method in _QUERY_METHODS and isinstance(instance, BaseQueryEngine):
        return "query"
    if method in _CHAT_METHODS and isinstance(instance, BaseChatEngine):
        return "chat"
    if method in _RETRIEVE_METHODS and isinstance(instance, BaseRetriever):
        return "retrieve"
    return None


def _retriever_name(retriever: Any) -> str:
    """The name of a retrieval span's source: the vector store a vector-index retriever searches
    (``ChromaVectorStore`` -> ``Chroma``, as LangChain names it), else the retriever's class."""
    store = getattr(retriever, "_vector_store", None)
    if store is None:
        return type(retriever).__name__
    name = type(store).__name__
    short = name[: -len("VectorStore")] if name.endswith("VectorStore") else name
    return name if short in ("", "Base", "Simple") else short


_PROVIDERS: dict[type, str | None] = {}


def _provider_of(llm: Any) -> str | None:
    """The provider of an LLM from its integration package: ``llama_index.llms.openai`` ->
    ``"openai"``; None for LLMs defined elsewhere (``MockLLM``, an application's own)."""
    llm_type = type(llm)
    if llm_type not in _PROVIDERS:
        parts = llm_type.__module__.split(".")
        _PROVIDERS[llm_type] = parts[2] if len(parts) > 2 and parts[:2] == ["llama_index", "llms"] else None
    return _PROVIDERS[llm_type]


def _query_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    query_str = getattr(value, "query_str", None)  # QueryBundle
    if isinstance(query_str, str):
        return query_str
    content = getattr(value, "content", None)  # ChatMessage
    return content if isinstance(content, str) else None


def _user_message_of(start_event: Any) -> str | None:
    """The user's message of an agent's start event: ``user_msg`` (a string or a ``ChatMessage``),
    else the last user message of ``chat_history``."""
    user_msg = getattr(start_event, "user_msg", None)
    text = _query_text(user_msg)
    if text:
        return text
    for role, content in reversed(_messages_of(getattr(start_event, "chat_history", None))):
        if role == "user":
            return content
    return None


def _query_from_args(bound_args: Any) -> str | None:
    arguments = getattr(bound_args, "arguments", None)
    if not isinstance(arguments, Mapping):
        return None
    if "start_event" in arguments:  # a workflow agent's run
        return _user_message_of(arguments["start_event"])
    for key in _QUERY_ARGS:
        if key in arguments:
            found = _query_text(arguments[key])
            if found is not None:
                return found
    for value in arguments.values():
        found = _query_text(value)
        if found is not None:
            return found
    return None


def _answer_from(response: Any) -> str | None:
    """The answer text of an engine's return value (``Response``, ``AgentChatResponse``, a finished
    ``StreamingAgentChatResponse``, ``PydanticResponse``, a string); None for anything else."""
    if response is None or isinstance(response, list):
        return None
    if isinstance(response, str):
        return response
    agent_output = getattr(response, "result", None)  # an agent workflow's StopEvent
    reply = getattr(agent_output, "response", None)
    if reply is not None and hasattr(reply, "role"):  # AgentOutput.response, a ChatMessage
        content = getattr(reply, "content", None)
        return content if isinstance(content, str) else ""
    if isinstance(response, StreamingResponse):
        return response.response_txt
    if isinstance(response, AsyncStreamingResponse):
        return response.response_txt
    if isinstance(response, StreamingAgentChatResponse):
        return response.response or response.unformatted_response.strip() or None
    value = getattr(response, "response", None)
    if isinstance(value, str):
        return value
    if value is not None and callable(getattr(value, "model_dump_json", None)):  # PydanticResponse
        try:
            return str(value.model_dump_json())
        except Exception:
            return None
    return None


def _source_nodes_of(response: Any) -> list[Any] | None:
    """The nodes *response* was built from; for a chat response whose own list is empty (the async
    streaming chat engines leave it so), those of the query results it carries as ``sources``."""
    nodes = getattr(response, "source_nodes", None)
    if not isinstance(nodes, list):
        return None
    if not nodes:
        for tool_output in getattr(response, "sources", None) or ():
            inner = getattr(getattr(tool_output, "raw_output", None), "source_nodes", None)
            if isinstance(inner, list):
                nodes = nodes + inner
    return nodes


def _finite_score(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _snapshot(nodes: Any) -> list[tuple[Any, float | None]]:
    """``(node, score)`` pairs as they are now: a reranker may later rescore the same objects."""
    if not isinstance(nodes, (list, tuple)):
        return []
    return [(getattr(n, "node", n), _finite_score(getattr(n, "score", None))) for n in nodes]


def _convert_nodes(pairs: Sequence[tuple[Any, float | None]]) -> tuple[RetrievedDoc, ...]:
    out = []
    for rank, (node, score) in enumerate(pairs, 1):
        try:
            content = node.get_content()
        except Exception:
            content = getattr(node, "text", None)
        metadata = getattr(node, "metadata", None)
        out.append(retrieved_doc(rank, getattr(node, "node_id", None), content,
                                 metadata if isinstance(metadata, Mapping) else {}, score))
    return tuple(out)


def _model_from(model_dict: Any) -> str | None:
    if not isinstance(model_dict, Mapping):
        return None
    for key in ("model", "model_name", "deployment_name", "class_name"):
        value = model_dict.get(key)
        if isinstance(value, str) and value and value != "unknown":
            return value
    return None


_ROLES = {"chatbot": "assistant", "model": "assistant", "function": "tool", "developer": "system"}


def _messages_of(messages: Any) -> tuple[tuple[str, str], ...]:
    """Chat messages as ``(role, content)`` pairs (user, assistant, system, tool)."""
    if not isinstance(messages, (list, tuple)):
        return ()
    out = []
    for message in messages:
        role = getattr(message, "role", "")
        role = str(getattr(role, "value", role))
        content = getattr(message, "content", None)
        out.append((_ROLES.get(role, role), content if isinstance(content, str) else ""))
    return tuple(out)


def _messages_text(messages: Any) -> str | None:
    if not isinstance(messages, (list, tuple)):
        return None
    lines = []
    for message in messages:
        role = getattr(message, "role", "")
        role = getattr(role, "value", role)
        content = getattr(message, "content", None)
        lines.append(f"{role}: {content if isinstance(content, str) else ''}")
    return "\n".join(lines)


def _output_of(response: Any) -> str | None:
    """The text of a ``ChatResponse`` or ``CompletionResponse``."""
    if response is None:
        return None
    message = getattr(response, "message", None)
    if message is not None:
        content = getattr(message, "content", None)
        return content if isinstance(content, str) else None
    text = getattr(response, "text", None)
    return text if isinstance(text, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage_of(response: Any) -> tuple[int | None, int | None]:
    """Input and output token counts a model reported: ``additional_kwargs`` (as the OpenAI
    integration sets them) or the raw response's ``usage``."""
    extra = getattr(response, "additional_kwargs", None)
    if isinstance(extra, Mapping):
        prompt = _int(extra.get("prompt_tokens", extra.get("input_tokens")))
        completion = _int(extra.get("completion_tokens", extra.get("output_tokens")))
        if prompt is not None or completion is not None:
            return prompt, completion
    raw = getattr(response, "raw", None)
    usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
    if usage is None:
        return None, None
    if isinstance(usage, Mapping):
        return (_int(usage.get("prompt_tokens", usage.get("input_tokens"))),
                _int(usage.get("completion_tokens", usage.get("output_tokens"))))
    return (_int(getattr(usage, "prompt_tokens", getattr(usage, "input_tokens", None))),
            _int(getattr(usage, "completion_tokens", getattr(usage, "output_tokens", None))))


# --- per-turn state ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Retrieving:
    seq: int
    name: str
    query: str | None
    started_at: int
    ended_at: int | None = None
    nodes: list[tuple[Any, float | None]] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class _Generating:
    seq: int
    started_at: int
    model: str | None = None
    prompt: str | None = None
    output: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    ended_at: int | None = None
    error: str | None = None
    caller: int = 0  # id() of the LLM object, to match a stream's lazily made inner call
    provider: str | None = None
    messages: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class _Tooling:
    seq: int
    name: str
    call_id: str | None
    input: Any
    started_at: int
    ended_at: int | None = None
    output: Any = None  # the ToolOutput, read at close
    error: str | None = None


@dataclass(slots=True)
class _Turn:
    root_id: str
    kind: str
    name: str
    started_at: int
    query: str | None
    tags: Mapping[str, Any] | None
    context: Any = None  # the OTel context at the root's start: the turn span's parent
    result: Any = None
    hint: Any = None  # the last QueryEndEvent / SynthesizeEndEvent response inside the turn
    sources: list[tuple[Any, float | None]] | None = None  # what the answer was built from
    answer: str | None = None
    streamed: str | None = None  # the full text of a wrapped stream
    stream_state: str | None = None
    stream_run: str | None = None
    chat_written: bool = False
    error: str | None = None
    seq: int = 0
    retrievals: dict[str, _Retrieving] = field(default_factory=dict)
    generations: dict[str, _Generating] = field(default_factory=dict)
    tools: dict[str, _Tooling] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)  # every run of the turn -> its parent
    history: Any = None  # a chat engine's history before this message (ChatMessages), raw
    prompt: Any = None  # an agent's first model call's messages (ChatMessages), raw
    llm_key: dict[str, str] = field(default_factory=dict)  # model span/event -> its outermost model call
    legacy_outer: dict[str, Any] = field(default_factory=dict)  # legacy LLM event -> _LEGACY_LLM before it

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


_RootInfo = tuple[str, str, str | None, Mapping[str, Any] | None]  # kind, name, query, tags


class _Collector:
    """Groups LlamaIndex runs (dispatcher spans or legacy callback events) into turns and closes them.

    Shared by the span/event handlers of :func:`instrument` and by :class:`RagAuditLlamaIndexHandler`.
    On the host's thread it only updates dictionaries under the store lock (callers catch what it
    raises); a finished turn is built, traced and submitted on the auditor's closing thread
    (:func:`~ragaudit.integrations._common.close_later`).
    """

    def __init__(
        self,
        judge: Any,
        auditor: Auditor | None,
        tracer_provider: Any,
        capture_content: bool | None,
        redact: Callable[[str], str] | None,
        max_runs: int,
        turn_measures: Sequence[str],
        owner: str,
    ) -> None:
        self.turn_measures = check_measures(turn_measures)
        self.auditor, self.recorder = resolve_backend(judge, auditor, tracer_provider, capture_content, redact,
                                                      owner=owner)
        self.store: RunStore[_Turn] = RunStore(max_runs)
        # Re-entrant: LlamaIndex dispatches events from generator finalizers, which the garbage
        # collector may run on this thread while it is inside one of our own critical sections.
        self.store.lock = _fork.rlock()  # type: ignore[assignment]
        self.closed_turns = 0
        # False once uninstrument() detached us: runs of open turns still finish, nothing new starts.
        self.accepting = True
        # Called (no lock held) when a turn closed while not accepting, or a span started then: the
        # instrumentation leaves the dispatcher once its last turn has closed.
        self.on_idle: Callable[[], None] | None = None
        # Dispatcher spans outside any turn that began while we were attached: open ones, and the
        # last _ENDED_KEPT that ended (a workflow's steps start under a run() span that has already
        # returned). A root whose parent is in neither began under a run we never saw start (it was
        # in flight when instrument() attached us): a step of that run, not a turn of its own.
        # None for the legacy callback handler, which sees every event from the start.
        self.outside: dict[str, None] | None = None
        self.ended_outside: dict[str, None] = {}

    # -- runs -------------------------------------------------------------------------------------

    def start_run(self, run_id: str, parent_id: str | None, root: _RootInfo | None,
                  now: int) -> _Turn | None:
        """Register a run; returns its turn (None: not part of any turn). *root* describes the turn
        it starts when its parent is not in one."""
        store = self.store
        evicted: list[_Turn] = []
        ignored = drained = False
        with store.lock:
            turn = store.state_of(parent_id) if parent_id is not None else None
            if turn is None:
                stream = _STREAM_TURN.get()
                streaming = stream[1] if stream is not None and stream[0] is self else None
                if streaming is not None and store.state_of(streaming.root_id) is streaming:
                    parent_id = streaming.root_id
                elif not self.accepting:  # uninstrumented: only the turns already open go on
                    ignored, drained = True, not store
                else:
                    ignored = not self._may_start(run_id, parent_id, root)
            if not ignored:
                kind, name, query, tags = root if root is not None else ("", "", None, None)

                def new_turn() -> _Turn:
                    return _Turn(run_id, kind, name, now, query, tags, context=current_context())

                turn, is_root, evicted = store.start(run_id, parent_id, new_turn)
                if turn is not None and not is_root:
                    turn.parents[run_id] = parent_id
        if drained and self.on_idle is not None:
            self.on_idle()  # a span reached handlers that stayed attached while no turn is open
        if ignored:
            return None
        for old in evicted:
            self._hand_off(old, evicted=True)
        return turn

    def _may_start(self, run_id: str, parent_id: str | None, root: _RootInfo | None) -> bool:
        """Whether a run outside every turn starts one (store lock held); remembers the others."""
        outside = self.outside
        if outside is None:  # the legacy handler: every parent was seen
            return root is not None
        if parent_id is not None and parent_id not in outside and parent_id not in self.ended_outside:
            return False  # a step (or a step's step) of a run in flight before instrument(): not a turn
        if root is None:
            if len(outside) >= max(self.store.max_runs, _ENDED_KEPT):  # spans that never ended: forget the oldest
                del outside[next(iter(outside))]
            outside[run_id] = None
            return False
        return True

    def end_run(self, run_id: str, *, result: Any = None, error: BaseException | str | None = None,
                instance: Any = None) -> None:
        """Register the end of a run; close its turn when this completes it."""
        store = self.store
        tap: _StreamTap | _AsyncStreamTap | None = None
        with store.lock:
            turn = store.state_of(run_id)
            if turn is None:
                outside = self.outside
                if outside is not None and outside.pop(run_id, _UNSET) is not _UNSET:
                    ended = self.ended_outside
                    ended[run_id] = None
                    if len(ended) > _ENDED_KEPT:
                        del ended[next(iter(ended))]
                return
            now = time.time_ns()
            is_root = run_id == turn.root_id
            retrieving = turn.retrievals.get(run_id)
            if retrieving is not None and retrieving.ended_at is None:
                retrieving.ended_at = now
                if error is not None:
                    retrieving.error = _error_text(error)
            tooling = turn.tools.get(run_id)
            if tooling is not None and tooling.ended_at is None:
                tooling.ended_at = now
                if error is not None:
                    tooling.error = _error_text(error)
                else:
                    tooling.output = getattr(result, "tool_output", None)
            generating = turn.generations.get(run_id)
            if generating is not None and error is not None and generating.error is None:
                generating.error = _error_text(error)
                generating.ended_at = now
            if is_root:
                if error is not None:
                    turn.error = _error_text(error)
                else:
                    turn.result = result
                    tap = self._watch_stream(turn, result)
            elif instance is not None and isinstance(instance, StreamingAgentChatResponse) \
                    and _span_name(run_id).rpartition(".")[2] in _CHAT_WRITE_METHODS:
                turn.chat_written = True
                if error is not None and turn.error is None:
                    turn.error = _error_text(error)
                if turn.stream_run is not None:
                    store.end(turn.stream_run)
            turn, complete = store.end(run_id, force=is_root and error is not None)
        if tap is not None:
            tap.install()
        if complete and turn is not None:
            self._hand_off(turn)

    def _watch_stream(self, turn: _Turn, result: Any) -> _StreamTap | _AsyncStreamTap | None:
        """Keep the turn open past its root while the answer is still streaming (lock held).

        A stream wrapper holds no reference back to its response and the turn keeps only the
        response's source nodes, so a response its consumer drops can be collected (and the turn
        closed as abandoned).
        """
        if isinstance(result, (StreamingResponse, AsyncStreamingResponse)):
            nodes = _source_nodes_of(result)
            turn.sources = _snapshot(nodes) if nodes is not None else None
            turn.result = turn.hint = None
        if isinstance(result, StreamingResponse) and result.response_txt is None \
                and result.response_gen is not None:
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
            return _StreamTap(self, turn, result)
        if isinstance(result, AsyncStreamingResponse) and result.response_txt is None \
                and result.response_gen is not None:
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
            return _AsyncStreamTap(self, turn, result)
        if isinstance(result, StreamingAgentChatResponse) and not turn.chat_written and (
                result.chat_stream is not None or result.achat_stream is not None):
            # The engine writes the stream to memory in a thread / task it has just started, whose
            # span may not have begun yet: wait for that write to end.
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
        return None

    def stream_ended(self, turn: _Turn, text: str, state: str, error: BaseException | None,
                     deferred: bool = False) -> None:
        """A wrapped stream finished (``consumed``), failed (``error``) or was dropped (``abandoned``)."""
        if deferred:
            _closer.put(lambda: self.stream_ended(turn, text, state, error))
            return
        store = self.store
        with store.lock:
            turn.streamed = text
            turn.stream_state = state
            if error is not None and turn.error is None:
                turn.error = _error_text(error)
            closing, complete = store.end(turn.stream_run) if turn.stream_run else (None, False)
        if complete and closing is not None:
            self._hand_off(closing)

    # -- retrievals, generations and tool calls -----------------------------------------------------

    def tool_started(self, run_id: str, bound_args: Any, now: int) -> None:
        """A workflow agent's ``call_tool`` step began: its ``ToolCall`` event names the tool."""
        arguments = getattr(bound_args, "arguments", None)
        event = arguments.get("ev") if isinstance(arguments, Mapping) else None
        name = getattr(event, "tool_name", None)
        call_id = getattr(event, "tool_id", None)
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None:
                turn.tools[run_id] = _Tooling(turn.next_seq(), name if isinstance(name, str) else "tool",
                                              call_id if isinstance(call_id, str) and call_id else None,
                                              getattr(event, "tool_kwargs", None), now)

    def conversation_seen(self, run_id: str, messages: Any) -> None:
        """An agent's model call: its first one's messages hold the conversation so far."""
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and turn.kind == "agent" and turn.prompt is None \
                    and isinstance(messages, (list, tuple)):
                turn.prompt = list(messages)


    def retrieval_started(self, run_id: str, name: str, query: Any, now: int) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            retrieving = turn.retrievals.get(run_id)
            if retrieving is None:
                turn.retrievals[run_id] = _Retrieving(turn.next_seq(), name, _query_text(query), now)
            elif retrieving.query is None:
                retrieving.query = _query_text(query)

    def retrieval_ended(self, run_id: str, nodes: Any, now: int) -> None:
        pairs = _snapshot(nodes)
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            retrieving = turn.retrievals.get(run_id)
            if retrieving is None:
                retrieving = turn.retrievals[run_id] = _Retrieving(turn.next_seq(), "retriever", None, now)
            retrieving.nodes = pairs
            retrieving.ended_at = now

    def generation_started(self, turn: _Turn, run_id: str, outer: str | None, now: int,
                           caller: Any = None) -> None:
        """Register a model call inside *outer* (a model call, or None); call with the lock held.

        A call with no parent span at all was made lazily by a stream (an async stream over a sync
        one): it belongs to the unfinished call of the same LLM object, if there is one.
        """
        key = turn.llm_key.get(outer, run_id) if outer is not None else run_id
        caller_id = id(caller) if caller is not None else 0
        if outer is None and caller_id:
            key = next((k for k, g in turn.generations.items()
                        if g.caller == caller_id and g.ended_at is None), run_id)
        turn.llm_key[run_id] = key
        if key not in turn.generations:
            turn.generations[key] = _Generating(turn.next_seq(), now, caller=caller_id,
                                                provider=_provider_of(caller) if caller is not None else None)

    def model_called(self, run_id: str, model: str | None, prompt: str | None, now: int,
                     messages: tuple[tuple[str, str], ...] = ()) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            generating = self._generating(turn, run_id, now)
            if generating.model is None:
                generating.model = model
            if generating.prompt is None and self.recorder.capture_content:
                generating.prompt = prompt
                generating.messages = messages

    def model_answered(self, run_id: str, response: Any, now: int, error: Any = None) -> None:
        output = _output_of(response)
        input_tokens, output_tokens = _usage_of(response)
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            generating = self._generating(turn, run_id, now)
            outermost = turn.llm_key.get(run_id) == run_id
            if output is not None and (outermost or generating.output is None):
                generating.output = output
            if input_tokens is not None and (outermost or generating.input_tokens is None):
                generating.input_tokens = input_tokens
            if output_tokens is not None and (outermost or generating.output_tokens is None):
                generating.output_tokens = output_tokens
            if error is not None and generating.error is None:
                generating.error = _error_text(error)
            generating.ended_at = now

    def _generating(self, turn: _Turn, run_id: str, now: int) -> _Generating:
        key = turn.llm_key.get(run_id)
        if key is None:
            key = turn.llm_key[run_id] = run_id
        generating = turn.generations.get(key)
        if generating is None:
            generating = turn.generations[key] = _Generating(turn.next_seq(), now)
        return generating

    def response_seen(self, run_id: str, response: Any) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and run_id != turn.root_id:
                turn.hint = response

    def turn_failed(self, run_id: str, error: BaseException | str) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and turn.error is None:
                turn.error = _error_text(error)

    # -- closing -----------------------------------------------------------------------------------

    def _hand_off(self, turn: _Turn, *, evicted: bool = False) -> None:
        """On the host's thread, once the turn is out of the run store: take what it was answered
        with, and leave the rest to the auditor's closing thread."""
        now = time.time_ns()
        with self.store.lock:
            self.closed_turns += 1
            drained = not self.accepting and not self.store
        try:
            self._settle(turn)
        except Exception as exc:
            report_failure("closing a LlamaIndex turn", exc)
        close_later(self.auditor, partial(self._close, turn, now, evicted), self.recorder.content)
        if drained and self.on_idle is not None:
            self.on_idle()  # the last turn of an uninstrumented instrumentation: leave the dispatcher

    def _settle(self, turn: _Turn) -> None:
        """The answer and the nodes it was built from, read now from the engine's response (the
        host may reuse it), which the turn then lets go of."""
        result, hint = turn.result, turn.hint
        turn.result = turn.hint = None
        if turn.kind == "retrieve":
            if isinstance(result, list):
                turn.sources = _snapshot(result)
            return
        if turn.kind == "agent":
            # The agent's reply; its evidence is every retrieval and tool output (the assembler's
            # rule), not the source nodes of a query engine one of its tools called.
            if turn.error is None:
                turn.answer = _answer_from(result)
            return
        nodes = _source_nodes_of(result)
        if nodes is None and turn.sources is None:
            nodes = _source_nodes_of(hint)
        if nodes is not None:
            turn.sources = _snapshot(nodes)
        if turn.error is None:
            answer = turn.streamed if turn.streamed is not None else _answer_from(result)
            if answer is None:
                answer = _answer_from(hint)
            if answer is None:
                answer = next((g.output for g in sorted(turn.generations.values(), key=lambda g: -g.seq)
                               if g.output is not None and g.error is None and g.ended_at is not None), None)
            turn.answer = answer

    def _close(self, turn: _Turn, now: int, evicted: bool) -> None:
        """On the closing thread: read the turn into the assembler's parts; it does the rest."""
        parts = TurnParts(turn_id=_turn_id(turn), framework=FRAMEWORK, root_kind=turn.kind,
                          started_at=turn.started_at, ended_at=now, query=turn.query, answer=turn.answer,
                          error=turn.error, evicted_at=self.store.max_runs if evicted else None, tags=turn.tags,
                          metadata={"run_name": turn.name})
        try:
            self._read(turn, parts, now)
        except Exception as exc:
            report_failure("reading a LlamaIndex turn", exc)
            parts.error = f"ragaudit could not read this turn: {exc}"
        close_turn(parts, self.recorder, self.auditor, parent=turn.context, measures=self.turn_measures)

    def _read(self, turn: _Turn, parts: TurnParts, now: int) -> None:
        steps: list[Step] = []
        for run_id, r in turn.retrievals.items():
            ended_at, error = step_end(r.ended_at, r.error, now)
            steps.append(Step(run_id, turn.parents.get(run_id), r.seq, Retrieval(
                name=r.name, documents=_convert_nodes(r.nodes), query=r.query, started_at=r.started_at,
                ended_at=ended_at, error=error)))
        for run_id, g in turn.generations.items():
            ended_at, error = step_end(g.ended_at, g.error, now)
            steps.append(Step(run_id, turn.parents.get(run_id), g.seq, Generation(
                model=g.model, prompt=g.prompt, output=g.output, input_tokens=g.input_tokens,
                output_tokens=g.output_tokens, started_at=g.started_at, ended_at=ended_at, error=error,
                provider=g.provider, messages=g.messages)))
        capture = self.recorder.capture_content
        for run_id, t in turn.tools.items():
            ended_at, error = step_end(t.ended_at, t.error, now)
            text, documents, tool_error = _read_tool_output(t.output)
            steps.append(Step(run_id, turn.parents.get(run_id), t.seq, ToolCall(
                name=t.name, call_id=t.call_id, arguments=input_text(t.input) if capture else None, output=text,
                started_at=t.started_at, ended_at=ended_at, error=error or tool_error), documents))
        parts.steps = steps
        parts.parents = turn.parents
        parts.history = _messages_of(turn.history)
        parts.prompt_messages = _messages_of(turn.prompt)
        if turn.stream_state is not None:
            parts.metadata[STREAM_KEY] = turn.stream_state
        from_sources = turn.sources is not None and turn.kind not in ("retrieve", "agent")
        if from_sources:
            parts.sources = _convert_nodes(turn.sources or ())
        if turn.kind != "agent":
            parts.metadata[JUDGE_CONTEXT_KEY] = "source_nodes" if from_sources else "retrieval"


def _read_tool_output(output: Any) -> tuple[str | None, tuple[RetrievedDoc, ...] | None, str | None]:
    """``(text, documents, error)`` of a ``ToolOutput``: its content, the nodes it returned when its
    raw output is a list of nodes (a retriever tool), and its error."""
    if output is None:
        return None, None, None
    content = getattr(output, "content", None)
    text = content if isinstance(content, str) else None
    raw = getattr(output, "raw_output", None)
    documents = None
    if isinstance(raw, (list, tuple)) and raw and all(hasattr(getattr(n, "node", n), "node_id") for n in raw):
        documents = _convert_nodes(_snapshot(list(raw)))
    error = f"tool {getattr(output, 'tool_name', '')} failed" if getattr(output, "is_error", False) else None
    return text, documents, error




def _turn_id(turn: _Turn) -> str:
    return turn.root_id[-36:]  # the uuid4 of the root span / callback event


def _never() -> _Turn:  # pragma: no cover - a stream run always has its turn's root as parent
    raise RuntimeError("a stream run must belong to an open turn")


# --- streams ---------------------------------------------------------------------------------------


def _stream_close_failed(exc: BaseException) -> None:
    report_failure("closing an abandoned LlamaIndex stream", exc)


# Closes the turns of streams the garbage collector dropped. A finalizer may run on any thread at
# any moment, even inside the host's own locks, so it only queues the job; one worker for the
# process, its thread started with the first stream (not from inside a finalizer).
_closer: BatchWorker[Callable[[], None]] = BatchWorker(
    "llamaindex-streams", run_jobs, max_queue=10_000, on_error=_stream_close_failed)


_STOPPED = (GeneratorExit, asyncio.CancelledError)  # the consumer stopped; nothing failed


class _Tap:
    """What both stream wrappers share: the turn they feed, the text so far, and closing it once."""

    def __init__(self, collector: _Collector, turn: _Turn, response: Any) -> None:
        self._collector = collector
        self._turn = turn
        self._response: Any = response  # only until install(): a tap must not keep its response alive
        self._parts: list[str] = []
        self._done = False
        _closer.start()

    def install(self) -> None:
        """Put this tap in the response in place of its token generator."""
        self._response.response_gen = self
        del self._response

    def _took(self, item: Any) -> None:
        if isinstance(item, str):
            self._parts.append(item)

    def _finish(self, state: str, error: BaseException | None, deferred: bool = False) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._collector.stream_ended(self._turn, "".join(self._parts), state, error, deferred)
        except Exception as exc:
            report_failure("closing a LlamaIndex stream", exc)

    def __del__(self) -> None:
        if not getattr(self, "_done", True):
            self._finish("abandoned", None, deferred=True)


class _Step:
    """One step of a wrapped stream: model calls made in it belong to the tap's turn, and its end
    (exhausted, failed, stopped by the consumer) closes the turn."""

    __slots__ = ("_tap", "_thrown", "_token")

    def __init__(self, tap: _Tap, thrown: BaseException | None = None) -> None:
        self._tap = tap
        self._thrown = thrown

    def __enter__(self) -> None:
        self._token = _STREAM_TURN.set((self._tap._collector, self._tap._turn))

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> None:
        _STREAM_TURN.reset(self._token)
        if exc is None:
            return
        if isinstance(exc, (StopIteration, StopAsyncIteration)):
            self._tap._finish("consumed", None)
        elif exc is self._thrown or isinstance(exc, _STOPPED):
            self._tap._finish("abandoned", None)
        else:
            self._tap._finish("error", exc)


class _StreamTap(_Tap, Generator[str, None, None]):
    """Stands in for ``StreamingResponse.response_gen``: passes every token through, keeps the text,
    and closes the turn when the stream ends, fails, is closed, or is dropped unfinished."""

    def __init__(self, collector: _Collector, turn: _Turn, response: StreamingResponse) -> None:
        super().__init__(collector, turn, response)
        self._inner: Any = iter(response.response_gen)

    def send(self, value: Any) -> str:
        if self._done:
            raise StopIteration
        with _Step(self):
            item = next(self._inner) if value is None else self._inner.send(value)
        self._took(item)
        return item

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> str:  # type: ignore[override]
        exc = typ if isinstance(typ, BaseException) else val if isinstance(val, BaseException) else typ()
        inner_throw = getattr(self._inner, "throw", None)
        if self._done or inner_throw is None:
            self._finish("abandoned", None)
            raise exc
        with _Step(self, thrown=exc):
            item = inner_throw(exc)
        self._took(item)
        return item

    def close(self) -> None:
        if self._done:
            return
        try:
            closer = getattr(self._inner, "close", None)
            if closer is not None:
                closer()
        finally:
            self._finish("abandoned", None)


class _AsyncStreamTap(_Tap):
    """The async counterpart of :class:`_StreamTap`, for ``AsyncStreamingResponse.response_gen``."""

    def __init__(self, collector: _Collector, turn: _Turn, response: AsyncStreamingResponse) -> None:
        super().__init__(collector, turn, response)
        self._inner: AsyncIterator[str] = response.response_gen.__aiter__()

    def __aiter__(self) -> _AsyncStreamTap:
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        with _Step(self):
            item = await self._inner.__anext__()
        self._took(item)
        return item

    async def aclose(self) -> None:
        if self._done:
            return
        try:
            closer = getattr(self._inner, "aclose", None)
            if closer is not None:
                await closer()
        finally:
            self._finish("abandoned", None)


# --- the instrumentation dispatcher -----------------------------------------------------------------


class _SpanHandler(BaseSpanHandler[BaseSpan]):
    """Follows the dispatcher's span tree. Keeps no span objects (``open_spans`` stays empty): the
    collector's run store is the record, so each span costs a few dictionary operations."""

    # A field, not a private attribute: pydantic serves private attributes through __getattr__,
    # too slow for a call made on every span.
    collector: Any = Field(default=None, exclude=True, repr=False)

    def __init__(self, collector: _Collector) -> None:
        super().__init__()
        self.collector = collector

    @classmethod
    def class_name(cls) -> str:
        return "RagAuditSpanHandler"

    def new_span(self, id_: str, bound_args: inspect.BoundArguments, instance: Any | None = None,
                 parent_span_id: str | None = None, tags: dict[str, Any] | None = None,
                 **kwargs: Any) -> BaseSpan | None:
        try:
            now = time.time_ns()
            name = _span_name(id_)
            kind = _root_kind(name, instance)
            root = (kind, name, _query_from_args(bound_args), tags or None) if kind is not None else None
            collector: _Collector = self.collector
            turn = collector.start_run(id_, parent_span_id, root, now)
            if turn is None:
                return None
            if kind == "retrieve":
                collector.retrieval_started(id_, _retriever_name(instance), root[2] if root else None, now)
            elif kind == "chat":
                if turn.root_id == id_:
                    turn.history = _chat_history_of(bound_args, instance)
            elif name.endswith(_TOOL_STEP) and turn.kind == "agent":
                collector.tool_started(id_, bound_args, now)
            elif isinstance(instance, BaseLLM):
                with collector.store.lock:
                    collector.generation_started(turn, id_, parent_span_id, now, instance)
        except Exception as exc:
            report_failure("LlamaIndex span start", exc)
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments, instance: Any | None = None,
                             result: Any | None = None, **kwargs: Any) -> BaseSpan | None:
        try:
            self.collector.end_run(id_, result=result, instance=instance)
        except Exception as exc:
            report_failure("LlamaIndex span end", exc)
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments, instance: Any | None = None,
                             err: BaseException | None = None, **kwargs: Any) -> BaseSpan | None:
        try:
            self.collector.end_run(id_, error=err if err is not None else "span dropped", instance=instance)
        except Exception as exc:
            report_failure("LlamaIndex span drop", exc)
        return None


_EventFn = Callable[[_Collector, Any, str, int], None]
_TOOL_STEP = ".call_tool"  # the step of a workflow agent that runs one tool call


def _chat_history_of(bound_args: Any, instance: Any) -> list[Any] | None:
    """A chat engine's history before this message: the ``chat_history`` passed in, else its memory."""
    arguments = getattr(bound_args, "arguments", None)
    history = arguments.get("chat_history") if isinstance(arguments, Mapping) else None
    if history is None:
        try:
            history = instance.chat_history
        except Exception:  # an engine whose memory cannot be read: no history, still a turn
            return None
    return list(history) if isinstance(history, (list, tuple)) and history else None


def _on_retrieval_start(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.retrieval_started(span_id, _span_name(span_id).rpartition(".")[0] or "retriever",
                        e.str_or_query_bundle, now)


def _on_retrieval_end(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.retrieval_ended(span_id, e.nodes, now)


def _on_response(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.response_seen(span_id, e.response)


def _on_chat_start(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.model_called(span_id, _model_from(e.model_dict), _messages_text(e.messages), now, _messages_of(e.messages))
    c.conversation_seen(span_id, e.messages)


def _on_completion_start(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.model_called(span_id, _model_from(e.model_dict), e.prompt if isinstance(e.prompt, str) else None, now)


def _on_model_end(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.model_answered(span_id, e.response, now)


def _on_stream_chat_error(c: _Collector, e: Any, span_id: str, now: int) -> None:
    c.turn_failed(span_id, e.exception)


_EVENTS: dict[type, _EventFn] = {
    RetrievalStartEvent: _on_retrieval_start,
    RetrievalEndEvent: _on_retrieval_end,
    QueryEndEvent: _on_response,
    SynthesizeEndEvent: _on_response,
    LLMChatStartEvent: _on_chat_start,
    LLMCompletionStartEvent: _on_completion_start,
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


class _EventHandler(BaseEventHandler):
    """Reads the events that carry data (retrieved nodes, responses, model calls) into the turn
    their span belongs to; every other event costs one dictionary lookup."""

    collector: Any = Field(default=None, exclude=True, repr=False)

    def __init__(self, collector: _Collector) -> None:
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


class _Audited:
    """What both entry points offer: their auditor and span recorder, flush and turn counts."""

    _collector: _Collector

    @property
    def auditor(self) -> Auditor:
        """The :class:`~ragaudit.Auditor` turns are submitted to."""
        return self._collector.auditor

    @property
    def recorder(self) -> Any:
        """The :class:`~ragaudit.tracing.SpanRecorder` that writes the turn spans."""
        return self._collector.recorder

    @renamed_kwargs(timeout="timeout_s")
    def flush(self, timeout_s: float | None = 30.0) -> bool:
        """Close the turns of streams dropped unfinished, then wait for every pending judgement.

        Returns False when *timeout_s* (seconds) ran out first.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ok = _closer.flush(timeout_s)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._collector.auditor.flush(remaining) and ok

    def stats(self) -> dict[str, int]:
        """``open_turns`` (in flight now), ``closed_turns`` and ``evicted`` (ended early at *max_runs*)."""
        collector = self._collector
        with collector.store.lock:
            return {"open_turns": len(collector.store), "closed_turns": collector.closed_turns,
                    "evicted": collector.store.evicted}


class LlamaIndexInstrumentation(_Audited):
    """What :func:`instrument` attached to LlamaIndex's root dispatcher; :func:`uninstrument` detaches it.

    ``auditor`` judges the turns, ``recorder`` writes the turn spans. :meth:`flush` waits for the
    judgements of the turns closed so far; :meth:`stats` counts turns. ``attached``: whether runs
    that start now are audited. Once detached, its handlers stay on the dispatcher only until the
    turns in flight then have closed (each as one turn), and ignore everything else.
    """

    def __init__(self, collector: _Collector) -> None:
        self._collector = collector
        self.span_handler = _SpanHandler(collector)
        self.event_handler = _EventHandler(collector)
        self.attached = False
        self._on_dispatcher = False
        collector.outside = {}
        collector.on_idle = self._drained

    def uninstrument(self) -> None:
        """Stop auditing runs that start from now on (idempotent); runs in flight finish as one turn each."""
        with _registration_lock:
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
        if not _registration_lock.acquire(blocking=False):
            return
        try:
            if not self.attached and self._idle():
                self._leave()
        finally:
            _registration_lock.release()

    def __repr__(self) -> str:
        return f"LlamaIndexInstrumentation(attached={self.attached}, auditor={self.auditor!r})"


_registration_lock = _fork.rlock()
_current: LlamaIndexInstrumentation | None = None
_last: tuple[tuple[Any, ...], LlamaIndexInstrumentation] | None = None  # the last instrument()'s arguments
_draining: set[LlamaIndexInstrumentation] = set()  # detached, still on the dispatcher for turns in flight


def _sweep() -> None:
    """Take the drained instrumentations off the dispatcher (registration lock held)."""
    for installed in list(_draining):
        if installed._idle():
            installed._leave()


def _same_args(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y or (isinstance(x, (bool, int, str, tuple)) and x == y)
                                    for x, y in zip(a, b))


def instrument(
    judge: Any = None,
    auditor: Auditor | None = None,
    tracer_provider: Any = None,
    capture_content: bool | None = None,
    *,
    redact: Callable[[str], str] | None = None,
    max_runs: int = 10_000,
    turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
) -> LlamaIndexInstrumentation:
    """Audit every LlamaIndex query, chat and retrieval in the process.

    Attaches a span handler and an event handler to the root dispatcher
    (``llama_index.core.instrumentation.get_dispatcher()``); calling again with the same arguments
    (the same objects), also after :func:`uninstrument`, returns the same instrumentation, with
    others replaces it. Returns the :class:`LlamaIndexInstrumentation`; undo with :func:`uninstrument`.
    Safe while engines run: a run in flight when this is called (or when it is replaced) is not
    audited by it, not even its later steps; one that started under it finishes with it as one turn.

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
    * Chat engines and agents with memory: ``history`` (the engine's memory before the message,
      or the agent's first model call) and ``standalone_query`` (the condensed question retrieval
      used) go to the judge.
    * A retriever called on its own and a turn with no answer or an error are traced, not judged;
      an empty answer (``"Empty Response"``) is traced and counted. The rules are the turn
      assembler's (:mod:`ragaudit.integrations._assembler`), shared with LangChain.

    Args:
        judge: the judge of the :class:`~ragaudit.Auditor` the turns go to (one per judge object,
            shared with every handler given the same judge). Give *judge* or *auditor*, not both;
            with neither, the process-wide default auditor.
        auditor: the auditor to submit turns to.
        tracer_provider, capture_content, redact: how the turns are recorded (``capture_content``
            None: on unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says
            ``NO_CONTENT``): turn spans, and each turn's judge span, audit-log line and sink payloads
            (:meth:`~ragaudit.Auditor.recorder_for`); they never make an Auditor of their own. With
            none given, the auditor's recorder is used.
        max_runs: at most this many turns are tracked at once; past it the oldest is ended as an error.
        turn_measures: retrieval metrics put on the turn span when ground truth is known.

    Raises :class:`~ragaudit.ConfigurationError` for bad arguments. Once attached, the handlers
    never raise into LlamaIndex: a failure is logged (rate-limited) on the ``ragaudit`` logger.
    """
    global _current, _last
    args = (judge, auditor, tracer_provider, capture_content, redact, max_runs, tuple(turn_measures))
    with _registration_lock:
        _sweep()
        if _last is not None and _same_args(args, _last[0]):
            # Idempotent, also after uninstrument(): the same arguments get the one instrumentation.
            installed = _last[1]
            if _current is not installed and _current is not None:
                _current._detach()
            _current = installed
            installed._attach()
            return installed
    collector = _Collector(judge, auditor, tracer_provider, capture_content, redact, max_runs, turn_measures,
                           "instrument()")
    installed = LlamaIndexInstrumentation(collector)
    with _registration_lock:
        previous, _current, _last = _current, installed, (args, installed)
        if previous is not None:
            previous._detach()  # its runs in flight finish with it; new ones are this one's
        installed._attach()
    return installed


def uninstrument() -> LlamaIndexInstrumentation | None:
    """Stop auditing runs that start from now on; returns what :func:`instrument` attached (None when
    nothing was). Idempotent.

    Runs in flight finish with it, each as one turn (its handlers leave the dispatcher when the
    last of them has ended); runs that start afterwards, and their steps, are not audited.
    """
    global _current
    with _registration_lock:
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

    *instrument_kwargs* go to :func:`instrument`. On exit the turns closed so far are flushed to
    the auditor's queue (not waited for judging), this instrumentation is detached and the one
    :func:`instrument` had installed before, if any, is attached again.
    """
    global _current, _last
    with _registration_lock:
        previous, previous_last = _current, _last
    installed = instrument(**instrument_kwargs)
    try:
        yield installed
    finally:
        with _registration_lock:
            if installed is not previous:
                installed._detach()
                _current = None
                if previous is not None:
                    previous._attach()
                    _current, _last = previous, previous_last


# --- the legacy CallbackManager ------------------------------------------------------------------------


class RagAuditLlamaIndexHandler(_Audited, BaseCallbackHandler):
    """A legacy LlamaIndex callback handler: each root ``QUERY`` (or a ``RETRIEVE`` of its own)
    becomes an audited :class:`~ragaudit.RagTurn`.

    >>> from llama_index.core import Settings
    >>> from llama_index.core.callbacks import CallbackManager
    >>> Settings.callback_manager = CallbackManager([RagAuditLlamaIndexHandler()])

    For code that still sets ``Settings.callback_manager``; new code should prefer
    :func:`instrument`, which sees chat engines as one turn. The question is the ``QUERY`` event's
    query string (for a chat engine, the condensed question), the answer its response, the
    documents the response's ``source_nodes``; ``RETRIEVE`` events become retrieval spans and
    ``LLM`` events generation spans (a chat model implemented over completion counts once). The
    arguments are those of :func:`instrument`.
    """

    def __init__(
        self,
        judge: Any = None,
        auditor: Auditor | None = None,
        tracer_provider: Any = None,
        capture_content: bool | None = None,
        *,
        redact: Callable[[str], str] | None = None,
        max_runs: int = 10_000,
        turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
    ) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self._collector = _Collector(judge, auditor, tracer_provider, capture_content, redact, max_runs,
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
        parent = parent_id if parent_id and parent_id != _LEGACY_ROOT else None
        if event_type == CBEventType.EXCEPTION:  # an event that never ends: only its error counts
            error = payload.get(EventPayload.EXCEPTION)
            if parent is not None and isinstance(error, BaseException):
                collector.turn_failed(parent, error)
            return
        root: _RootInfo | None = None
        if event_type in (CBEventType.QUERY, CBEventType.RETRIEVE):
            kind = "query" if event_type == CBEventType.QUERY else "retrieve"
            root = (kind, event_type.value, _query_text(payload.get(EventPayload.QUERY_STR)), None)
        turn = collector.start_run(event_id, parent, root, now)
        if turn is None:
            return
        if event_type == CBEventType.RETRIEVE:
            collector.retrieval_started(event_id, "retriever", payload.get(EventPayload.QUERY_STR), now)
        elif event_type == CBEventType.LLM:
            outer = _LEGACY_LLM.get()
            with collector.store.lock:
                outer_id = outer[1] if outer is not None and outer[0] is collector else None
                running = turn.generations.get(turn.llm_key.get(outer_id, "")) if outer_id else None
                inside = outer_id if running is not None and running.ended_at is None else None
                collector.generation_started(turn, event_id, inside, now)
                turn.legacy_outer[event_id] = outer
            _LEGACY_LLM.set((collector, event_id))
            serialized = payload.get(EventPayload.SERIALIZED)
            prompt = payload.get(EventPayload.PROMPT)
            messages: tuple[tuple[str, str], ...] = ()
            if not isinstance(prompt, str):
                prompt = _messages_text(payload.get(EventPayload.MESSAGES))
                messages = _messages_of(payload.get(EventPayload.MESSAGES))
            collector.model_called(event_id, _model_from(serialized), prompt, now, messages)

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
                outer = turn.legacy_outer.pop(event_id, _UNSET) if turn is not None else _UNSET
            if outer is not _UNSET:
                _LEGACY_LLM.set(outer)
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
