"""A ready trace as turns: its spans read by convention, mapped onto the assembler's steps.

Which spans are turns: the *outermost* chain or agent spans (OpenInference ``CHAIN`` / ``AGENT``,
OpenLLMetry ``workflow`` / ``agent``, GenAI ``invoke_agent``, ragaudit's ``ragaudit.turn``) with a
model call below them — one per user message, so a trace whose request handler ran two chains gives
two turns. A trace with model calls and no such span is one turn rooted at its root span (a model
called on its own there is traced, not judged, as in-process). Below a turn's root, retriever,
model and tool spans become the steps; everything else only carries the tree (parents), which the
assembler uses for its "outermost retrieval" rule. The assembler then builds the turn exactly as
for an in-process framework.

Ids are the trace's own: the turn id is derived from the trace and root span ids, the turn's
``trace_id`` / ``span_id`` are the app's root span (the judge span becomes its child), and the
evaluated operation (for the evaluation log records) is the model call whose output is the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...records import Generation, Retrieval, RetrievedDoc, ToolCall, stable_doc_id
from ...tracing.evaluation_logs import EVALUATED_RESPONSE_ID, EVALUATED_SPAN_ID
from .._assembler import Step, TurnParts
from ._buffer import PendingTrace
from ._conventions import (
    KIND_AGENT,
    KIND_CHAIN,
    KIND_JUDGE,
    KIND_LLM,
    KIND_RETRIEVER,
    KIND_TOOL,
    DocReading,
    Reading,
    all_documents,
    messages_in,
    question_in,
    read_span,
)
from ._decode import SpanData

__all__ = ["TraceTurns", "turn_id_of", "turns_of"]

_TURN_KINDS = frozenset({KIND_CHAIN, KIND_AGENT})


def turn_id_of(trace_id: str, span_id: str) -> str:
    """The turn id of the turn rooted at *span_id* in *trace_id*: the same on every delivery."""
    return f"otlp-{trace_id}-{span_id}"


@dataclass(slots=True)
class TraceTurns:
    """The turns read from one trace as ``(root span id, parts)``, or why there are none (``skipped``)."""

    trace_id: str
    turns: list[tuple[str, TurnParts]]
    own_spans: int = 0
    skipped: str | None = None


class _Trace:
    """One trace's spans with their readings and tree."""

    def __init__(self, spans: Sequence[SpanData]) -> None:
        self.spans = {s.span_id: s for s in spans}
        self.readings: dict[str, Reading] = {s.span_id: read_span(s) for s in spans}
        self.children: dict[str, list[str]] = {}
        self.roots: list[str] = []
        for s in sorted(spans, key=lambda s: s.start_ns):
            if s.parent_id is not None and s.parent_id in self.spans and s.parent_id != s.span_id:
                self.children.setdefault(s.parent_id, []).append(s.span_id)
            else:
                self.roots.append(s.span_id)
        self.ids_by_text = all_documents(list(self.readings.values()))
        self._has_llm: dict[str, bool] = {}

    def has_llm(self, span_id: str) -> bool:
        found = self._has_llm.get(span_id)
        if found is None:
            found = self.readings[span_id].kind == KIND_LLM or any(self.has_llm(c)
                                                                  for c in self.children.get(span_id, ()))
            self._has_llm[span_id] = found
        return found

    def turn_roots(self) -> list[str]:
        out: list[str] = []
        for root in self.roots:
            found = self._outermost(root)
            if not found and self.has_llm(root):
                found = [root]
            out.extend(found)
        return out

    def _outermost(self, span_id: str) -> list[str]:
        if self.readings[span_id].kind in _TURN_KINDS and self.has_llm(span_id):
            return [span_id]
        out: list[str] = []
        for child in self.children.get(span_id, ()):
            out.extend(self._outermost(child))
        return out

    def descendants(self, span_id: str) -> list[str]:
        out: list[str] = []
        stack = list(reversed(self.children.get(span_id, ())))
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(reversed(self.children.get(current, ())))
        return out


def _documents(docs: Sequence[DocReading], ids_by_text: Mapping[str, str]) -> tuple[RetrievedDoc, ...]:
    out: list[RetrievedDoc] = []
    for rank, doc in enumerate(docs, 1):
        source = doc.metadata.get("source") if isinstance(doc.metadata.get("source"), str) else None
        doc_id = doc.id or ids_by_text.get(doc.content) or stable_doc_id(doc.content, source)
        out.append(RetrievedDoc(id=str(doc_id), content=doc.content, score=doc.score, rank=rank, source=source,
                                metadata=doc.metadata))
    return tuple(out)


