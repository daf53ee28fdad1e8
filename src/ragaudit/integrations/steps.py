"""The steps: everything a source of turns tells the turn assembler, as typed records.

A *source* reads a framework's events (LangChain callbacks, LlamaIndex instrumentation events, OTLP
spans of OpenInference, OpenLLMetry or OTel GenAI instrumentations) and translates each user
message's run into a few steps. The assembler
([`ragaudit.integrations.TurnAssembler`][ragaudit.integrations.TurnAssembler]) applies the turn rules to them, once, for
every source: which question, which evidence (what reached the model), which answer, whether the turn is judged. A
source needs nothing else:

>>> from ragaudit.integrations import TurnAssembler
>>> from ragaudit.integrations.steps import ModelCall, RunEnded, RunKind, RunStarted, dispatch
>>> assembler = TurnAssembler(framework="myframework")
>>> for step in (RunStarted("run-1", RunKind.CHAIN, started_at=1, question="Refund window?"),
...              ModelCall("llm-1", parent_id="run-1", started_at=2, ended_at=3, output="30 days."),
...              RunEnded("run-1", ended_at=4, answer="30 days.")):
...     dispatch(assembler, step)

The vocabulary:

* [`RunStarted`][ragaudit.integrations.steps.RunStarted] / [`RunEnded`][ragaudit.integrations.steps.RunEnded]: the root
  run of a turn (one per user message: a chain, a query or chat engine call, an agent or workflow run; its
  [`RunKind`][ragaudit.integrations.steps.RunKind]), with what it was given and what it returned or the error it raised.
  A run inside the turn that is none of the steps below (a chain step, a graph node, a workflow step) is a
  [`RunStarted`][ragaudit.integrations.steps.RunStarted] of kind
  [`RunKind.STEP`][ragaudit.integrations.steps.RunKind.STEP] with its parent: it only tells the nesting.
* [`RetrievalStep`][ragaudit.integrations.steps.RetrievalStep]: a retriever or vector-store search, with the documents
it returned.
* [`ToolResult`][ragaudit.integrations.steps.ToolResult]: a tool an agent called, with its output text and/or documents.
* [`ModelCall`][ragaudit.integrations.steps.ModelCall]: one call of a language model: what it was sent (messages or a
  prompt, and the prompt template's variables when the framework shows them), what it returned, usage.
* [`ErrorStep`][ragaudit.integrations.steps.ErrorStep]: something that made the turn fail that no other step carries
  (the source could not read an event, the turn was cut off before its root ended).

Rules for a source: give every step the id of its run and of its parent run (any hashable the
framework uses: a UUID, a span id); hand a turn's steps in the order they started, the root's
[`RunStarted`][ragaudit.integrations.steps.RunStarted] first and its [`RunEnded`][ragaudit.integrations.steps.RunEnded]
last; times are epoch nanoseconds; a step that had not ended when the turn closed has ``ended_at=None`` (it is recorded
as unfinished). Hand steps over through [`dispatch`][ragaudit.integrations.steps.dispatch], off the host's thread where
possible (when the turn closes): it never raises, so a bad step cannot harm the host. Document ids come from the
    framework's own ids
([`ragaudit.integrations.retrieved_doc`][ragaudit.integrations.retrieved_doc]).

The consumer side is the [`StepConsumer`][ragaudit.integrations.steps.StepConsumer] protocol: anything with its six
methods can take steps (the assembler, a test's recorder, a future live consumer).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, TypeAlias

from ..records import Message, RetrievedDoc
from ._common import report_failure

__all__ = [
    "ErrorStep",
    "ModelCall",
    "ModelToolCall",
    "RetrievalStep",
    "RunEnded",
    "RunKind",
    "RunStarted",
    "Step",
    "StepConsumer",
    "ToolResult",
    "dispatch",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class RunKind(enum.Enum):
    """What a run is. The first five are turns that are judged when they qualify; a retriever or a
    model called on its own is traced and never judged; [`STEP`][ragaudit.integrations.steps.RunKind.STEP] is a run
    inside a turn."""

    CHAIN = "chain"
    """A chain, graph or runnable run (LangChain, LangGraph)."""
    QUERY = "query"
    """A query engine's query (LlamaIndex)."""
    CHAT = "chat"
    """A chat engine's chat (LlamaIndex)."""
    AGENT = "agent"
    """An agent's run: a conversation in, tool calls, a reply out."""
    WORKFLOW = "workflow"
    """A workflow run (LlamaIndex ``Workflow.run``)."""
    RETRIEVE = "retrieve"
    """A retriever called on its own: traced, never judged."""
    MODEL = "model"
    """A language model called on its own: traced, never judged."""
    STEP = "step"
    """A run inside a turn that is no retrieval, tool or model call: tells the nesting only."""

    @property
    def standalone(self) -> bool:
        """True for a retriever or model called on its own (traced, never judged)."""
        return self in (RunKind.RETRIEVE, RunKind.MODEL)


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run started: the turn's root (``parent_id`` None), or a
    [`RunKind.STEP`][ragaudit.integrations.steps.RunKind.STEP] run inside it.

    ``question`` is the user's question when the run was given it as text; ``messages`` the
    conversation it was given (an agent's input; the question is then the last user message);
    ``history`` earlier messages the framework keeps (a chat engine's memory, a chain's
    ``chat_history``); ``template_variables`` the values filled into a prompt template at the root
    (as text). ``tags`` is the run's metadata as the caller gave it (ground truth is read from its
    ``ragaudit_relevant_ids`` / ``ragaudit_reference_answer``; other string keys go to the turn's
    metadata); ``name`` the run's name.
    """

    run_id: Hashable
    kind: RunKind
    started_at: int
    parent_id: Hashable | None = None
    name: str | None = None
    question: str | None = None
    messages: tuple[Message, ...] = ()
    history: tuple[Message, ...] = ()
    template_variables: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tags: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The root run ended: with ``answer`` (its output's text), or ``error`` (what it raised).

    ``structured`` is the output when it was a structured object (a pydantic model or a dict, as
    ``with_structured_output`` returns): the assembler reads the answer text and the cited sources
    from it. ``sources`` are the documents the framework says the answer was built from (LlamaIndex
    ``source_nodes``), None when it says nothing. ``annotations`` go to the turn's metadata as they
    are (say, how a stream ended).
    """

    run_id: Hashable
    ended_at: int
    answer: str | None = None
    structured: Mapping[str, Any] | None = None
    error: str | None = None
    sources: tuple[RetrievedDoc, ...] | None = None
    annotations: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class RetrievalStep:
    """A retriever run or a vector-store search: ``name`` is the retriever's or store's name (the
    retrieval span is named after it), ``documents`` what it returned, in its order."""

    run_id: Hashable
    parent_id: Hashable | None
    name: str
    started_at: int
    ended_at: int | None = None
    query: str | None = None
    documents: tuple[RetrievedDoc, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool an agent called: ``input`` as text (the model's arguments), ``output`` the text the
    model got back, ``documents`` when the output carried documents (a retriever tool's artifact,
    a list of nodes; None for a tool that returned text)."""

    run_id: Hashable
    parent_id: Hashable | None
    name: str
    started_at: int
    ended_at: int | None = None
    call_id: str | None = None
    input: str | None = None
    output: str | None = None
    documents: tuple[RetrievedDoc, ...] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A tool call a model asked for in its output: the tool's name, the call id, the arguments text."""

    name: str
    call_id: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One language-model call.

    ``messages`` are the chat messages sent, as ``(role, text)`` (roles ``system``, ``user``,
    ``assistant``, ``tool``); ``prompt`` the prompt as one text (a completion model's). The
    assembler matches evidence against them, so give them in full, whatever the content policy
    (it applies the policy to what it records). ``template_variables``: the values the prompt
    template filled in for this call, when the framework shows them (LangChain prompt runs,
    LlamaIndex templates). ``output`` the text it returned, ``tool_calls`` the calls it asked for.
    """

    run_id: Hashable
    parent_id: Hashable | None
    started_at: int
    ended_at: int | None = None
    messages: tuple[Message, ...] = ()
    prompt: str | None = None
    template_variables: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    output: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorStep:
    """The turn failed with ``error``, though no other step says so: the source could not read an
    event, or the turn was cut off ([`ragaudit.integrations.evicted_error`][ragaudit.integrations.evicted_error]). The
    first one is the turn's error unless its root ended with one of its own."""

    run_id: Hashable
    error: str
    at: int | None = None


Step: TypeAlias = RunStarted | RunEnded | RetrievalStep | ToolResult | ModelCall | ErrorStep
"""Any step."""


class StepConsumer(Protocol):
    """What takes steps (the assembler side). Sources never call these directly: they call
    [`dispatch`][ragaudit.integrations.steps.dispatch], which guards them."""

    def on_run_started(self, step: RunStarted) -> None:
        """A run started (the root first)."""

    def on_run_ended(self, step: RunEnded) -> None:
        """The root run ended."""

    def on_retrieval(self, step: RetrievalStep) -> None:
        """A retrieval ran."""

    def on_tool_result(self, step: ToolResult) -> None:
        """A tool returned."""

    def on_model_call(self, step: ModelCall) -> None:
        """A model was called."""

    def on_error(self, step: ErrorStep) -> None:
        """The turn failed (see [`ErrorStep`][ragaudit.integrations.steps.ErrorStep])."""


_ROUTES: dict[type, Callable[[StepConsumer, Any], None]] = {
    RunStarted: lambda consumer, step: consumer.on_run_started(step),
    RunEnded: lambda consumer, step: consumer.on_run_ended(step),
    RetrievalStep: lambda consumer, step: consumer.on_retrieval(step),
    ToolResult: lambda consumer, step: consumer.on_tool_result(step),
    ModelCall: lambda consumer, step: consumer.on_model_call(step),
    ErrorStep: lambda consumer, step: consumer.on_error(step),
}


def dispatch(consumer: StepConsumer, step: Step) -> bool:
    """Hand *step* to *consumer*. Never raises: a step that is not one of these types, or that the
    consumer fails on, is logged (rate-limited, on the ``ragaudit`` logger) and False is returned."""
    route = _ROUTES.get(type(step))
    try:
        if route is None:
            raise TypeError(f"not a step: {type(step).__name__} (see ragaudit.integrations.steps)")
        route(consumer, step)
    except Exception as exc:
        report_failure(f"taking a {type(step).__name__} step", exc)
        return False
    return True
