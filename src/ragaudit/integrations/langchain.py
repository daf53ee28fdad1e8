"""LangChain integration: one callback handler makes every chain run an audited, traced turn.

>>> from ragaudit.integrations.langchain import RagAuditCallbackHandler
>>> chain.invoke(question, config={"callbacks": [RagAuditCallbackHandler()]})

or, for every chain in the process, :func:`instrument`. Each root run (the outermost chain, or a
retriever or chat model called on its own) becomes one :class:`~ragaudit.RagTurn`: its question,
the documents its retrievers returned, its answer and the citations in it, every retriever and
model call as a child span, judged in the background by an :class:`~ragaudit.Auditor`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolMessage

from .. import _fork
from .._deprecation import renamed_kwargs
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
    score_from,
)

__all__ = ["RagAuditCallbackHandler", "instrument", "uninstrument"]

FRAMEWORK = "langchain"
_QUERY_KEYS = ("question", "input", "query", "q")
_ANSWER_KEYS = ("answer", "output", "result", "text")
_ROOT_KINDS = {"chain": "chain", "retriever": "retrieve", "llm": "model"}


# --- reading LangChain values ----------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return "" if content is None else str(content)


_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant",
          "AIMessageChunk": "assistant", "system": "system", "developer": "system", "tool": "tool",
          "function": "tool"}


def _message_of(item: Any) -> tuple[str, str] | None:
    """``(role, text)`` of one message in any form LangChain accepts: a message object, a
    ``(role, content)`` tuple, a ``{"role" | "type": ..., "content": ...}`` dict, or a string (a
    user message); None for anything else. Roles: user, assistant, system, tool."""
    if isinstance(item, BaseMessage):
        return _ROLES.get(item.type, item.type), _text_of(item.content)
    if isinstance(item, str):
        return "user", item
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
        return _ROLES.get(item[0], item[0]), _text_of(item[1])
    if isinstance(item, Mapping):
        role = item.get("role", item.get("type"))
        if isinstance(role, str) and "content" in item:
            return _ROLES.get(role, role), _text_of(item["content"])
    return None


def _messages_of(value: Any) -> list[tuple[str, str]] | None:
    """The conversation in *value* (a list of messages, or one message), or None when it is none."""
    if isinstance(value, (BaseMessage, str)):
        single = _message_of(value)
        return [single] if single is not None else None
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) \
            and not isinstance(value[1], (list, tuple, BaseMessage)):
        single = _message_of(value)  # one ("user", "text") pair
        return [single] if single is not None else None
    out = []
    for item in value:
        message = _message_of(item)
        if message is None:
            return None
        out.append(message)
    return out


def _last_user(messages: Sequence[tuple[str, str]] | None) -> str | None:
    if not messages:
        return None
    for role, text in reversed(messages):
        if role == "user":
            return text
    return messages[-1][1]


def _query_from(inputs: Any) -> str | None:
    """The question of a root run: a string, a message, a dict's question/input/query/q (else the
    user's last message in its ``messages``, else its first non-empty string), a list of messages.
    None for streaming placeholders (``{"input": ""}``)."""
    if isinstance(inputs, str):
        return inputs or None
    if isinstance(inputs, BaseMessage):
        return _text_of(inputs.content) or None
    if isinstance(inputs, Mapping):
        for key in _QUERY_KEYS:
            value = inputs.get(key)
            if isinstance(value, str):
                if value:
                    return value
            elif value is not None:
                found = _query_from(value)
                if found:
                    return found
        if "messages" in inputs:
            return _last_user(_messages_of(inputs["messages"])) or None
        for value in inputs.values():
            if isinstance(value, str) and value:
                return value
        return None
    if isinstance(inputs, (list, tuple)) and inputs:
        return _last_user(_messages_of(inputs)) or None
    return None


def _conversation_of(inputs: Any) -> Any:
    """The raw message list of a conversation-shaped root input (``{"messages": [...]}`` as agents
    take, or a list of messages), read into messages when the turn closes; None otherwise."""
    if isinstance(inputs, Mapping):
        messages = inputs.get("messages")
        return messages if isinstance(messages, (list, tuple, str, BaseMessage)) else None
    if isinstance(inputs, list) and inputs and not isinstance(inputs[0], str):
        return inputs
    return None


def _history_of(inputs: Any) -> Any:
    """A chain input's ``chat_history`` / ``history`` (what ``RunnableWithMessageHistory`` inserts
    and history-aware retrievers read), raw; None when there is none."""
    if isinstance(inputs, Mapping):
        for key in ("chat_history", "history"):
            value = inputs.get(key)
            if isinstance(value, (list, tuple)) and value:
                return value
    return None


def _readable(read: Callable[[Any], Any], inputs: Any, what: str) -> Any:
    """``read(inputs)``, or None (reported) when *inputs* cannot be read: the run is still tracked."""
    try:
        return read(inputs)
    except Exception as exc:
        report_failure(f"reading a run's {what}", exc)
        return None


def _answer_from(outputs: Any) -> str | None:
    """The answer of a root run: a string, a message's text, a dict's answer/output/result/text, or
    the last AI message of a dict's ``messages`` (a LangGraph agent's state)."""
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, BaseMessage):
        return _text_of(outputs.content)
    if isinstance(outputs, Mapping):
        for key in _ANSWER_KEYS:
            value = outputs.get(key)
            if isinstance(value, (str, BaseMessage)):
                return _answer_from(value)
        messages = outputs.get("messages")
        if isinstance(messages, list):
            for message in reversed(messages):
                if isinstance(message, BaseMessage) and message.type == "ai":
                    return _text_of(message.content)
    return None


def _error_text(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # an exception whose __str__ fails
        return f"{type(error).__name__} (its message could not be read)"


_RawDoc = tuple[Any, Any, Mapping[str, Any]]  # (id, page_content, metadata copy) as the retriever returned it


def _snapshot_documents(documents: Sequence[Any] | None) -> tuple[_RawDoc, ...]:
    """What a retriever returned, as it is now (a later step may edit a document's metadata); cheap,
    so it can run on the host's thread. :func:`_convert_documents` does the rest in the background."""
    out = []
    for doc in documents or ():
        metadata = getattr(doc, "metadata", None)
        out.append((getattr(doc, "id", None), getattr(doc, "page_content", None),
                    dict(metadata) if isinstance(metadata, Mapping) else {}))
    return tuple(out)


def _convert_documents(documents: Sequence[_RawDoc]) -> tuple[RetrievedDoc, ...]:
    return tuple(retrieved_doc(rank, doc_id, content, metadata, score_from(metadata))
                 for rank, (doc_id, content, metadata) in enumerate(documents, 1))


def _is_documents(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        hasattr(item, "page_content") for item in value)


def _read_tool_output(output: Any, call_id: str | None, name: str
                      ) -> tuple[str | None, tuple[RetrievedDoc, ...] | None, str | None, str | None]:
    """``(text, documents, call id, error)`` of a tool's output: a ``ToolMessage`` (its content, its
    artifact's documents as ``create_retriever_tool`` returns them, its call id, an error status),
    a list of documents, or any value (its text)."""
    error = None
    artifact = None
    if isinstance(output, ToolMessage):
        call_id = output.tool_call_id or call_id
        artifact = output.artifact
        if output.status == "error":
            error = f"tool {name} failed"
        content: Any = output.content
    else:
        content = output
    documents = None
    for candidate in (artifact, content):
        if _is_documents(candidate):
            documents = _convert_documents(_snapshot_documents(candidate))
            break
    if content is None:
        text = None
    elif _is_documents(content):
        text = "\n\n".join(str(doc.page_content) for doc in content)
    elif isinstance(content, (str, list)):
        text = _text_of(content)
    else:
        text = str(content)
    return text, documents, call_id, error




def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_llm_result(response: Any) -> tuple[str | None, int | None, int | None, str | None]:
    """``(output text, input tokens, output tokens, response model)`` of an ``LLMResult``."""
    text: str | None = None
    message = None
    generations = getattr(response, "generations", None)
    if generations and generations[0]:
        first = generations[0][0]
        message = getattr(first, "message", None)
        text = getattr(first, "text", None)
        if not text and isinstance(message, BaseMessage):
            text = _text_of(message.content)
    llm_output = getattr(response, "llm_output", None)
    llm_output = llm_output if isinstance(llm_output, Mapping) else {}
    input_tokens = output_tokens = None
    usage = llm_output.get("token_usage") or llm_output.get("usage")
    if isinstance(usage, Mapping):
        input_tokens = _int_or_none(usage.get("prompt_tokens", usage.get("input_tokens")))
        output_tokens = _int_or_none(usage.get("completion_tokens", usage.get("output_tokens")))
    usage_metadata = getattr(message, "usage_metadata", None)
    if input_tokens is None and output_tokens is None and isinstance(usage_metadata, Mapping):
        input_tokens = _int_or_none(usage_metadata.get("input_tokens"))
        output_tokens = _int_or_none(usage_metadata.get("output_tokens"))
    model = llm_output.get("model_name") or llm_output.get("model")
    if not model:
        response_metadata = getattr(message, "response_metadata", None)
        if isinstance(response_metadata, Mapping):
            model = response_metadata.get("model_name") or response_metadata.get("model")
    return text if isinstance(text, str) else None, input_tokens, output_tokens, (
        model if isinstance(model, str) and model else None)


def _prompt_messages(prompt: Any) -> tuple[tuple[str, str], ...]:
    """A chat model's input as ``(role, content)`` pairs (user, assistant, system, tool); () for a
    plain-text prompt."""
    if not isinstance(prompt, list):
        return ()
    return tuple((_ROLES.get(m.type, str(getattr(m, "role", m.type))), _text_of(m.content))
                 for m in prompt if isinstance(m, BaseMessage))


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], str):
            return "\n".join(prompt)
        return "\n".join(f"{m.type}: {_text_of(m.content)}" for m in prompt if isinstance(m, BaseMessage))
    return None


