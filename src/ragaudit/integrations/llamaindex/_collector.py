"""The collector: groups LlamaIndex runs into turns and hands each finished one to the assembler."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from ... import _fork, _lifecycle
from ...auditor import Auditor
from ...errors import ConfigurationError
from .._common import RunStore, current_context, report_failure, resolve_backend
from .._source import TurnSource
from ._state import STREAM_TURN, Generating, Retrieving, RootInfo, Tooling, Turn
from ._streams import AsyncStreamTap, StreamTap, stream_closer
from ._turn_steps import settle, steps_of
from ._values import (
    CHAT_WRITE_METHODS,
    FRAMEWORK,
    UNSET,
    WORKFLOW_QUERY_KEYS,
    error_text,
    output_of,
    provider_of,
    query_text,
    snapshot,
    source_nodes_of,
    span_name,
    stop_result,
    tool_calls_of,
    usage_of,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ...judges.base import RagJudge

__all__ = ["Collector"]

_ENDED_KEPT = 4096  # ended dispatcher spans outside turns remembered as parents (see Collector.outside)


class Collector(TurnSource):
    """Groups LlamaIndex runs (dispatcher spans or legacy callback events) into turns and closes them: LlamaIndex's
    [`TurnSource`][ragaudit.integrations.TurnSource].

    Shared by the span/event handlers of [`instrument`][ragaudit.integrations.llamaindex.instrument] and by
    [`RagAuditLlamaIndexHandler`][ragaudit.integrations.llamaindex.RagAuditLlamaIndexHandler]. On the host's thread it
    only updates dictionaries under the store lock (callers catch what it raises); a finished turn is built, traced and
    submitted on the auditor's closing thread (`TurnSource.hand_off`).
    """

    def __init__(
        self,
        judge: RagJudge | None,
        auditor: Auditor | None,
        tracer_provider: TracerProvider | None,
        capture_content: bool | None,
        redact: Callable[[str], str] | None,
        max_runs: int,
        turn_measures: Sequence[str],
        owner: str,
        query_key: str | None = None,
    ) -> None:
        if query_key is not None and (not isinstance(query_key, str) or not query_key):
            raise ConfigurationError(f"query_key must be a StartEvent field name (a non-empty str), got {query_key!r}")
        # Where a workflow run's question is in its StartEvent: the configured field first.
        self.query_keys = WORKFLOW_QUERY_KEYS if query_key is None else (query_key, *WORKFLOW_QUERY_KEYS)
        backend, recorder = resolve_backend(judge, auditor, tracer_provider, capture_content, redact, owner=owner)
        self.store: RunStore[Turn] = RunStore(max_runs)
        # Re-entrant: LlamaIndex dispatches events from generator finalizers, which the garbage
        # collector may run on this thread while it is inside one of our own critical sections.
        self.store.lock = _fork.rlock()  # type: ignore[assignment]
        # The source base: hand-off, closing, force_flush, registration for shutdown. close_ended_turns is the
        # base's (none): a turn whose root ended with a run still open is a stream being read, not a lost event.
        super().__init__(backend, recorder, turn_measures=turn_measures)
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

    def start_run(self, run_id: str, parent_id: str | None, root: RootInfo | None,
                  now: int) -> Turn | None:
        """Register a run; returns its turn (None: not part of any turn). *root* describes the turn
        it starts when its parent is not in one."""
        store = self.store
        evicted: list[Turn] = []
        ignored = drained = False
        with store.lock:
            turn = store.state_of(parent_id) if parent_id is not None else None
            if turn is None:
                stream = STREAM_TURN.get()
                streaming = stream[1] if stream is not None and stream[0] is self else None
                if streaming is not None and store.state_of(streaming.root_id) is streaming:
                    parent_id = streaming.root_id
                elif not self.accepting:  # uninstrumented: only the turns already open go on
                    ignored, drained = True, not store
                else:
                    ignored = not self._may_start(run_id, parent_id, root)
            if not ignored:
                kind, name, query, tags = root if root is not None else ("", "", None, None)

                def new_turn() -> Turn:
                    _lifecycle.keep_sigterm_handler()  # a server may have replaced it (the first turn only)
                    return Turn(run_id, kind, name, now, query, tags, context=current_context())

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

    def _may_start(self, run_id: str, parent_id: str | None, root: RootInfo | None) -> bool:
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

    def end_run(self, run_id: str, *, result: object = None, error: BaseException | str | None = None,
                instance: object = None) -> None:
        """Register the end of a run; close its turn when this completes it."""
        store = self.store
        tap: StreamTap | AsyncStreamTap | None = None
        with store.lock:
            turn = store.state_of(run_id)
            if turn is None:
                outside = self.outside
                if outside is not None and outside.pop(run_id, UNSET) is not UNSET:
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
                    retrieving.error = error_text(error)
            tooling = turn.tools.get(run_id)
            if tooling is not None and tooling.ended_at is None:
                tooling.ended_at = now
                if error is not None:
                    tooling.error = error_text(error)
                else:
                    tooling.output = getattr(result, "tool_output", None)
            generating = turn.generations.get(run_id)
            if generating is not None and error is not None and generating.error is None:
                generating.error = error_text(error)
                generating.ended_at = now
            if is_root:
                if error is not None:
                    turn.error = error_text(error)
                else:
                    turn.result = result = stop_result(result) if turn.kind == "workflow" else result
                    tap = self._watch_stream(turn, result)
            elif instance is not None and isinstance(instance, StreamingAgentChatResponse) \
                    and span_name(run_id).rpartition(".")[2] in CHAT_WRITE_METHODS:
                turn.chat_written = True
                if error is not None and turn.error is None:
                    turn.error = error_text(error)
                if turn.stream_run is not None:
                    store.end(turn.stream_run)
            turn, complete = store.end(run_id, force=is_root and error is not None)
        if tap is not None:
            tap.install()
        if complete and turn is not None:
            self._hand_off(turn)

    def _watch_stream(self, turn: Turn, result: object) -> StreamTap | AsyncStreamTap | None:
        """Keep the turn open past its root while the answer is still streaming (lock held).

        A stream wrapper holds no reference back to its response and the turn keeps only the
        response's source nodes, so a response its consumer drops can be collected (and the turn
        closed as abandoned).
        """
        if isinstance(result, (StreamingResponse, AsyncStreamingResponse)):
            nodes = source_nodes_of(result)
            turn.sources = snapshot(nodes) if nodes is not None else None
            turn.result = turn.hint = None
        if isinstance(result, StreamingResponse) and result.response_txt is None \
                and result.response_gen is not None:
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
            return StreamTap(self, turn, result)
        if isinstance(result, AsyncStreamingResponse) and result.response_txt is None \
                and result.response_gen is not None:
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
            return AsyncStreamTap(self, turn, result)
        if isinstance(result, StreamingAgentChatResponse) and not turn.chat_written and (
                result.chat_stream is not None or result.achat_stream is not None):
            # The engine writes the stream to memory in a thread / task it has just started, whose
            # span may not have begun yet: wait for that write to end.
            turn.stream_run = f"{turn.root_id}#stream"
            self.store.start(turn.stream_run, turn.root_id, _never)
        return None

    def stream_ended(self, turn: Turn, text: str, state: str, error: BaseException | None,
                     deferred: bool = False) -> None:
        """A wrapped stream finished (``consumed``), failed (``error``) or was dropped (``abandoned``)."""
        if deferred:
            stream_closer.put(lambda: self.stream_ended(turn, text, state, error))
            return
        store = self.store
        with store.lock:
            turn.streamed = text
            turn.stream_state = state
            if error is not None:
                failure = error_text(error)
                turn.error = turn.error or failure
                now = time.time_ns()
                for generating in turn.generations.values():  # the model call the stream was reading
                    if generating.ended_at is None:
                        generating.error, generating.ended_at = generating.error or failure, now
            closing, complete = store.end(turn.stream_run) if turn.stream_run else (None, False)
        if complete and closing is not None:
            self._hand_off(closing)

    # -- retrievals, generations and tool calls -----------------------------------------------------

    def tool_started(self, run_id: str, bound_args: object, now: int) -> None:
        """A workflow agent's ``call_tool`` step began: its ``ToolCall`` event names the tool."""
        arguments = getattr(bound_args, "arguments", None)
        event = arguments.get("ev") if isinstance(arguments, Mapping) else None
        name = getattr(event, "tool_name", None)
        call_id = getattr(event, "tool_id", None)
        if not isinstance(name, str):  # a workflow's own step that happens to be called call_tool
            return
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None:
                turn.tools[run_id] = Tooling(turn.next_seq(), name,
                                              call_id if isinstance(call_id, str) and call_id else None,
                                              getattr(event, "tool_kwargs", None), now)

    def conversation_seen(self, run_id: str, messages: object) -> None:
        """An agent's model call: its first one's messages hold the conversation so far."""
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and turn.kind == "agent" and turn.prompt is None \
                    and isinstance(messages, (list, tuple)):
                turn.prompt = list(messages)


    def retrieval_started(self, run_id: str, name: str, query: object, now: int) -> None:
        with self.store.lock:
            retrieving = self._retrieval(run_id, name, now)
            if retrieving is not None and retrieving.query is None:
                retrieving.query = query_text(query)

    def retrieval_ended(self, run_id: str, nodes: object, now: int) -> None:
        pairs = snapshot(nodes)
        with self.store.lock:
            retrieving = self._retrieval(run_id, "retriever", now)
            if retrieving is not None:
                retrieving.nodes = pairs
                retrieving.ended_at = now

    def _retrieval(self, run_id: str, name: str, now: int) -> Retrieving | None:
        """The retrieval of run *run_id* (store lock held), begun now as *name* when its start was not seen; None
        outside every turn."""
        turn = self.store.state_of(run_id)
        if turn is None:
            return None
        retrieving = turn.retrievals.get(run_id)
        if retrieving is None:
            retrieving = turn.retrievals[run_id] = Retrieving(turn.next_seq(), name, None, now)
        return retrieving

    def generation_started(self, turn: Turn, run_id: str, outer: str | None, now: int,
                           caller: object = None) -> None:
        """Register a model call inside *outer* (a model call, or None); call with the lock held.

        A call whose parent is no model call was made lazily by a stream: with no parent span at all
        (an async stream over a sync one), or under the span of the stream's consumer (an agent's
        ``astream_chat_with_tools`` returns at once; its ``astream_chat`` runs as the agent reads):
        it belongs to the unfinished call of the same LLM object, if there is one, not a second one.
        """
        key = turn.llm_key.get(outer) if outer is not None else None
        caller_id = id(caller) if caller is not None else 0
        if key is None and caller_id:
            key = next((k for k, g in turn.generations.items() if g.caller == caller_id and g.ended_at is None), None)
        if key is None:
            key = run_id
        turn.llm_key[run_id] = key
        if key not in turn.generations:
            turn.generations[key] = Generating(turn.next_seq(), now, caller=caller_id,
                                                provider=provider_of(caller) if caller is not None else None)

    def model_called(self, run_id: str, model: str | None, prompt: str | None, now: int,
                     messages: tuple[tuple[str, str], ...] = (), provider: str | None = None) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            generating = self._generating(turn, run_id, now)
            if generating.model is None:
                generating.model = model
            if generating.provider is None:  # no span start saw the LLM object (legacy callbacks)
                generating.provider = provider
            if generating.prompt is None:  # in full: the evidence is matched against it (the assembler
                generating.prompt = prompt    # keeps it out of the turn when content capture is off)
                generating.messages = messages

    def template_filled(self, run_id: str, variables: dict[str, str], now: int) -> None:
        """A predict call filled its prompt template: the values are the model call's context."""
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None:
                generating = self._generating(turn, run_id, now)
                if generating.template_variables is None:
                    generating.template_variables = variables

    def model_answered(self, run_id: str, response: object, now: int, error: BaseException | str | None = None) -> None:
        output = output_of(response)
        tool_calls = tool_calls_of(response)
        input_tokens, output_tokens = usage_of(response)
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is None:
                return
            generating = self._generating(turn, run_id, now)
            outermost = turn.llm_key.get(run_id) == run_id
            if output is not None and (outermost or generating.output is None):
                generating.output = output
            if tool_calls and (outermost or not generating.tool_calls):
                generating.tool_calls = tool_calls
            if input_tokens is not None and (outermost or generating.input_tokens is None):
                generating.input_tokens = input_tokens
            if output_tokens is not None and (outermost or generating.output_tokens is None):
                generating.output_tokens = output_tokens
            if error is not None and generating.error is None:
                generating.error = error_text(error)
            generating.ended_at = now

    def _generating(self, turn: Turn, run_id: str, now: int) -> Generating:
        key = turn.llm_key.get(run_id)
        if key is None:
            key = turn.llm_key[run_id] = run_id
        generating = turn.generations.get(key)
        if generating is None:
            generating = turn.generations[key] = Generating(turn.next_seq(), now)
        return generating

    def response_seen(self, run_id: str, response: object) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and run_id != turn.root_id:
                turn.hint = response

    def turn_failed(self, run_id: str, error: BaseException | str) -> None:
        with self.store.lock:
            turn = self.store.state_of(run_id)
            if turn is not None and turn.error is None:
                turn.error = error_text(error)

    # -- closing -----------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """``open_turns`` (in flight now), ``closed_turns`` and ``evicted`` (ended early at *max_runs*)."""
        with self.store.lock:
            return {"open_turns": len(self.store), "closed_turns": self.closed_turns, "evicted": self.store.evicted}

    def _hand_off(self, turn: Turn, *, evicted: bool = False) -> None:
        """On the host's thread, once the turn is out of the run store: take what it was answered
        with, and leave the rest to the auditor's closing thread."""
        with self.store.lock:
            self.closed_turns += 1
            drained = not self.accepting and not self.store
        try:
            settle(turn)
        except Exception as exc:
            report_failure("closing a LlamaIndex turn", exc)
        evicted_at = self.store.max_runs if evicted else None
        self.hand_off(str(turn.root_id), lambda now: steps_of(turn, now, evicted_at), root_id=turn.root_id,
                      framework=FRAMEWORK, parent=turn.context)
        if drained and self.on_idle is not None:
            self.on_idle()  # the last turn of an uninstrumented instrumentation: leave the dispatcher


def _never() -> Turn:  # pragma: no cover - a stream run always has its turn's root as parent
    raise RuntimeError("a stream run must belong to an open turn")