def _step(span: SpanData, r: Reading, seq: int, ids_by_text: Mapping[str, str]) -> Step | None:
    record: Retrieval | Generation | ToolCall
    documents = None
    if r.kind == KIND_RETRIEVER:
        record = Retrieval(name=span.name, documents=_documents(r.documents or (), ids_by_text), query=r.query,
                           started_at=span.start_ns, ended_at=span.end_ns, error=r.error)
    elif r.kind == KIND_LLM:
        record = Generation(model=r.model, prompt="\n\n".join(t for _, t in r.messages) or None, output=r.output_text,
                            input_tokens=r.input_tokens, output_tokens=r.output_tokens, started_at=span.start_ns,
                            ended_at=span.end_ns, error=r.error, provider=r.provider, messages=tuple(r.messages))
    elif r.kind == KIND_TOOL:
        record = ToolCall(name=r.tool_name or span.name, arguments=r.tool_arguments, output=r.output_text,
                          call_id=r.tool_call_id, started_at=span.start_ns, ended_at=span.end_ns, error=r.error)
        if r.documents:
            documents = _documents(r.documents, ids_by_text)
    else:
        return None
    return Step(run_id=span.span_id, parent_id=span.parent_id, seq=seq, record=record, documents=documents)


def _question(r: Reading) -> tuple[str | None, list[tuple[str, str]]]:
    messages = messages_in(r.input_json) if r.input_json is not None else []
    if r.input_json is None:
        return r.input_text, []
    question = question_in(r.input_json)
    return (question if messages == [] else None), messages


def _turn(trace: _Trace, root_id: str, service: str | None) -> TurnParts:
    root = trace.spans[root_id]
    reading = trace.readings[root_id]
    steps: list[Step] = []
    parents: dict[str, Any] = {}
    members = [root_id, *trace.descendants(root_id)]
    ordered = sorted(members[1:], key=lambda s: (trace.spans[s].start_ns, s))
    for seq, span_id in enumerate(ordered):
        span = trace.spans[span_id]
        parents[span_id] = span.parent_id
        step = _step(span, trace.readings[span_id], seq, trace.ids_by_text)
        if step is not None:
            steps.append(step)
    # A model called on its own ("model") is traced, never judged.
    root_kind = "model" if reading.kind == KIND_LLM else "agent" if reading.kind == KIND_AGENT else "chain"
    query, messages = _question(reading)
    if reading.input_json is None and reading.messages:
        messages = list(reading.messages)
    metadata: dict[str, Any] = {"otlp.convention": reading.convention}
    if service:
        metadata["service.name"] = service
    for span_id in members:
        r = trace.readings[span_id]
        if r.session_id and "session_id" not in metadata:
            metadata["session_id"] = r.session_id
        if r.user_id and "user_id" not in metadata:
            metadata["user_id"] = r.user_id
    # The evaluated operation: the last model call that answered (the answer's own completion).
    calls = [s for s in steps if isinstance(s.record, Generation) and s.record.error is None
             and s.record.output is not None]
    if calls:
        last = max(calls, key=lambda s: (s.record.ended_at or 0, s.seq))
        metadata[EVALUATED_SPAN_ID] = str(last.run_id)
        response_id = trace.readings[str(last.run_id)].response_id
        if response_id:
            metadata[EVALUATED_RESPONSE_ID] = response_id
    return TurnParts(
        turn_id=turn_id_of(root.trace_id, root_id), framework=reading.convention, root_kind=root_kind,
        started_at=root.start_ns, ended_at=max(root.end_ns, root.start_ns), query=query, messages=messages,
        answer=reading.output_text if reading.kind != KIND_LLM else None, steps=steps, parents=parents,
        error=reading.error, metadata=metadata,
    )


def turns_of(pending: PendingTrace, own_service: str) -> TraceTurns:
    """The turns of *pending* (see the module docstring). Spans of *own_service* are left out (the
    loop guard); a trace with a ``ragaudit.judge`` span was judged already and gives none."""
    spans = [s for s in pending.spans if s.service != own_service]
    own = len(pending.spans) - len(spans)
    if not spans:
        return TraceTurns(pending.trace_id, [], own, "own")
    trace = _Trace(spans)
    if any(r.kind == KIND_JUDGE for r in trace.readings.values()):
        return TraceTurns(pending.trace_id, [], own, "already_judged")
    roots = trace.turn_roots()
    if not roots:
        return TraceTurns(pending.trace_id, [], own, "no_model_call")
    service = spans[0].service
    return TraceTurns(pending.trace_id, [(root, _turn(trace, root, service)) for root in roots], own)