def _retriever_name(serialized: Any, metadata: Mapping[str, Any] | None, name: Any) -> str:
    if not isinstance(name, str) or not name:
        name = serialized.get("name") if isinstance(serialized, Mapping) else None
    store = metadata.get("ls_vector_store_provider") if metadata else None
    if isinstance(store, str) and store and (not name or name == "VectorStoreRetriever"):
        return store
    return name if isinstance(name, str) and name else "retriever"


def _model_name(invocation_params: Any, metadata: Mapping[str, Any] | None) -> str | None:
    if isinstance(invocation_params, Mapping):
        for key in ("model", "model_name", "model_id", "deployment_name"):
            value = invocation_params.get(key)
            if isinstance(value, str) and value:
                return value
    value = metadata.get("ls_model_name") if metadata else None
    return value if isinstance(value, str) and value else None


# --- per-turn state ----------------------------------------------------------------------------------


# What the host's thread keeps of a turn: raw values only. Records are built when the turn closes,
# on the auditor's closing thread.


@dataclass(slots=True)
class _OpenRetrieval:
    name: str
    query: str | None
    started_at: int
    seq: int = 0
    key: int = 0
    parent: int | None = None
    ended_at: int | None = None
    documents: tuple[_RawDoc, ...] = ()
    error: str | None = None


