"""LangChain integration: one callback handler makes every chain run an audited, traced turn.

>>> from ragaudit.integrations.langchain import RagAuditCallbackHandler
>>> chain.invoke(question, config={"callbacks": [RagAuditCallbackHandler()]})

or, for every chain in the process, [`instrument`][ragaudit.integrations.langchain.instrument]. Each root run (the
outermost chain, or a retriever or chat model called on its own) becomes one [`RagTurn`][ragaudit.RagTurn]: its
question, the documents its retrievers returned, its answer and the citations in it, every retriever and
model call as a child span, judged in the background by an [`Auditor`][ragaudit.Auditor].
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from functools import wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from .. import _fork, _lifecycle
from ..auditor import DEFAULT_TURN_MEASURES, Auditor
from ..errors import ConfigurationError
from ._common import RunStore, current_context, report_failure, resolve_backend
from ._langchain_stores import SearchObserver, outside_searches, patch_vector_stores
from ._langchain_turns import Child, OpenGeneration, OpenPrompt, OpenRetrieval, OpenTool, Turn, is_prompt, turn_steps
from ._langchain_values import (
    RawDoc,
    answer_from,
    conversation_of,
    error_text,
    history_of,
    is_mapping,
    model_name,
    query_from,
    readable,
    retriever_name,
    snapshot_documents,
    structured_of,
)
from ._source import TurnSource

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ..judges.base import RagJudge

__all__ = ["RagAuditCallbackHandler", "instrument", "uninstrument"]

FRAMEWORK = "langchain"

_H = TypeVar("_H", bound="RagAuditCallbackHandler")
_P = ParamSpec("_P")


def _guarded(event: Callable[Concatenate[_H, _P], None]) -> Callable[Concatenate[_H, _P], None]:
    """The one guard of every callback: a failure inside the handler is logged (rate-limited) under the
    callback's name and never reaches the chain. One forwarding call per event, nothing else."""
    name = event.__name__

    @wraps(event)
    def callback(self: _H, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            event(self, *args, **kwargs)
        except Exception as exc:
            report_failure(name, exc)

    return callback


class RagAuditCallbackHandler(TurnSource, BaseCallbackHandler, SearchObserver):
    """A LangChain callback handler that turns each root run into an audited [`RagTurn`][ragaudit.RagTurn].

    Pass it in ``config={"callbacks": [handler]}`` (or use [`instrument`][ragaudit.integrations.langchain.instrument]).
    One handler can serve any number of concurrent runs (invoke, ainvoke, batch, abatch, stream, astream,
    astream_events); events are grouped by their root run. A turn closes when its root run has
    ended and all its child runs have too (a stream abandoned by its consumer ends the root first),
    or at once when the root fails. At close the handler hands what it read to the turn assembler
    (`ragaudit.integrations._assembler`), which applies the turn rules shared by every
    integration: what is judged, what is only traced and counted.

    * Question: the root's input (a string, a message, a dict's ``question``/``input``/``query``/
      ``q``); for an agent's ``{"messages": [...]}``, the user's last message in any form
      (message object, ``(role, text)`` tuple, ``{"role", "content"}`` dict, string, content
      blocks); for a stream it arrives when the root ends.
    * Answer: the root's output (a string, a message, a dict's ``answer``/``output``/``result``/
      ``text`` as ``create_retrieval_chain`` returns, the last AI message of a dict's ``messages``);
      else the text of the last model call (also for a stream abandoned before its end).
    * Evidence: what reached the model call that produced the answer (the assembler's rule): of the
      documents of every *outermost* retriever run (a retriever inside another, as in compression,
      multi-query or ensemble retrievers, is a child span only), every vector-store search
      (``similarity_search*``, ``max_marginal_relevance_search*`` and their async forms, run in a
      middleware, a node or a tool: constructing a handler wraps them once per process) and every
      tool output (a ``ToolMessage``'s artifact documents, else its text as a document with source =
      tool name and id = tool call id), those whose text is in that call's input, in start order,
      each id once, ranked 1..n; ids per ``Document.id``, metadata ``id``/``doc_id``, else a hash of
      source and content; the score from metadata ``score``/``relevance_score``/``_distance``. A
      prompt template's values tell the assembler what context a prompt held.
    * Structured answers (``with_structured_output(CitedAnswer)``): the text field is the answer
      (*answer_field*), its cited source ids or indices are citations.
    * History: a chain input's ``chat_history``/``history`` (``RunnableWithMessageHistory``), the
      earlier messages of an agent's input, else of its first model call (a checkpointer's
      conversation); the standalone question is the first outermost retrieval's query when it
      differs from the question.
    * Ground truth: ``config={"metadata": {"ragaudit_relevant_ids": [...]}}`` (ids, or
      ``{id: label}``) puts *turn_measures* (recall, precision, MRR, NDCG) on the turn span;
      ``"ragaudit_reference_answer"`` goes to the turn's ``metadata["reference_answer"]``.

    Args:
        judge: the judge of the [`Auditor`][ragaudit.Auditor] this handler submits to: one per judge
            object, shared by every handler given the same judge and released with the last of
            them. Give *judge* or *auditor*, not both.
        auditor: the auditor to submit turns to. With neither, the process-wide default auditor
            (default judge, shared by every such handler whatever its other arguments) is used.
        tracer_provider, capture_content, redact: how this handler's turns are recorded
            (``capture_content`` None: on unless
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=NO_CONTENT``): its turn spans, and
            each turn's judge span, audit-log line and exporter payloads
            ([`recorder_for`][ragaudit.Auditor.recorder_for]; with an auditor given content settings of its
            own, the stricter of both). When none is given, the auditor's recorder is used.
        max_runs: at most this many turns are tracked at once; beyond it the oldest open turn is
            ended as an error span (``stats()["evicted"]``), so a leak cannot grow without bound.
        turn_measures: retrieval metrics put on the turn span when ground truth is known.
        answer_field: the text field of a structured answer (default: ``answer``, else its one
            string field).

    The handler never raises into the chain: a failure inside it is logged (rate-limited) on the
    ``ragaudit`` logger. On the chain's thread it only keeps the raw events (a dictionary update
    under a short lock per event); when a turn closes it hands them to the closing thread above
    the auditor ([`ragaudit.integrations.closer_for`][ragaudit.integrations.closer_for]), which builds the turn, finds
    its citations, records its spans with the times the events happened and submits it.
    [`force_flush`][ragaudit.integrations.langchain.RagAuditCallbackHandler.force_flush] waits for that too. With an
    inline auditor (``mode="inline"``) the turn is closed and judged before the run returns.
    """

    raise_error: bool = False
    # Called directly in async runs too (not via the default executor): keeps each run's events
    # in order, costs no thread hop, and the callbacks never block.
    run_inline: bool = True

    def __init__(
        self,
        judge: RagJudge | None = None,
        auditor: Auditor | None = None,
        tracer_provider: TracerProvider | None = None,
        capture_content: bool | None = None,
        *,
        max_runs: int = 10_000,
        redact: Callable[[str], str] | None = None,
        turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES,
        answer_field: str | None = None,
    ) -> None:
        if answer_field is not None and (not isinstance(answer_field, str) or not answer_field):
            raise ConfigurationError(f"answer_field must be a field name (a non-empty string), got {answer_field!r}")
        self.answer_field = answer_field
        self._store: RunStore[Turn] = RunStore(max_runs)  # keyed by run_id.int
        backend, recorder = resolve_backend(judge, auditor, tracer_provider, capture_content, redact,
                                            owner="RagAuditCallbackHandler")
        # The source base: hand-off, closing, force_flush, registration for shutdown.
        TurnSource.__init__(self, backend, recorder, turn_measures=turn_measures)
        self._process_wide = False  # set by instrument(): see _start
        patch_vector_stores()  # once per process: searches in middleware, nodes and tools are retrievals

    # -- public helpers -------------------------------------------------------------------------

    def close_ended_turns(self) -> int:
        """Close every turn whose root run has ended but a child run has not (a hung tool thread, a
        lost callback); the open children are recorded as unfinished. Also run by the closer's
        shutdown and at exit, before the Auditor's. Returns how many turns were closed."""
        with self._store.lock:
            ended = self._store.pop_ended()
            self.closed_turns += len(ended)
        for turn in ended:
            self._hand_off(turn)
        return len(ended)

    def stats(self) -> dict[str, int]:
        """``open_turns`` (in flight now), ``closed_turns`` and ``evicted`` (ended early at *max_runs*)."""
        with self._store.lock:
            return {"open_turns": len(self._store), "closed_turns": self.closed_turns,
                    "evicted": self._store.evicted}

    # -- bookkeeping ----------------------------------------------------------------------------

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        kind: str | None,
        name: str | None,
        question: object,
        metadata: Mapping[str, object] | None,
        child: Child | None,
        now: int,
    ) -> None:
        """Register a run. *kind* (chain, retriever, llm) None means it never starts a turn (tools)."""
        # UUIDs hash in Python code; their 128-bit ints hash in C, and every event does a few lookups.
        key = run_id.int
        parent = parent_run_id.int if parent_run_id is not None else None

        def new_turn() -> Turn:
            # A server may have replaced ragaudit's SIGTERM handler in this worker (the first turn only).
            _lifecycle.keep_sigterm_handler()
            # A root under a parent we never saw (e.g. a LangSmith @traceable) is a turn too.
            return Turn(run_id, key, kind or "chain", now, name, readable(query_from, question, "question"),
                         metadata, current_context(),
                         readable(conversation_of, question, "messages") if kind == "chain" else None,
                         outside=outside_searches())

        store = self._store
        with store.lock:
            if kind and parent is not None and self._process_wide and store.state_of(parent) is None \
                    and not _is_foreign_parent(parent_run_id):
                # The process-wide handler is in every callback manager configured since
                # instrument(): a LangChain parent it never saw started before that (or while
                # uninstrumented), and its child runs are steps of that run, not turns of their own.
                kind = None
            turn, is_root, evicted = store.start(key, parent, new_turn if kind else None)
            self.closed_turns += len(evicted)
            if turn is not None:
                if not is_root:
                    turn.parents[key] = parent
                if child is not None:
                    child.seq = turn.seq
                    child.key = key
                    child.parent = None if is_root else parent
                    turn.seq += 1
                    turn.open_children[key] = child
                if kind == "chain" and turn.history is None:
                    turn.history = readable(history_of, question, "chat history")
        for old in evicted:
            self._hand_off(old, evicted=True)

    def _end(
        self,
        run_id: UUID,
        *,
        outputs: object = None,
        inputs: object = None,
        error: BaseException | None = None,
        documents: tuple[RawDoc, ...] = (),
        response: object = None,
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
            turn.ended = turn.ended or is_root
            try:
                child = turn.open_children.pop(key, None)
                if child is not None:
                    child.ended_at = now or time.time_ns()
                    if error is not None:
                        child.error = error_text(error)
                    elif isinstance(child, OpenRetrieval):
                        child.documents = documents
                    elif isinstance(child, OpenTool):
                        child.output = outputs
                    elif isinstance(child, OpenGeneration):
                        child.response = response
                    turn.finished.append(child)
                if is_root:
                    if turn.query is None and inputs is not None:
                        turn.query = query_from(inputs)
                        if turn.conversation is None and turn.kind == "chain":
                            turn.conversation = conversation_of(inputs)
                    if error is not None:
                        turn.error = error_text(error)
                    else:
                        turn.answer = answer_from(outputs)
                        turn.structured = structured_of(outputs)
            except Exception as exc:  # an unreadable value must not leave the run, and its turn, open
                report_failure("reading the end of a run", exc)
            turn, complete = store.end(key, force=is_root and error is not None)
            if complete:
                self.closed_turns += 1
        if complete and turn is not None:
            self._hand_off(turn)

    # -- closing --------------------------------------------------------------------------------

    def _hand_off(self, turn: Turn, *, evicted: bool = False) -> None:
        """On the host's thread, once the turn is out of the run store (no event can touch it any more; the
        caller counted it closed): leave it to the closing thread, which reads its steps
        (`ragaudit.integrations._langchain_turns`) into the assembler."""
        evicted_at = self._store.max_runs if evicted else None
        self.hand_off(str(turn.run_id), lambda now: turn_steps(turn, now, evicted_at), root_id=turn.run_id,
                      framework=FRAMEWORK, parent=turn.context, retrieval_outside=outside_searches() > turn.outside,
                      answer_field=self.answer_field)

    # -- chains (each callback goes through the one guard, _guarded) -------------------------------

    @_guarded
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: object, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        name = kwargs.get("name")
        if not isinstance(name, str) and is_mapping(serialized):
            name = serialized.get("name")
        now = time.time_ns()
        # A prompt template's run: the values it fills in tell the assembler what context reached the model.
        child = OpenPrompt(inputs, now) if parent_run_id is not None and is_prompt(serialized, name) else None
        self._start(run_id, parent_run_id, "chain", name, inputs, metadata, child, now)

    @_guarded
    def on_chain_end(self, outputs: object, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._end(run_id, outputs=outputs, inputs=kwargs.get("inputs"))

    @_guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:
        self._end(run_id, inputs=kwargs.get("inputs"), error=error)

    # -- retrievers -----------------------------------------------------------------------------

    @_guarded
    def on_retriever_start(self, serialized: dict[str, Any] | None, query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        now = time.time_ns()
        name = retriever_name(serialized, metadata, kwargs.get("name"))
        text = query if isinstance(query, str) else None
        self._start(run_id, parent_run_id, "retriever", name, text, metadata, OpenRetrieval(name, text, now), now)

    @_guarded
    def on_retriever_end(self, documents: Sequence[object], *, run_id: UUID, parent_run_id: UUID | None = None,
                         **kwargs: Any) -> None:
        now = time.time_ns()
        try:
            snapshot = snapshot_documents(documents)
        except Exception as exc:  # still end the run, or its turn would never close
            report_failure("reading a retriever's documents", exc)
            self._end(run_id, error=exc, now=now)
            return
        self._end(run_id, documents=snapshot, now=now)

    @_guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kwargs: Any) -> None:
        self._end(run_id, error=error, now=time.time_ns())

    # -- models ---------------------------------------------------------------------------------

    def _start_model(self, prompt: object, run_id: UUID, parent_run_id: UUID | None,
                     metadata: Mapping[str, object] | None, kwargs: Mapping[str, object]) -> None:
        now = time.time_ns()
        provider = metadata.get("ls_provider") if metadata else None
        child = OpenGeneration(model_name(kwargs.get("invocation_params"), metadata),
                               provider if isinstance(provider, str) else None, prompt, now)
        name = kwargs.get("name")
        self._start(run_id, parent_run_id, "llm", name if isinstance(name, str) else child.model,
                    prompt, metadata, child, now)

    @_guarded
    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]], *,
                            run_id: UUID, parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start_model(messages[0] if messages else [], run_id, parent_run_id, metadata, kwargs)

    @_guarded
    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start_model(list(prompts[:1]), run_id, parent_run_id, metadata, kwargs)

    @_guarded
    def on_llm_end(self, response: object, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        self._end(run_id, response=response, now=time.time_ns())

    @_guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._end(run_id, error=error, now=time.time_ns())

    # -- tools (steps of an agent's turn; never a turn of their own) ----------------------------------

    @_guarded
    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            return
        now = time.time_ns()
        name = kwargs.get("name")
        if not isinstance(name, str) and is_mapping(serialized):
            name = serialized.get("name")
        call_id = kwargs.get("tool_call_id")
        inputs = kwargs.get("inputs")
        tool = OpenTool(name if isinstance(name, str) and name else "tool",
                        call_id if isinstance(call_id, str) and call_id else None,
                        inputs if inputs is not None else input_str, now)
        self._start(run_id, parent_run_id, None, None, None, None, tool, now)

    @_guarded
    def on_tool_end(self, output: object, *, run_id: UUID, parent_run_id: UUID | None = None,
                    **kwargs: Any) -> None:
        self._end(run_id, outputs=output, now=time.time_ns())

    @_guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                      **kwargs: Any) -> None:
        self._end(run_id, error=error, now=time.time_ns())

    # -- vector-store searches (SearchObserver: reported by the wrapped VectorStore methods) ----------

    def search_started(self, parent_run_id: UUID, name: str, query: str | None) -> UUID | None:
        now = time.time_ns()
        parent = parent_run_id.int
        with self._store.lock:
            turn = self._store.state_of(parent)
            if turn is None:
                return None
            for child in turn.open_children.values():
                if isinstance(child, OpenRetrieval) and child.parent == parent:
                    return None  # a retriever running under the same run: this is its own search
        run_id = uuid4()
        self._start(run_id, parent_run_id, None, None, None, None, OpenRetrieval(name, query, now), now)
        return run_id

    def search_ended(self, run_id: UUID, documents: Sequence[object] | None, error: BaseException | None) -> None:
        now = time.time_ns()
        if error is not None or documents is None:
            self._end(run_id, error=error or RuntimeError("the search returned nothing readable"), now=now)
        else:
            self._end(run_id, documents=snapshot_documents(documents), now=now)

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

    A ContextVar set by [`instrument`][ragaudit.integrations.langchain.instrument] would be invisible to threads started
    afterwards with ``threading.Thread`` or a plain ``ThreadPoolExecutor`` (they begin with an empty context), and
    to asyncio tasks created before; this answers the same in every thread and task.
    """

    def __init__(self) -> None:
        self.handler: RagAuditCallbackHandler | None = None

    def get(self, default: RagAuditCallbackHandler | None = None) -> RagAuditCallbackHandler | None:
        handler = self.handler
        return handler if handler is not None else default


_registration_lock = _fork.lock()
_process_handler = _ProcessWideHandler()
_hook_registered = False


_last: tuple[dict[str, Any], RagAuditCallbackHandler] | None = None  # the last instrument()'s


def _same_kwargs(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] or (type(a[k]) in (bool, int, float, str, type(None))
                                                         and a[k] == b[k]) for k in a)


def instrument(**handler_kwargs: Any) -> RagAuditCallbackHandler:
    """Audit every LangChain run in the process: one
    [`RagAuditCallbackHandler`][ragaudit.integrations.langchain.RagAuditCallbackHandler] is added to every callback
    manager LangChain configures (its configure hook, inheritable).

    *handler_kwargs* go to the handler (``judge``, ``auditor``, ``tracer_provider``, ...); returns
    it. Idempotent: called again with the same arguments (the same objects), also after
    [`uninstrument`][ragaudit.integrations.langchain.uninstrument], it installs and returns the same handler; with other
    arguments it replaces it. Safe while chains run: a run that started before (or while uninstrumented) is
    not audited, not even its later steps; one that started under a handler finishes as one turn
    with it. Do not also pass a handler in ``config`` (that would record each turn twice). Undo
    with [`uninstrument`][ragaudit.integrations.langchain.uninstrument].
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
