"""A finished turn as steps: what the collector kept of its runs, in the vocabulary of
[`ragaudit.integrations.steps`][ragaudit.integrations.steps], for the assembler to apply the turn rules to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...records import RetrievedDoc
from .._assembler import evicted_error
from .._common import input_text
from ..steps import ErrorStep, ModelCall, RetrievalStep, RunEnded, RunKind, RunStarted, Step, ToolResult
from ._state import Turn
from ._values import (
    JUDGE_CONTEXT_KEY,
    STREAM_KEY,
    answer_from,
    convert_nodes,
    messages_of,
    snapshot,
    source_nodes_of,
    structured_from,
)

__all__ = ["settle", "steps_of"]

# Turns whose evidence is what their steps retrieved, not the source nodes of a response.
_NO_SOURCES = frozenset({"retrieve", "agent"})


def settle(turn: Turn) -> None:
    """On the host's thread as the turn closes: the answer and the nodes it was built from, read
    now from the engine's response (the host may reuse it), which the turn then lets go of."""
    result, hint = turn.result, turn.hint
    turn.result = turn.hint = None
    if turn.kind == "retrieve":
        if isinstance(result, list):
            turn.sources = snapshot(result)
        return
    if turn.kind == "agent":
        # The agent's reply; its evidence is every retrieval and tool output (the assembler's
        # rule), not the source nodes of a query engine one of its tools called.
        if turn.error is None:
            turn.answer = answer_from(result)
            turn.structured = structured_from(result)
        return
    nodes = source_nodes_of(result)
    if nodes is None and turn.sources is None:
        nodes = source_nodes_of(hint)
    if nodes is not None:
        turn.sources = snapshot(nodes)
    if turn.error is None:
        answer = turn.streamed if turn.streamed is not None else answer_from(result)
        if answer is None:
            answer = answer_from(hint)
        if answer is None:
            answer = next((g.output for g in sorted(turn.generations.values(), key=lambda g: -g.seq)
                           if g.output is not None and g.error is None and g.ended_at is not None), None)
        turn.answer = answer
        turn.structured = structured_from(result)


def steps_of(turn: Turn, now: int, evicted_at: int | None) -> Iterator[Step]:
    """The turn's steps: its root, the runs in between (nesting only), its retrievals, model and
    tool calls in start order, its end (or, for a turn evicted at *evicted_at* open turns, the error)."""
    root = turn.root_id
    yield RunStarted(root, RunKind(turn.kind), turn.started_at, name=turn.name, question=turn.query,
                     history=messages_of(turn.history), tags=turn.tags or {})
    children = _children(turn)
    child_ids = {*turn.retrievals, *turn.generations, *turn.tools}
    for run_id, parent in turn.parents.items():
        if run_id not in child_ids and run_id != root:
            yield RunStarted(run_id, RunKind.STEP, turn.started_at, parent_id=parent)
    for _, step in sorted(children, key=lambda c: c[0]):
        yield step
    if evicted_at is not None:
        yield ErrorStep(root, evicted_error(evicted_at), now)
        return
    annotations: dict[str, Any] = {}
    if turn.stream_state is not None:
        annotations[STREAM_KEY] = turn.stream_state
    from_sources = turn.sources is not None and turn.kind not in _NO_SOURCES
    if turn.kind != "agent":
        annotations[JUDGE_CONTEXT_KEY] = "source_nodes" if from_sources else "retrieval"
    yield RunEnded(root, now, answer=turn.answer, structured=turn.structured, error=turn.error,
                   sources=convert_nodes(turn.sources or ()) if from_sources else None, annotations=annotations)


def _children(turn: Turn) -> list[tuple[int, Step]]:
    """``(seq, step)`` of the turn's retrievals, model calls and tool calls."""
    children: list[tuple[int, Step]] = []
    for run_id, r in turn.retrievals.items():
        children.append((r.seq, RetrievalStep(run_id, turn.parents.get(run_id), r.name, r.started_at, r.ended_at,
                                              query=r.query, documents=convert_nodes(r.nodes), error=r.error)))
    first = min(turn.generations.values(), key=lambda g: g.seq, default=None)
    for run_id, g in turn.generations.items():
        # an agent's history lives in its first model call's messages
        messages = g.messages or (messages_of(turn.prompt) if g is first else ())
        children.append((g.seq, ModelCall(run_id, turn.parents.get(run_id), g.started_at, g.ended_at,
                                          messages=messages, prompt=g.prompt,
                                          template_variables=g.template_variables or {}, output=g.output,
                                          tool_calls=g.tool_calls,
                                          model=g.model, provider=g.provider, input_tokens=g.input_tokens,
                                          output_tokens=g.output_tokens, error=g.error)))
    for run_id, t in turn.tools.items():
        text, documents, tool_error = read_tool_output(t.output)
        children.append((t.seq, ToolResult(run_id, turn.parents.get(run_id), t.name, t.started_at, t.ended_at,
                                           call_id=t.call_id, input=input_text(t.input), output=text,
                                           documents=documents, error=t.error or tool_error)))
    return children


def read_tool_output(output: object) -> tuple[str | None, tuple[RetrievedDoc, ...] | None, str | None]:
    """``(text, documents, error)`` of a ``ToolOutput``: its content, the nodes it returned when its
    raw output is a list of nodes (a retriever tool), and its error."""
    if output is None:
        return None, None, None
    content = getattr(output, "content", None)
    text = content if isinstance(content, str) else None
    raw = getattr(output, "raw_output", None)
    documents = None
    if isinstance(raw, (list, tuple)) and raw and all(hasattr(getattr(n, "node", n), "node_id") for n in raw):
        documents = convert_nodes(snapshot(list(raw)))
    error = f"tool {getattr(output, 'tool_name', '')} failed" if getattr(output, "is_error", False) else None
    return text, documents, error
