"""What the collector keeps of a turn while it runs: its retrievals, model calls and tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..steps import ModelToolCall

if TYPE_CHECKING:
    from ._collector import Collector

__all__ = ["LEGACY_LLM", "STREAM_TURN", "Generating", "Retrieving", "RootInfo", "Tooling", "Turn"]


@dataclass(slots=True)
class Retrieving:
    seq: int
    name: str
    query: str | None
    started_at: int
    ended_at: int | None = None
    nodes: list[tuple[Any, float | None]] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class Generating:
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
    template_variables: Mapping[str, str] | None = None  # what a predict call filled into its template
    tool_calls: tuple[ModelToolCall, ...] = ()  # what the reply asked for, when it was a tool call


@dataclass(slots=True)
class Tooling:
    seq: int
    name: str
    call_id: str | None
    input: Any
    started_at: int
    ended_at: int | None = None
    output: Any = None  # the ToolOutput, read at close
    error: str | None = None


@dataclass(slots=True)
class Turn:
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
    structured: dict[str, Any] | None = None  # a structured answer (output_cls), read as the turn closes
    streamed: str | None = None  # the full text of a wrapped stream
    stream_state: str | None = None
    stream_run: str | None = None
    chat_written: bool = False
    error: str | None = None
    seq: int = 0
    retrievals: dict[str, Retrieving] = field(default_factory=dict)
    generations: dict[str, Generating] = field(default_factory=dict)
    tools: dict[str, Tooling] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)  # every run of the turn -> its parent
    history: Any = None  # a chat engine's history before this message (ChatMessages), raw
    prompt: Any = None  # an agent's first model call's messages (ChatMessages), raw
    llm_key: dict[str, str] = field(default_factory=dict)  # model span/event -> its outermost model call
    legacy_outer: dict[str, Any] = field(default_factory=dict)  # legacy LLM event -> LEGACY_LLM before it

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


RootInfo = tuple[str, str, str | None, Mapping[str, Any] | None]  # kind, name, query, tags



# The turn a stream wrapper is pulling from, set only around each step of the stream, so model
# calls the stream makes lazily (their spans have no parent) are recorded in that turn.
STREAM_TURN: ContextVar[tuple[Collector, Turn] | None] = ContextVar("ragaudit_llamaindex_stream",
                                                                       default=None)
# The legacy LLM event open in this context: a model call made inside another (a chat model
# implemented over completion) belongs to the same generation.
LEGACY_LLM: ContextVar[tuple[Collector, str] | None] = ContextVar("ragaudit_llamaindex_llm", default=None)