@dataclass(slots=True)
class _OpenGeneration:
    model: str | None
    provider: str | None
    prompt: Any
    started_at: int
    seq: int = 0
    key: int = 0
    parent: int | None = None
    ended_at: int | None = None
    response: Any = None  # the LLMResult, read at close
    error: str | None = None


@dataclass(slots=True)
class _OpenTool:
    name: str
    call_id: str | None
    input: Any
    started_at: int
    seq: int = 0
    key: int = 0
    parent: int | None = None
    ended_at: int | None = None
    output: Any = None  # the ToolMessage (or raw output), read at close
    error: str | None = None


_Child = _OpenRetrieval | _OpenGeneration | _OpenTool


@dataclass(slots=True)
class _Turn:
    run_id: UUID
    key: int
    kind: str  # the root's run kind: chain, retriever, llm
    started_at: int
    name: str | None
    query: str | None
    metadata: Mapping[str, Any] | None
    context: Any = None  # the OTel context at the root's start: the turn span's parent
    conversation: Any = None  # the root's messages (agents), raw
    history: Any = None  # a chain input's chat_history, raw
    prompt: Any = None  # the first chat model call's messages, raw (an agent's history lives there)
    answer: str | None = None  # read when the root ends: the caller may change its output afterwards
    error: str | None = None
    seq: int = 0
    parents: dict[int, int | None] = field(default_factory=dict)  # every run of the turn -> its parent
    open_children: dict[int, _Child] = field(default_factory=dict)
    finished: list[_Child] = field(default_factory=list)


