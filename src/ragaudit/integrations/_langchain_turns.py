"""What the LangChain handler keeps of a turn on the host's thread, and the steps it becomes at close.

The host's thread keeps raw values only (a dictionary update per event); `turn_steps` reads
them into the steps of [`ragaudit.integrations.steps`][ragaudit.integrations.steps] on the auditor's closing thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ._assembler import evicted_error
from ._common import input_text
from ._langchain_values import (
    RawDoc,
    convert_documents,
    is_mapping,
    messages_of,
    prompt_messages,
    prompt_text,
    read_llm_result,
    read_tool_calls,
    read_tool_output,
    structured_data,
    template_variables,
)
from .steps import ErrorStep, ModelCall, ModelToolCall, RetrievalStep, RunEnded, RunKind, RunStarted, Step, ToolResult

__all__ = ["Child", "OpenGeneration", "OpenPrompt", "OpenRetrieval", "OpenTool", "Turn", "is_prompt", "turn_steps"]

ROOT_KINDS = {"chain": RunKind.CHAIN, "retriever": RunKind.RETRIEVE, "llm": RunKind.MODEL}


@dataclass(slots=True)
class OpenRetrieval:
    name: str
    query: str | None
    started_at: int
    seq: int = 0
    key: int = 0
    parent: int | None = None
    ended_at: int | None = None
    documents: tuple[RawDoc, ...] = ()
    error: str | None = None


@dataclass(slots=True)
class OpenGeneration:
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
class OpenTool:
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


@dataclass(slots=True)
class OpenPrompt:
    """A prompt template run: the values it filled in, raw (read at close)."""

    inputs: Any
    started_at: int
    seq: int = 0
    key: int = 0
    parent: int | None = None
    ended_at: int | None = None
    error: str | None = None


Child = OpenRetrieval | OpenGeneration | OpenTool | OpenPrompt


@dataclass(slots=True)
class Turn:
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
    outside: int = 0  # vector-store searches outside any run before this turn began
    ended: bool = False  # the root run ended
    answer: str | None = None  # read when the root ends: the caller may change its output afterwards
    structured: Any = None  # a structured answer (with_structured_output), raw: read at close
    error: str | None = None
    seq: int = 0
    parents: dict[int, int | None] = field(default_factory=dict)  # every run of the turn -> its parent
    open_children: dict[int, Child] = field(default_factory=dict)
    finished: list[Child] = field(default_factory=list)


def is_prompt(serialized: object, name: object) -> bool:
    """Whether a chain run is a prompt template's (``ChatPromptTemplate``, ``PromptTemplate``, ...)."""
    if isinstance(name, str) and name.endswith("PromptTemplate"):
        return True
    ids = serialized.get("id") if is_mapping(serialized) else None
    return isinstance(ids, list) and "prompts" in ids


def _child_step(child: OpenRetrieval | OpenGeneration | OpenTool, variables: Mapping[str, str]) -> Step:
    if isinstance(child, OpenRetrieval):
        return RetrievalStep(child.key, child.parent, child.name, child.started_at, child.ended_at,
                             query=child.query, documents=convert_documents(child.documents), error=child.error)
    if isinstance(child, OpenTool):
        text, documents, call_id, tool_error = read_tool_output(child.output, child.call_id, child.name)
        return ToolResult(child.key, child.parent, child.name, child.started_at, child.ended_at, call_id=call_id,
                          input=input_text(child.input), output=text if child.ended_at is not None else None,
                          documents=documents, error=child.error or tool_error)
    text = input_tokens = output_tokens = response_model = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    if child.response is not None and child.error is None:
        text, input_tokens, output_tokens, response_model = read_llm_result(child.response)
        tool_calls = read_tool_calls(child.response)
    return ModelCall(child.key, child.parent, child.started_at, child.ended_at,
                     messages=prompt_messages(child.prompt), prompt=prompt_text(child.prompt),
                     template_variables=variables, output=text, tool_calls=tool_calls,
                     model=child.model or response_model,
                     provider=child.provider, input_tokens=input_tokens, output_tokens=output_tokens,
                     error=child.error)


def _children(children: Sequence[Child]) -> Iterator[Step]:
    """The steps of *children* (in start order); a model call gets the values of the prompt
    template run just before it."""
    variables: Mapping[str, str] = {}
    for child in children:
        if isinstance(child, OpenPrompt):
            variables = template_variables(child.inputs)
            continue
        yield _child_step(child, variables if isinstance(child, OpenGeneration) else {})
        if isinstance(child, OpenGeneration):
            variables = {}


def turn_steps(turn: Turn, now: int, evicted_at: int | None) -> Iterator[Step]:
    """The steps of *turn*, closed at *now*: the root, the runs in between (nesting only), the
    retriever, model and tool calls in start order (finished or not), the root's end; *evicted_at*
    (max_runs) when the turn was evicted."""
    key = turn.run_id  # the turn's id; its steps' parents are run ids as ints (run_id.int)
    yield RunStarted(key, ROOT_KINDS.get(turn.kind, RunKind.CHAIN), turn.started_at, name=turn.name,
                     question=turn.query, messages=tuple(messages_of(turn.conversation) or ()),
                     history=tuple(messages_of(turn.history) or ()), tags=turn.metadata or {})
    children = sorted((*turn.finished, *turn.open_children.values()), key=lambda c: c.seq)
    child_keys = {c.key for c in children}
    for run, parent in turn.parents.items():
        if run not in child_keys:
            yield RunStarted(run, RunKind.STEP, turn.started_at, parent_id=parent)
    yield from _children(children)
    if evicted_at is not None:
        yield ErrorStep(key, evicted_error(evicted_at), now)
    elif turn.ended:
        yield RunEnded(key, now, answer=turn.answer, structured=structured_data(turn.structured), error=turn.error)
