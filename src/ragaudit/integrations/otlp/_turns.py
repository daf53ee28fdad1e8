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

from ...records import Message, RetrievedDoc, stable_doc_id
from ...tracing.evaluation_logs import EVALUATED_RESPONSE_ID, EVALUATED_SPAN_ID
from ..steps import ModelCall, RetrievalStep, RunEnded, RunKind, RunStarted, Step, ToolResult
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

__all__ = ["TraceTurns", "WorkerTurn", "turn_id_of", "turns_of"]

_TURN_KINDS = frozenset({KIND_CHAIN, KIND_AGENT})


def turn_id_of(trace_id: str, span_id: str) -> str:
    """The turn id of the turn rooted at *span_id* in *trace_id*: the same on every delivery."""
    return f"otlp-{trace_id}-{span_id}"


@dataclass(slots=True)
class WorkerTurn:
    """One turn of a trace: its root span, the convention it was read by, its steps in order."""

    root_span_id: str
    convention: str
    steps: list[Step]


@dataclass(slots=True)
class TraceTurns:
    """The turns read from one trace, or why there are none (``skipped``: a count key)."""

    trace_id: str
    turns: list[WorkerTurn]
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


def _step(span: SpanData, r: Reading, parent: str | None, ids_by_text: Mapping[str, str]) -> Step:
    """The step of one span below a turn's root (a span of no step kind tells the nesting only)."""
    if r.kind == KIND_RETRIEVER:
        return RetrievalStep(span.span_id, parent, span.name, span.start_ns, span.end_ns, query=r.query,
                             documents=_documents(r.documents or (), ids_by_text), error=r.error)
    if r.kind == KIND_LLM:
        return ModelCall(span.span_id, parent, span.start_ns, span.end_ns, messages=tuple(r.messages),
                         output=r.output_text, tool_calls=tuple(r.tool_calls), model=r.model, provider=r.provider,
                         input_tokens=r.input_tokens,
                         output_tokens=r.output_tokens, error=r.error)
    if r.kind == KIND_TOOL:
        return ToolResult(span.span_id, parent, r.tool_name or span.name, span.start_ns, span.end_ns,
                          call_id=r.tool_call_id, input=r.tool_arguments, output=r.output_text,
                          documents=_documents(r.documents, ids_by_text) if r.documents else None, error=r.error)
    return RunStarted(span.span_id, RunKind.STEP, span.start_ns, parent_id=parent, name=span.name)


def _question(r: Reading) -> tuple[str | None, tuple[Message, ...]]:
    if r.input_json is None:
        return r.input_text, tuple(r.messages)
    messages = tuple(messages_in(r.input_json))
    return (None if messages else question_in(r.input_json)), messages


def _tags(trace: _Trace, members: Sequence[str], steps: Sequence[Step], service: str | None,
          convention: str) -> dict[str, str]:
    """The turn's metadata: convention, service, session and user, and the evaluated model call."""
    tags: dict[str, str] = {"otlp.convention": convention}
    if service:
        tags["service.name"] = service
    for span_id in members:
        r = trace.readings[span_id]
        if r.session_id and "session_id" not in tags:
            tags["session_id"] = r.session_id
        if r.user_id and "user_id" not in tags:
            tags["user_id"] = r.user_id
    # The evaluated operation: the last model call that answered (the answer's own completion).
    calls = [s for s in steps if isinstance(s, ModelCall) and s.error is None and s.output is not None]
    if calls:
        last = max(calls, key=lambda s: s.ended_at or 0)
        tags[EVALUATED_SPAN_ID] = str(last.run_id)
        response_id = trace.readings[str(last.run_id)].response_id
        if response_id:
            tags[EVALUATED_RESPONSE_ID] = response_id
    return tags


def _run_name(root: SpanData, kind: RunKind) -> str:
    """The root's name; an agent's is the agent's own (``gen_ai.agent.name``, OpenInference
    ``agent.name``), not its span's ``invoke_agent {name}``: our turn span is named after it."""
    if kind is RunKind.AGENT:
        for key in ("gen_ai.agent.name", "agent.name"):
            value = root.attributes.get(key)
            if isinstance(value, str) and value:
                return value
        return root.name.removeprefix("invoke_agent").strip() or root.name
    return root.name


def _turn(trace: _Trace, root_id: str, service: str | None) -> WorkerTurn:
    root = trace.spans[root_id]
    reading = trace.readings[root_id]
    turn_id = turn_id_of(root.trace_id, root_id)
    members = [root_id, *trace.descendants(root_id)]
    ordered = sorted(members[1:], key=lambda s: (trace.spans[s].start_ns, s))
    # Children of the root name the turn's run id as their parent (the assembler's tree).
    children: list[Step] = [_step(trace.spans[s], trace.readings[s],
                                  turn_id if trace.spans[s].parent_id == root_id else trace.spans[s].parent_id,
                                  trace.ids_by_text) for s in ordered]
    # A model called on its own is traced, never judged.
    kind = RunKind.MODEL if reading.kind == KIND_LLM else RunKind.AGENT if reading.kind == KIND_AGENT \
        else RunKind.CHAIN
    question, messages = _question(reading)
    start = RunStarted(turn_id, kind, root.start_ns, name=_run_name(root, kind), question=question, messages=messages,
                       tags=_tags(trace, members, children, service, reading.convention))
    answered = reading.kind != KIND_LLM and reading.error is None
    end = RunEnded(turn_id, max(root.end_ns, root.start_ns), error=reading.error,
                   answer=reading.output_text if answered else None,
                   structured=reading.structured if answered else None)
    return WorkerTurn(root_id, reading.convention, [start, *children, end])


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
    return TraceTurns(pending.trace_id, [_turn(trace, root, service) for root in roots], own)