class RagAuditCallbackHandler(BaseCallbackHandler):
    """A LangChain callback handler that turns each root run into an audited :class:`~ragaudit.RagTurn`.

    Pass it in ``config={"callbacks": [handler]}`` (or use :func:`instrument`). One handler can
    serve any number of concurrent runs (invoke, ainvoke, batch, abatch, stream, astream,
    astream_events); events are grouped by their root run. A turn closes when its root run has
    ended and all its child runs have too (a stream abandoned by its consumer ends the root first),
    or at once when the root fails. At close the handler hands what it read to the turn assembler
    (:mod:`ragaudit.integrations._assembler`), which applies the turn rules shared by every
    integration: what is judged, what is only traced and counted.

    * Question: the root's input (a string, a message, a dict's ``question``/``input``/``query``/
      ``q``); for an agent's ``{"messages": [...]}``, the user's last message in any form
      (message object, ``(role, text)`` tuple, ``{"role", "content"}`` dict, string, content
      blocks); for a stream it arrives when the root ends.
    * Answer: the root's output (a string, a message, a dict's ``answer``/``output``/``result``/
      ``text`` as ``create_retrieval_chain`` returns, the last AI message of a dict's ``messages``);
      else the text of the last model call (also for a stream abandoned before its end).
    * Evidence: the documents of every *outermost* retriever run (a retriever inside another, as in
      compression, multi-query or ensemble retrievers, is a child span only) and every tool output
      (a ``ToolMessage``'s artifact documents, else its text as a document with source = tool name
      and id = tool call id), in start order, each id once, ranked 1..n; ids per ``Document.id``,
      metadata ``id``/``doc_id``, else a hash of source and content; the retriever's score from
      metadata ``score``/``relevance_score``/``_distance``.
    * History: a chain input's ``chat_history``/``history`` (``RunnableWithMessageHistory``), the
      earlier messages of an agent's input, else of its first model call (a checkpointer's
      conversation); the standalone question is the first outermost retrieval's query when it
      differs from the question.
    * Ground truth: ``config={"metadata": {"ragaudit_relevant_ids": [...]}}`` (ids, or
      ``{id: label}``) puts *turn_measures* (recall, precision, MRR, NDCG) on the turn span;
      ``"ragaudit_reference_answer"`` goes to the turn's ``metadata["reference_answer"]``.

    Args:
        judge: the judge of the :class:`~ragaudit.Auditor` this handler submits to: one per judge
            object, shared by every handler given the same judge and released with the last of
            them. Give *judge* or *auditor*, not both.
        auditor: the auditor to submit turns to. With neither, the process-wide default auditor
            (default judge, shared by every such handler whatever its other arguments) is used.
        tracer_provider, capture_content, redact: how this handler's turns are recorded
            (``capture_content`` None: on unless
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT``): its turn spans, and
            each turn's judge span, audit-log line and sink payloads
            (:meth:`~ragaudit.Auditor.recorder_for`; with an auditor given content settings of its
            own, the stricter of both). When none is given, the auditor's recorder is used.
        max_runs: at most this many turns are tracked at once; beyond it the oldest open turn is
            ended as an error span (``stats()["evicted"]``), so a leak cannot grow without bound.
        turn_measures: retrieval metrics put on the turn span when ground truth is known.

    The handler never raises into the chain: a failure inside it is logged (rate-limited) on the
    ``ragaudit`` logger. On the chain's thread it only keeps the raw events (a dictionary update
    under a short lock per event); when a turn closes it hands them to the auditor's closing
    thread (:meth:`~ragaudit.Auditor.defer`), which builds the turn, finds its citations, records
    its spans with the times the events happened and submits it. :meth:`flush` waits for that too.
    With an inline auditor (``mode="inline"``) the turn is closed and judged before the run returns.
    """

    raise_error: bool = False
    # Called directly in async runs too (not via the default executor): keeps each run's events
    # in order, costs no thread hop, and the callbacks never block.
    run_inline: bool = True

    def __init__(
        self,
        judge: Any = None,
        auditor: Auditor | None = None,
        tracer_provider: Any = None,
        capture_content: bool | None = None,
        *,
        max_runs: int = 10_000,
        redact: Callable[[str], str] | None = None,
        turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
    ) -> None:
        super().__init__()
        self.turn_measures = check_measures(turn_measures)
        self._store: RunStore[_Turn] = RunStore(max_runs)  # keyed by run_id.int
        self.auditor, self.recorder = resolve_backend(judge, auditor, tracer_provider, capture_content, redact,
                                                      owner="RagAuditCallbackHandler")
        self._closed_turns = 0
        self._process_wide = False  # set by instrument(): see _start
        self.auditor.attach_source(self)

    # -- public helpers -------------------------------------------------------------------------

    @renamed_kwargs(timeout="timeout_s")
    def flush(self, timeout_s: float | None = 30.0) -> bool:
        """Close the turns whose root run has ended (see :meth:`close_ended_turns`), then wait until
        the turns closed so far are recorded and judged (see :meth:`Auditor.flush`)."""
        self.close_ended_turns()
        return self.auditor.flush(timeout_s)

    def close_ended_turns(self) -> int:
        """Close every turn whose root run has ended but a child run has not (a hung tool thread, a
        lost callback); the open children are recorded as unfinished. Also run at the auditor's
        shutdown and at exit. Returns how many turns were closed."""
        with self._store.lock:
            ended = self._store.pop_ended()
        for turn in ended:
            self._hand_off(turn)
        return len(ended)

    def stats(self) -> dict[str, int]:
        """``open_turns`` (in flight now), ``closed_turns`` and ``evicted`` (ended early at *max_runs*)."""
        with self._store.lock:
            return {"open_turns": len(self._store), "closed_turns": self._closed_turns,
                    "evicted": self._store.evicted}

    # -- bookkeeping ----------------------------------------------------------------------------

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        kind: str | None,
        name: str | None,
        question: Any,
        metadata: Mapping[str, Any] | None,
        child: _Child | None,
        now: int,
    ) -> None:
        """Register a run. *kind* (chain, retriever, llm) None means it never starts a turn (tools)."""
        # UUIDs hash in Python code; their 128-bit ints hash in C, and every event does a few lookups.
        key = run_id.int
        parent = parent_run_id.int if parent_run_id is not None else None

        def new_turn() -> _Turn:
            # A root under a parent we never saw (e.g. a LangSmith @traceable) is a turn too.
            return _Turn(run_id, key, kind or "chain", now, name, _readable(_query_from, question, "question"),
                         metadata, current_context(),
                         _readable(_conversation_of, question, "messages") if kind == "chain" else None)

        store = self._store
        with store.lock:
            if kind and parent is not None and self._process_wide and store.state_of(parent) is None \
                    and not _is_foreign_parent(parent_run_id):
                # The process-wide handler is in every callback manager configured since
                # instrument(): a LangChain parent it never saw started before that (or while
                # uninstrumented), and its child runs are steps of that run, not turns of their own.
                kind = None
            turn, is_root, evicted = store.start(key, parent, new_turn if kind else None)
            if turn is not None:
                if not is_root:
                    turn.parents[key] = parent
                if child is not None:
                    child.seq = turn.seq
                    child.key = key
                    child.parent = None if is_root else parent
                    turn.seq += 1
                    turn.open_children[key] = child
                    if turn.prompt is None and isinstance(child, _OpenGeneration) \
                            and turn.conversation is not None:
                        turn.prompt = child.prompt
                if kind == "chain" and turn.history is None:
                    turn.history = _readable(_history_of, question, "chat history")
        for old in evicted:
            self._hand_off(old, evicted=True)

    def _end(
        self,
        run_id: UUID,
        *,
        outputs: Any = None,
        inputs: Any = None,
        error: BaseException | None = None,
        documents: tuple[_RawDoc, ...] = (),
        response: Any = None,
        now: int = 0,
    ) -> None:
        """Register the end of a run (a retriever's *documents* snapshot, a model's *response*);
        close its turn when this completes it."""
        key = run_id.int
        store = self._store
        with store.lock:
            turn = store.state_of(key)
            if turn is None:
                return
            is_root = turn.key == key
            try:
                child = turn.open_children.pop(key, None)
                if child is not None:
                    child.ended_at = now or time.time_ns()
                    if error is not None:
                        child.error = _error_text(error)
                    elif isinstance(child, _OpenRetrieval):
                        child.documents = documents
                    elif isinstance(child, _OpenTool):
                        child.output = outputs
                    else:
                        child.response = response
                    turn.finished.append(child)
                if is_root:
                    if turn.query is None and inputs is not None:
                        turn.query = _query_from(inputs)
                        if turn.conversation is None and turn.kind == "chain":
                            turn.conversation = _conversation_of(inputs)
                    if error is not None:
                        turn.error = _error_text(error)
                    else:
                        turn.answer = _answer_from(outputs)
            except Exception as exc:  # an unreadable value must not leave the run, and its turn, open
                report_failure("reading the end of a run", exc)
            turn, complete = store.end(key, force=is_root and error is not None)
        if complete and turn is not None:
            self._hand_off(turn)

    # -- closing --------------------------------------------------------------------------------

    def _hand_off(self, turn: _Turn, *, evicted: bool = False) -> None:
        """On the host's thread: count the turn closed and leave the rest to the closing thread.

        The turn is out of the run store by now, so no event can touch it any more.
        """
        now = time.time_ns()
        with self._store.lock:
            self._closed_turns += 1
        close_later(self.auditor, partial(self._close, turn, now, evicted), self.recorder.content)

    def _steps(self, turn: _Turn, now: int) -> list[Step]:
        """The turn's retriever, model and tool calls as steps: finished ones, then the ones still
        open when it closed (the assembler records those as unfinished, ending at *now*)."""
        capture = self.recorder.capture_content
        steps: list[Step] = []
        for child in (*turn.finished, *turn.open_children.values()):
            ended_at, error = step_end(child.ended_at, child.error, now)
            run_id = child.key
            if isinstance(child, _OpenRetrieval):
                record: Any = Retrieval(name=child.name, documents=_convert_documents(child.documents),
                                        query=child.query, started_at=child.started_at, ended_at=ended_at,
                                        error=error)
                steps.append(Step(run_id, child.parent, child.seq, record))
                continue
            if isinstance(child, _OpenTool):
                text, documents, call_id, tool_error = _read_tool_output(child.output, child.call_id, child.name)
                record = ToolCall(name=child.name, call_id=call_id,
                                  arguments=input_text(child.input) if capture else None,
                                  output=text if child.ended_at is not None else None,
                                  started_at=child.started_at, ended_at=ended_at, error=error or tool_error)
                steps.append(Step(run_id, child.parent, child.seq, record, documents))
                continue
            text = input_tokens = output_tokens = response_model = None
            if child.response is not None and error is None:
                text, input_tokens, output_tokens, response_model = _read_llm_result(child.response)
            steps.append(Step(run_id, child.parent, child.seq, Generation(
                model=child.model or response_model,
                prompt=_prompt_text(child.prompt) if capture and child.ended_at is not None else None,
                messages=_prompt_messages(child.prompt) if capture and child.ended_at is not None else (),
                output=text, input_tokens=input_tokens, output_tokens=output_tokens,
                started_at=child.started_at, ended_at=ended_at, error=error, provider=child.provider,
            )))
        return steps

    def _close(self, turn: _Turn, now: int, evicted: bool) -> None:
        """On the closing thread: read the turn into the assembler's parts; it does the rest."""
        parts = TurnParts(turn_id=str(turn.run_id), framework=FRAMEWORK,
                          root_kind=_ROOT_KINDS.get(turn.kind, "chain"), started_at=turn.started_at,
                          ended_at=now, query=turn.query, answer=turn.answer, error=turn.error,
                          evicted_at=self._store.max_runs if evicted else None, tags=turn.metadata,
                          metadata={"run_name": turn.name} if turn.name else {})
        try:
            parts.steps = self._steps(turn, now)
            parts.parents = turn.parents
            parts.messages = _messages_of(turn.conversation) or ()
            parts.prompt_messages = _messages_of(turn.prompt) or ()
            parts.history = _messages_of(turn.history) or ()
        except Exception as exc:
            report_failure("reading a LangChain turn", exc)
            parts.error = f"ragaudit could not read this turn: {exc}"
        close_turn(parts, self.recorder, self.auditor, parent=turn.context, measures=self.turn_measures)

    # -- chains ---------------------------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            name = kwargs.get("name")
            if not isinstance(name, str) and isinstance(serialized, Mapping):
                name = serialized.get("name")
            self._start(run_id, parent_run_id, "chain", name, inputs, metadata, None, time.time_ns())
        except Exception as exc:
            report_failure("on_chain_start", exc)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        try:
            self._end(run_id, outputs=outputs, inputs=kwargs.get("inputs"))
        except Exception as exc:
            report_failure("on_chain_end", exc)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:
        try:
            self._end(run_id, inputs=kwargs.get("inputs"), error=error)
        except Exception as exc:
            report_failure("on_chain_error", exc)

    # -- retrievers -----------------------------------------------------------------------------

    def on_retriever_start(self, serialized: dict[str, Any] | None, query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            now = time.time_ns()
            name = _retriever_name(serialized, metadata, kwargs.get("name"))
            text = query if isinstance(query, str) else None
            self._start(run_id, parent_run_id, "retriever", name, text, metadata,
                        _OpenRetrieval(name, text, now), now)
        except Exception as exc:
            report_failure("on_retriever_start", exc)

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, parent_run_id: UUID | None = None,
                         **kwargs: Any) -> None:
        try:
            now = time.time_ns()
            try:
                snapshot = _snapshot_documents(documents)
            except Exception as exc:  # still end the run, or its turn would never close
                report_failure("reading a retriever's documents", exc)
                self._end(run_id, error=exc, now=now)
                return
            self._end(run_id, documents=snapshot, now=now)
        except Exception as exc:
            report_failure("on_retriever_end", exc)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kwargs: Any) -> None:
        try:
            self._end(run_id, error=error, now=time.time_ns())
        except Exception as exc:
            report_failure("on_retriever_error", exc)

    # -- models ---------------------------------------------------------------------------------

    def _start_model(self, prompt: Any, run_id: UUID, parent_run_id: UUID | None,
                     metadata: dict[str, Any] | None, kwargs: dict[str, Any]) -> None:
        now = time.time_ns()
        provider = metadata.get("ls_provider") if metadata else None
        child = _OpenGeneration(_model_name(kwargs.get("invocation_params"), metadata),
                                provider if isinstance(provider, str) else None, prompt, now)
        name = kwargs.get("name")
        self._start(run_id, parent_run_id, "llm", name if isinstance(name, str) else child.model,
                    prompt, metadata, child, now)

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]], *,
                            run_id: UUID, parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            self._start_model(messages[0] if messages else [], run_id, parent_run_id, metadata, kwargs)
        except Exception as exc:
            report_failure("on_chat_model_start", exc)

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            self._start_model(list(prompts[:1]), run_id, parent_run_id, metadata, kwargs)
        except Exception as exc:
            report_failure("on_llm_start", exc)

    def on_llm_end(self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        try:
            self._end(run_id, response=response, now=time.time_ns())
        except Exception as exc:
            report_failure("on_llm_end", exc)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        try:
            self._end(run_id, error=error, now=time.time_ns())
        except Exception as exc:
            report_failure("on_llm_error", exc)

    # -- tools (steps of an agent's turn; never a turn of their own) ----------------------------------

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        try:
            if parent_run_id is not None:
                now = time.time_ns()
                name = kwargs.get("name")
                if not isinstance(name, str) and isinstance(serialized, Mapping):
                    name = serialized.get("name")
                call_id = kwargs.get("tool_call_id")
                inputs = kwargs.get("inputs")
                tool = _OpenTool(name if isinstance(name, str) and name else "tool",
                                 call_id if isinstance(call_id, str) and call_id else None,
                                 inputs if inputs is not None else input_str, now)
                self._start(run_id, parent_run_id, None, None, None, None, tool, now)
        except Exception as exc:
            report_failure("on_tool_start", exc)

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                    **kwargs: Any) -> None:
        try:
            self._end(run_id, outputs=output, now=time.time_ns())
        except Exception as exc:
            report_failure("on_tool_end", exc)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                      **kwargs: Any) -> None:
        try:
            self._end(run_id, error=error, now=time.time_ns())
        except Exception as exc:
            report_failure("on_tool_error", exc)

    def __repr__(self) -> str:
        return f"RagAuditCallbackHandler(auditor={self.auditor!r})"


