"""Turn [`RagTurn`][ragaudit.RagTurn] and [`Judgement`][ragaudit.Judgement] records into OpenTelemetry spans.

Per turn: a ``ragaudit.turn`` span with one child per retrieval (``retrieval {name}``), per LLM
call (``chat {model}``) and per tool call (``execute_tool {name}``), and later, when the judgement
arrives, a ``ragaudit.judge`` span: by default a child of the turn span in the same trace
(``judge_trace="turn"``), or the root of a trace of its own linked to the turn
(``judge_trace="separate"``, so the answer's trace keeps the answer's duration). Attribute names
are in [`ragaudit.tracing.conventions`][ragaudit.tracing.conventions].

What each backend reads (Langfuse's ``langfuse.*`` keys, Jaeger's tags, Phoenix's OpenInference
keys) is pinned by ``tests/test_backend_langfuse.py`` and ``tests/test_backend_jaeger.py``.

Only the OpenTelemetry *API* is used here: with no SDK tracer provider installed every call
returns at once, and nothing here ever raises into the host pipeline or attaches an OTel context.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as _trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer

from ..content import CAPTURE_CONTENT_ENV, TextMemo, content_capture_from_env
from ..records import Generation, Judgement, RagTurn, Retrieval, ToolCall, truncate
from . import conventions as c
from ._audit_spans import record_grades, retrieval_grades, turn_audit_attributes
from ._judge_spans import write_judge_span
from ._span_base import (
    DEFAULT_MAX_DOCUMENTS,
    JUDGE_TRACE_ENV,
    LANGFUSE_ENVIRONMENT_ENV,
    JudgeTrace,
    SpanWriter,
    _dumps,
    environment_of,
)

if TYPE_CHECKING:
    from ..records import AuditRecord

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_MAX_DOCUMENTS",
    "JUDGE_TRACE_ENV",
    "LANGFUSE_ENVIRONMENT_ENV",
    "JudgeTrace",
    "SpanRecorder",
    "TurnHandle",
    "content_capture_from_env",
    "environment_of",
]

_MAX_MESSAGES = 32


class TurnHandle:
    """An open turn span, returned by [`SpanRecorder.start_turn`][ragaudit.tracing.SpanRecorder.start_turn]; opaque to
    integrations.

    ``trace_id`` (32 hex digits) and ``span_id`` (16) identify the turn span; both are None when
    tracing is disabled or the sampler dropped the span (then ``sampled_out`` is True). Pass the
    handle back to [`SpanRecorder.end_turn`][ragaudit.tracing.SpanRecorder.end_turn] exactly once.
    """

    __slots__ = ("_agent", "_name", "_retrievals", "_root", "_span", "_start_ns", "_texts", "sampled_out",
                 "span_id", "trace_id")

    def __init__(
        self,
        trace_id: str | None,
        span_id: str | None,
        span: Span | None = None,
        start_ns: int = 0,
        root: bool = False,
        name: str = c.SPAN_TURN,
        sampled_out: bool = False,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.sampled_out = sampled_out
        self._span = span
        self._start_ns = start_ns
        self._root = root
        self._name = name
        # Retrieval spans started by SpanRecorder.start_children, ended by end_turn.
        self._retrievals: list[_OpenRetrieval] | None = None
        self._agent: str | None = None  # SpanRecorder.mark_agent
        # The turn's texts through the content policy, each once (its retrieval spans' and its own); dropped
        # when the turn span ends.
        self._texts: TextMemo | None = None

    def __repr__(self) -> str:
        return f"TurnHandle(trace_id={self.trace_id!r}, span_id={self.span_id!r})"


_DISABLED = TurnHandle(None, None)


class _OpenRetrieval:
    """A retrieval span started before its turn span ends: what end_turn needs to finish it."""

    __slots__ = ("end_ns", "error", "recorded", "span")

    def __init__(self, span: Span, recorded: Sequence[Any], end_ns: int, error: str | None) -> None:
        self.span = span
        self.recorded = recorded
        self.end_ns = end_ns
        self.error = error


class SpanRecorder(SpanWriter):
    """Writes turns and judgements as OpenTelemetry spans.

    Args:
        tracer_provider: the provider to use; None means the global one, looked up at each call
            until an SDK provider is installed (so a recorder made before
            [`ragaudit.tracing.configure`][ragaudit.tracing.configure] starts tracing once it runs).
        capture_content: record questions, answers, documents, prompts and reasons. None means
            on unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``NO_CONTENT``,
            ``false`` or ``0``. Off, only ids, scores and sizes (``ragaudit.*.chars``) are kept.
        max_attribute_chars: longer strings (every string attribute, content or not) are cut and
            marked ``…[truncated N chars]``.
        redact: applied to every text before it is recorded (after it, the text is cut).
        content: the [`ContentPolicy`][ragaudit.content.ContentPolicy] deciding every recorded text (the
            Auditor passes its own); instead of *capture_content* and *redact*, not with them.
        max_documents: documents recorded per retrieval span, top ranks first; the total is
            ``ragaudit.document.count`` and the number left out ``ragaudit.document.omitted``.
        judge_trace: ``"turn"`` (default): the judge span is a child of the turn span, in the
            turn's trace; ``"separate"``: it is the root of a trace of its own, linked to the turn,
            so the turn's trace lasts only as long as the answer did. None: ``$RAGAUDIT_JUDGE_TRACE``.

    ``enabled`` is False while the provider is the API's no-op one; then every method returns at
    once ([`start_turn`][ragaudit.tracing.SpanRecorder.start_turn] gives a handle whose ids are None). No method raises:
    a failure is logged once per kind on the ``ragaudit`` logger and the span data is dropped.
    """

    # --- turns ---------------------------------------------------------------------------------
    def start_turn(
        self,
        name: str = c.SPAN_TURN,
        start_ns: int | None = None,
        parent: Context | None = None,
    ) -> TurnHandle:
        """Start the turn span now, as a child of *parent* (None: the current context).

        The span is not made current. Returns a [`TurnHandle`][ragaudit.tracing.TurnHandle] for
        [`end_turn`][ragaudit.tracing.SpanRecorder.end_turn]; its ids are None when tracing is disabled or the sampler
        dropped the span (then nothing refers to a trace that will never exist: no judge span in it, no scores sent to
        it).
        """
        tracer = self._tracer if self._tracer is not None else self._current_tracer()
        if tracer is None:
            return _DISABLED
        try:
            if start_ns is None:
                start_ns = time.time_ns()
            span = tracer.start_span(
                name, context=parent, kind=SpanKind.INTERNAL, attributes=self._turn_attrs, start_time=start_ns
            )
            sc = span.get_span_context()
            if not sc.is_valid:
                return _DISABLED
            if not span.is_recording():  # sampled out: end it, but give out no ids
                return TurnHandle(None, None, span, start_ns, sampled_out=True)
            root = not _trace_api.get_current_span(parent).get_span_context().is_valid
            return TurnHandle(f"{sc.trace_id:032x}", f"{sc.span_id:016x}", span, start_ns, root, name)
        except Exception as exc:
            self._report("start_turn", exc)
            return _DISABLED

    def mark_agent(self, handle: TurnHandle, agent: str) -> None:
        """Make the open turn span of *handle* an agent's: GenAI ``invoke_agent`` (span name
        ``invoke_agent {agent}``, ``gen_ai.agent.name``), OpenInference AGENT, Langfuse agent.
        Call before [`end_turn`][ragaudit.tracing.SpanRecorder.end_turn]; never raises."""
        if handle._span is not None and isinstance(agent, str):
            handle._agent = agent

    def end_turn(
        self,
        handle: TurnHandle,
        turn: RagTurn,
        *,
        judge_status: str | None = None,
        retrieval_metrics: Mapping[str, float] | None = None,
        record: AuditRecord | None = None,
    ) -> None:
        """Record *turn* on the span *handle* opened, add its retrieval, LLM and tool child spans, end it.

        Children use their own ``started_at``/``ended_at`` (falling back to the turn's); when the
        turn has documents but no ``retrievals``, one retrieval span is made from its documents
        (retrieval spans [`start_children`][ragaudit.tracing.SpanRecorder.start_children] started are ended here). The
        span gets error status when ``turn.error`` is set and ends at ``turn.ended_at``. *record*: the turn's audit
        record when it was judged before its span ends (inline): its graded metrics and citation scores go
        on the turn span, its document grades on the retrieval spans.
        """
        span = handle._span
        if span is None:
            return
        handle._span = None
        end_ns = turn.ended_at if turn.ended_at is not None else time.time_ns()
        try:
            if not span.is_recording():  # sampled out: nothing would be exported
                return
            self._fill_turn(span, handle, turn, end_ns, judge_status, retrieval_metrics, record)
        except Exception as exc:
            self._report("end_turn", exc)
        finally:
            handle._texts = None
            try:
                span.end(end_time=end_ns)
            except Exception as exc:
                self._report("end_turn", exc)

    def record_turn(
        self,
        turn: RagTurn,
        *,
        parent: Context | None = None,
        judge_status: str | None = None,
        retrieval_metrics: Mapping[str, float] | None = None,
    ) -> RagTurn:
        """Start and end a turn span for a turn that already happened.

        Returns ``turn.with_trace(trace_id, span_id, retrieval_span_ids)``; *turn* unchanged when
        tracing is off; *turn* with ``sampled_out=True`` when the sampler dropped its span.
        """
        handle = self.start_turn(start_ns=turn.started_at, parent=parent)
        if handle.trace_id is None or handle.span_id is None:
            self.end_turn(handle, turn)  # a sampled-out span still ends
            return replace(turn, sampled_out=True) if handle.sampled_out else turn
        traced = self.start_children(handle, turn)
        self.end_turn(handle, traced, judge_status=judge_status, retrieval_metrics=retrieval_metrics)
        return traced

    def start_children(self, handle: TurnHandle, turn: RagTurn) -> RagTurn:
        """Start *turn*'s retrieval spans under the open turn span of *handle*
        ([`end_turn`][ragaudit.tracing.SpanRecorder.end_turn] ends them) and return *turn* pointing at its spans:
        ``trace_id``, ``span_id`` and ``retrieval_span_ids``, which exporters annotating retrieved documents need.
        *turn* unchanged when the span is not recorded. Never raises."""
        span = handle._span
        tracer = self._tracer
        if span is None or tracer is None or handle.trace_id is None or handle.span_id is None:
            return turn
        try:
            if handle._retrievals is None:
                handle._retrievals = self._start_retrievals(tracer, span, handle, turn)
            ids = [format(r.span.get_span_context().span_id, "016x") for r in handle._retrievals]
            return turn.with_trace(handle.trace_id, handle.span_id, ids)
        except Exception as exc:
            self._report("record_turn", exc)
            return turn

    def _start_retrievals(self, tracer: Tracer, span: Span, handle: TurnHandle, turn: RagTurn) -> list[_OpenRetrieval]:
        parent = _trace_api.set_span_in_context(span)
        end_ns = turn.ended_at if turn.ended_at is not None else time.time_ns()
        retrievals = turn.retrievals
        if not retrievals and turn.documents:
            retrievals = (Retrieval(name="", documents=turn.documents, query=turn.query),)
        texts = _texts_of(self, handle)
        return [self._retrieval_span(tracer, parent, r, handle._start_ns, end_ns, turn.query, texts)
                for r in retrievals]

    def _fill_turn(
        self,
        span: Span,
        handle: TurnHandle,
        turn: RagTurn,
        end_ns: int,
        judge_status: str | None,
        retrieval_metrics: Mapping[str, float] | None,
        record: AuditRecord | None,
    ) -> None:
        capture = self.capture_content
        texts = _texts_of(self, handle)
        attrs: dict[str, Any] = {
            c.ATTR_TURN_ID: turn.turn_id,
            c.ATTR_CONTENT_CAPTURED: capture,
            c.ATTR_QUERY_CHARS: len(turn.query),
        }
        if turn.framework:
            attrs[c.ATTR_FRAMEWORK] = turn.framework
        if turn.model:
            attrs[c.ATTR_MODEL] = turn.model
        if turn.answer is not None:
            attrs[c.ATTR_ANSWER_CHARS] = len(turn.answer)
        if handle._agent is not None:
            name = c.agent_span_name(handle._agent)
            span.update_name(name)
            attrs.update({c.GEN_AI_OPERATION_NAME: c.GEN_AI_OPERATION_INVOKE_AGENT,
                          c.GEN_AI_AGENT_NAME: handle._agent, c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_AGENT,
                          c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_AGENT})
            if turn.model:
                attrs[c.GEN_AI_REQUEST_MODEL] = turn.model
            # required on an agent span: the provider of the agent's model (its calls say it)
            provider = next((g.provider for g in turn.generations if g.provider), None)
            if provider is not None:
                attrs[c.GEN_AI_PROVIDER_NAME] = provider
        if handle._root:
            attrs[c.LANGFUSE_TRACE_NAME] = c.agent_span_name(handle._agent) if handle._agent else handle._name
        self._who(attrs, turn.metadata, texts)
        if capture:
            query = self._text(turn.query, texts)
            self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, query, c.MIME_TEXT)
            if handle._root:
                attrs[c.LANGFUSE_TRACE_INPUT] = query
            if turn.answer is not None:
                answer = self._text(turn.answer, texts)
                self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, answer,
                         c.MIME_TEXT)
                if handle._root:
                    attrs[c.LANGFUSE_TRACE_OUTPUT] = answer
            if turn.metadata:
                self._metadata(attrs, turn.metadata, trace_level=not handle._root, texts=texts)
        self._evidence_attributes(attrs, turn, retrieval_metrics, texts)
        if judge_status:
            attrs[c.ATTR_JUDGE_STATUS] = judge_status
        # A full audit judged before the turn span ends (inline): graded metrics, citation scores.
        attrs.update(turn_audit_attributes(record))
        if turn.error:
            self._mark_error(span, attrs, turn.error, c.error_type_of(turn.error))
        span.set_attributes(self._bounded(attrs))

        tracer = self._tracer
        if tracer is None:
            return
        parent = _trace_api.set_span_in_context(span)
        start_ns = handle._start_ns
        opened = handle._retrievals
        if opened is None:
            opened = self._start_retrievals(tracer, span, handle, turn)
        handle._retrievals = []
        grades = record_grades(record)
        for retrieval in opened:
            self._end_retrieval(retrieval, grades)
        # The conversation id goes on each chat span too (the convention's inference-span attribute).
        conversation = attrs.get(c.GEN_AI_CONVERSATION_ID)
        for generation in turn.generations:
            self._generation_span(tracer, parent, generation, start_ns, end_ns, conversation, texts)
        for call in turn.tool_calls:
            self._tool_span(tracer, parent, call, start_ns, end_ns, texts)

    def _evidence_attributes(self, attrs: dict[str, Any], turn: RagTurn,
                             retrieval_metrics: Mapping[str, float] | None, texts: TextMemo | None = None) -> None:
        """The turn span's documents, citations, ground truth and ground-truth metrics."""
        capture = self.capture_content
        docs = turn.documents
        attrs[c.ATTR_DOCUMENT_COUNT] = len(docs)
        if docs:
            attrs[c.ATTR_DOCUMENT_IDS] = [d.id for d in docs[: self.max_documents]]
            truncated = [d.id for d in docs[: self.max_documents] if d.truncated]
            if truncated:
                attrs[c.ATTR_DOCUMENT_TRUNCATED_IDS] = truncated
        cits = turn.citations
        attrs[c.ATTR_CITATION_COUNT] = len(cits)
        attrs[c.ATTR_CITATIONS] = _dumps(
            [
                {
                    "doc_id": cit.doc_id,
                    "rank": cit.rank,
                    "marker": self._text(cit.marker, texts) if capture and cit.marker is not None else None,
                    "method": cit.method,
                }
                for cit in cits
            ]
        )
        if cits:
            attrs[c.ATTR_CITATION_DOC_IDS] = [cit.doc_id for cit in cits]
        if turn.relevant_ids is not None:
            attrs[c.ATTR_RELEVANT_IDS] = _dumps(dict(turn.relevant_ids))
        if retrieval_metrics:
            for metric, value in retrieval_metrics.items():
                if value is not None and not math.isnan(value):
                    attrs[c.retrieval_metric_key(metric)] = float(value)

    def _retrieval_span(
        self, tracer: Tracer, parent: Context, r: Retrieval, start_ns: int, end_ns: int, turn_query: str,
        texts: TextMemo | None = None,
    ) -> _OpenRetrieval:
        capture = self.capture_content
        attrs = dict(self._retrieval_attrs)
        if r.name:
            attrs[c.GEN_AI_DATA_SOURCE_ID] = r.name
        query = r.query if r.query is not None else turn_query
        attrs[c.ATTR_QUERY_CHARS] = len(query)
        if capture:
            text = self._text(query, texts)
            self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, text, c.MIME_TEXT)
            attrs[c.GEN_AI_RETRIEVAL_QUERY_TEXT] = text
        # Top ranks first: documents arrive in retrieval order, rank 1 first.
        recorded = r.documents[: self.max_documents]
        attrs[c.ATTR_DOCUMENT_COUNT] = len(r.documents)
        attrs[c.ATTR_DOCUMENT_OMITTED] = len(r.documents) - len(recorded)
        attrs[c.ATTR_DOCUMENT_CHARS] = [len(d.content) for d in recorded]
        if r.used_ids is not None:
            used = set(r.used_ids)
            attrs[c.ATTR_DOCUMENT_USED] = [d.id in used for d in recorded]
            attrs[c.ATTR_DOCUMENT_USED_COUNT] = sum(d.id in used for d in r.documents)
        summary = []
        for i, doc in enumerate(recorded):
            keys = c.document_keys(i)
            attrs[keys.id] = doc.id
            if doc.score is not None:
                attrs[keys.score] = doc.score
            meta: dict[str, Any] = {"rank": doc.rank}
            # A source is an identifier (kept with capture off), but a path or URL may hold what
            # redact hides, or a credential.
            source = self._text(doc.source, texts) if doc.source is not None else None
            if source is not None:
                meta["source"] = source
            if capture:
                attrs[keys.content] = self._text(doc.content, texts)
                meta.update((texts if texts is not None else self.content_policy).metadata(doc.metadata) or {})
            attrs[keys.metadata] = self._json(meta)
            summary.append(_document_summary(doc.id, doc.score, doc.rank, source))
        # One JSON text for all three (see _document_summary): the GenAI documents, and the span's
        # output for Phoenix (output.value: a mime type never goes out without its value) and Langfuse.
        documents = _dumps(summary)
        self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, documents, c.MIME_JSON)
        attrs[c.GEN_AI_RETRIEVAL_DOCUMENTS] = documents
        start = r.started_at if r.started_at is not None else start_ns
        end = r.ended_at if r.ended_at is not None else end_ns
        # CLIENT: the convention's kind for a retrieval (a call to a store, even an embedded one).
        span = tracer.start_span(c.retrieval_span_name(r.name), context=parent, kind=SpanKind.CLIENT,
                                 attributes=self._bounded(attrs), start_time=start)
        return _OpenRetrieval(span, recorded, end, r.error)

    def _end_retrieval(self, opened: _OpenRetrieval, grades: Mapping[str, int] | None) -> None:
        span = opened.span
        try:
            extra = retrieval_grades(opened.recorded, grades)
            if opened.error:
                self._mark_error(span, extra, opened.error, c.error_type_of(opened.error))
            if extra:
                span.set_attributes(self._bounded(extra))
        finally:
            span.end(end_time=opened.end_ns)

    def _generation_span(
        self, tracer: Tracer, parent: Context, g: Generation, start_ns: int, end_ns: int,
        conversation: str | None = None, texts: TextMemo | None = None,
    ) -> None:
        attrs = dict(self._generation_attrs)
        if conversation is not None:
            attrs[c.GEN_AI_CONVERSATION_ID] = conversation
        if g.model:
            attrs[c.GEN_AI_REQUEST_MODEL] = attrs[c.LLM_MODEL_NAME] = g.model
            attrs[c.LANGFUSE_OBSERVATION_MODEL_NAME] = g.model
        if g.provider:
            attrs[c.GEN_AI_PROVIDER_NAME] = attrs[c.LLM_PROVIDER] = g.provider
        self._usage(attrs, g.input_tokens, g.output_tokens)
        if g.prompt is not None:
            attrs[c.ATTR_PROMPT_CHARS] = len(g.prompt)
        if g.output is not None:
            attrs[c.ATTR_ANSWER_CHARS] = len(g.output)
        if self.capture_content:
            if g.messages:
                self._messages(attrs, g.messages, texts)
            elif g.prompt is not None:
                prompt = self._text(g.prompt, texts)
                self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, prompt,
                         c.MIME_TEXT)
                role_key, content_key = c.input_message_keys(0)
                attrs[role_key], attrs[content_key] = "user", prompt
            if g.tool_calls:
                self._tool_call_reply(attrs, g, texts)
            elif g.output is not None:
                output = self._text(g.output, texts)
                self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, output,
                         c.MIME_TEXT)
                role_key, content_key = c.output_message_keys(0)
                attrs[role_key], attrs[content_key] = "assistant", output
        start = g.started_at if g.started_at is not None else start_ns
        end = g.ended_at if g.ended_at is not None else end_ns
        self._child(tracer, parent, c.chat_span_name(g.model), SpanKind.CLIENT, attrs, start, end, g.error)

    def _tool_call_reply(self, attrs: dict[str, Any], g: Generation, texts: TextMemo | None = None) -> None:
        """A reply that asked for tools, with capture on: OpenInference
        ``llm.output_messages.0.message.tool_calls.{j}.tool_call.*`` (Phoenix) and the GenAI output
        message with ``tool_call`` parts, as a JSON string (``gen_ai.output.messages``, also the
        observation's output: Langfuse renders it as the reply). A JSON string, not a structured
        value: the SDK could send a map, but Langfuse's OTLP reader decodes no ``kvlistValue`` (it
        would show the wire wrapper) and Jaeger shows a map as its JSON text anyway (jaeger-ui
        renders a JSON string tag as a tree)."""
        role_key, content_key = c.output_message_keys(0)
        attrs[role_key] = "assistant"
        parts: list[dict[str, Any]] = []
        if g.output:
            attrs[content_key] = text = self._text(g.output, texts)
            parts.append({"type": "text", "content": text})
        for j, call in enumerate(g.tool_calls[:_MAX_MESSAGES]):
            id_key, name_key, arguments_key = c.output_tool_call_keys(0, j)
            attrs[name_key] = call.name
            part: dict[str, Any] = {"type": "tool_call", "name": call.name}
            if call.call_id:
                attrs[id_key] = part["id"] = call.call_id
            if call.arguments is not None:
                attrs[arguments_key] = arguments = self._text(call.arguments, texts)
                part["arguments"] = _json_or_text(arguments)
            parts.append(part)
        reply = self._json([{"role": "assistant", "parts": parts, "finish_reason": "tool_call"}])
        attrs[c.GEN_AI_OUTPUT_MESSAGES] = reply
        self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, reply, c.MIME_JSON)

    def _messages(self, attrs: dict[str, Any], messages: Sequence[tuple[str, str]],
                  texts: TextMemo | None = None) -> None:
        """The chat messages sent: a JSON list of ``{role, content}`` as the input (Langfuse renders
        it as a conversation) and OpenInference ``llm.input_messages.{i}`` (Phoenix). Beyond
        ``_MAX_MESSAGES`` only the first (usually the system prompt) and the latest are kept."""
        if len(messages) > _MAX_MESSAGES:
            messages = [messages[0], *messages[len(messages) - _MAX_MESSAGES + 1:]]
        # Each content gets an equal share of the cap, so that the JSON stays whole (valid) when cut.
        share = max(self.max_attribute_chars // max(len(messages), 1) - 32, 0)
        listed = []
        for i, (role, content) in enumerate(messages):
            text = self._text(content, texts)
            role_key, content_key = c.input_message_keys(i)
            attrs[role_key], attrs[content_key] = role, text
            listed.append({"role": role, "content": truncate(text, share) if len(text) > share else text})
        self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, _dumps(listed), c.MIME_JSON)

    def _tool_span(self, tracer: Tracer, parent: Context, t: ToolCall, start_ns: int, end_ns: int,
                   texts: TextMemo | None = None) -> None:
        attrs = dict(self._tool_attrs)
        if t.name:
            attrs[c.GEN_AI_TOOL_NAME] = attrs[c.TOOL_NAME] = t.name
        if t.call_id:
            attrs[c.GEN_AI_TOOL_CALL_ID] = t.call_id
        if t.arguments is not None:
            attrs[c.ATTR_TOOL_ARGUMENTS_CHARS] = len(t.arguments)
        if t.output is not None:
            attrs[c.ATTR_TOOL_OUTPUT_CHARS] = len(t.output)
        if self.capture_content:
            if t.arguments is not None:
                arguments = self._text(t.arguments, texts)
                attrs[c.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
                self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, arguments,
                         c.MIME_JSON if arguments.startswith(("{", "[")) else c.MIME_TEXT)
            if t.output is not None:
                output = self._text(t.output, texts)
                attrs[c.GEN_AI_TOOL_CALL_RESULT] = output
                self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, output,
                         c.MIME_TEXT)
        start = t.started_at if t.started_at is not None else start_ns
        end = t.ended_at if t.ended_at is not None else end_ns
        self._child(tracer, parent, c.tool_span_name(t.name), SpanKind.INTERNAL, attrs, start, end, t.error)

    def _child(
        self,
        tracer: Tracer,
        parent: Context,
        name: str,
        kind: SpanKind,
        attrs: dict[str, Any],
        start_ns: int,
        end_ns: int,
        error: str | None,
    ) -> None:
        span = tracer.start_span(
            name, context=parent, kind=kind, attributes=self._bounded(attrs), start_time=start_ns
        )
        try:
            if error:
                extra: dict[str, Any] = {}
                self._mark_error(span, extra, error, c.error_type_of(error))
                span.set_attributes(extra)
        finally:
            span.end(end_time=end_ns)

    # --- judgements ----------------------------------------------------------------------------
    def record_judgement(self, turn: RagTurn, judgement: Judgement, *, start_ns: int | None = None) -> None:
        """Record *judgement* of *turn* as a ``ragaudit.judge`` span.

        With ``judge_trace="turn"`` the span's parent is the turn span (from
        ``turn.trace_id``/``turn.span_id``) and its one link to the turn (OpenInference) says
        ``opentracing.ref_type=child_of`` (Jaeger keeps the parent reference CHILD_OF); with
        ``"separate"`` it is the root of a
        new trace with a link to the turn span. A turn that was never traced gets a judge span of
        its own trace. Present scores become ``ragaudit.judge.<score>`` attributes; each of the
        three scores becomes a ``gen_ai.evaluation.result`` event, where a missing score has no
        value and the label ``missing`` (never 0). *start_ns* defaults to now minus the
        judgement's latency. A turn whose span the sampler dropped gets no judge span. (The
        Auditor writes judge spans from its records, with `JudgeSpanExporter`.)
        """
        from ..turn_audit import audit_record

        try:
            record = audit_record(turn, judgement, self.content_policy, tracer_provider=self._provider,
                                  judge_started_at=start_ns, ground_truth_metrics=None)
        except Exception as exc:
            self._report("record_judgement", exc)
            return
        write_judge_span(self, record)


def _texts_of(writer: SpanWriter, handle: TurnHandle) -> TextMemo:
    """The memo of *handle*'s turn (made at its first text)."""
    texts = handle._texts
    if texts is None:
        texts = handle._texts = TextMemo(writer.content_policy)
    return texts


def _document_summary(doc_id: str, score: float | None, rank: int, source: str | None) -> dict[str, Any]:
    """One entry of ``gen_ai.retrieval.documents``: ``id`` always, ``score`` only when the retriever
    gave one (the convention asks for id and score, SHOULD, not MUST: a made-up score or a null would
    claim what the retriever never said, so an unscored document has none), ``rank`` and ``source``
    (ours). A JSON string, not a structured value: the entries are maps, which Langfuse's OTLP reader
    does not decode (``kvlistValue``) and Jaeger shows as JSON text anyway."""
    entry: dict[str, Any] = {"id": doc_id}
    if score is not None:
        entry["score"] = score
    entry["rank"] = rank
    if source is not None:
        entry["source"] = source
    return entry


def _json_or_text(text: str) -> Any:
    """Tool-call arguments as the object they are (the convention: an object, deserialised where the
    instrumentation can), or the text when it is not JSON (or was cut)."""
    try:
        return json.loads(text)
    except ValueError:
        return text