# --- process-wide registration -----------------------------------------------------------------------


def _is_foreign_parent(parent_run_id: UUID | None) -> bool:
    """Whether *parent_run_id* is the LangSmith run the chain was called under (a ``@traceable``
    function), which LangChain gives as the root's parent: such a root is a turn."""
    try:
        from langsmith.run_helpers import get_tracing_context

        parent = get_tracing_context().get("parent")
    except Exception:  # no langsmith, or a version without it
        return False
    return parent is not None and getattr(parent, "id", None) == parent_run_id


class _ProcessWideHandler:
    """What LangChain's configure hook reads in place of a ContextVar: ``get()`` returns the handler.

    A ContextVar set by :func:`instrument` would be invisible to threads started afterwards with
    ``threading.Thread`` or a plain ``ThreadPoolExecutor`` (they begin with an empty context), and
    to asyncio tasks created before; this answers the same in every thread and task.
    """

    def __init__(self) -> None:
        self.handler: RagAuditCallbackHandler | None = None

    def get(self, default: Any = None) -> RagAuditCallbackHandler | None:
        handler = self.handler
        return handler if handler is not None else default


_registration_lock = _fork.lock()
_process_handler = _ProcessWideHandler()
_hook_registered = False


_last: tuple[dict[str, Any], RagAuditCallbackHandler] | None = None  # the last instrument()'s


def _same_kwargs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] or (type(a[k]) in (bool, int, float, str, type(None))
                                                         and a[k] == b[k]) for k in a)


def instrument(**handler_kwargs: Any) -> RagAuditCallbackHandler:
    """Audit every LangChain run in the process: one :class:`RagAuditCallbackHandler` is added to
    every callback manager LangChain configures (its configure hook, inheritable).

    *handler_kwargs* go to the handler (``judge``, ``auditor``, ``tracer_provider``, ...); returns
    it. Idempotent: called again with the same arguments (the same objects), also after
    :func:`uninstrument`, it installs and returns the same handler; with other arguments it
    replaces it. Safe while chains run: a run that started before (or while uninstrumented) is
    not audited, not even its later steps; one that started under a handler finishes as one turn
    with it. Do not also pass a handler in ``config`` (that would record each turn twice). Undo
    with :func:`uninstrument`.
    """
    global _hook_registered, _last
    with _registration_lock:
        last = _last
    if last is not None and _same_kwargs(last[0], handler_kwargs):
        handler = last[1]
    else:
        handler = RagAuditCallbackHandler(**handler_kwargs)
        handler._process_wide = True
    with _registration_lock:
        _last = (dict(handler_kwargs), handler)
        if not _hook_registered:
            from langchain_core.tracers.context import register_configure_hook

            register_configure_hook(cast("ContextVar[Any]", _process_handler), True)
            _hook_registered = True
        _process_handler.handler = handler
    return handler


def uninstrument() -> RagAuditCallbackHandler | None:
    """Stop auditing runs that start from now on; returns the handler that was installed, if any.

    Idempotent. Runs already in flight finish with the handler they started with.
    """
    with _registration_lock:
        handler, _process_handler.handler = _process_handler.handler, None
    return handler
