"""Judge spans: one ``ragaudit.judge`` span per judged [`AuditRecord`][ragaudit.AuditRecord] (and one
``ragaudit.session`` span per judged session, `ragaudit.tracing._session_spans`).

`JudgeSpanExporter` is the Auditor's exporter of judge spans; each record is written with the
tracer provider its turn was traced with and through the record's own content policy.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace as _trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Tracer

from .. import _fork
from .._export import BaseExporter, ExportResult
from ..content import ContentPolicy, otlp_safe
from ..records import AuditRecord, Judgement
from ..sessions import SessionRecord
from . import conventions as c
from ._audit_spans import full_audit_attributes, sentence_events
from ._session_spans import write_session_span
from ._span_base import SpanWriter, _span_context
from .evaluation_logs import evaluation_attributes

__all__ = ["JudgeSpanExporter", "write_judge_span"]


def write_judge_span(writer: SpanWriter, record: AuditRecord) -> None:
    """Record *record*'s judgement as a ``ragaudit.judge`` span with *writer* (never raises; see
    [`record_judgement`][ragaudit.tracing.SpanRecorder.record_judgement])."""
    tracer = writer._tracer if writer._tracer is not None else writer._current_tracer()
    if tracer is None or record.judgement is None or record.turn.sampled_out:
        return  # no trace to judge in: no orphan judge trace either
    try:
        _judge_span(writer, tracer, record, record.judgement)
    except Exception as exc:
        writer._report("record_judgement", exc)


def _judge_span(self: SpanWriter, tracer: Tracer, record: AuditRecord, j: Judgement) -> None:
    turn = record.turn
    start_ns = record.judge_started_at
    capture = self.capture_content
    end_ns = time.time_ns()
    if start_ns is None:
        latency = j.latency_s if j.latency_s is not None and j.latency_s >= 0 else 0.0
        start_ns = end_ns - int(latency * 1e9)
    turn_ctx = _span_context(turn.trace_id, turn.span_id)
    links: list[Link] | None = None
    attrs = dict(self._judge_attrs)
    if turn_ctx is None:
        parent = Context()
    else:
        # Exactly one link to the judged turn in either mode: OpenInference requires it of an
        # annotation written after the turn ended, which a background judgement always is, and a
        # child span gets it too (its parent alone does not say what it judges).
        # As a child, the link says child_of: Jaeger's translation turns a link to the parent into
        # the parent reference's type, FOLLOWS_FROM unless the link names another.
        child = self.judge_trace == "turn"
        link_attrs = {c.LINK_TYPE: c.LINK_TYPE_JUDGED_TURN, **({c.LINK_REF_TYPE: c.REF_TYPE_CHILD_OF} if child else {})}
        links = [Link(turn_ctx, self._bounded(link_attrs))]
        parent = _trace_api.set_span_in_context(NonRecordingSpan(turn_ctx)) if child else Context()
    if turn_ctx is None or self.judge_trace != "turn":
        # The judge span is a trace's root: name that trace and put it in the turn's session.
        attrs[c.LANGFUSE_TRACE_NAME] = c.SPAN_JUDGE
        self._who(attrs, turn.metadata)
    attrs[c.ATTR_TURN_ID] = turn.turn_id
    attrs[c.ATTR_JUDGE_NAME] = j.judge
    _judge_model(self, attrs, j)
    identity_dict = j.identity.to_dict() if j.identity is not None else None
    attrs.update(c.judge_identity_attributes(identity_dict))
    attrs.update(c.evaluator_attributes(j.judge, identity_dict, turn.metadata))
    scores = j.scores()
    output: dict[str, Any] = dict(scores)
    reason, error, status = _verdict_attributes(self, attrs, output, j)
    # What the judge was shown, as the judge observation's input: the documents' ids always, the
    # question and answer with content capture on.
    shown: dict[str, Any] = {"turn_id": turn.turn_id, "document_ids": [d.id for d in turn.documents]}
    if capture:
        shown = {"query": self._text(turn.query),
                 "answer": self._text(turn.answer) if turn.answer is not None else None, **shown}
    self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, self._json(shown),
             c.MIME_JSON)
    self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT,
             self._json(output), c.MIME_JSON)
    # The full audit (sentence verdicts, grades, graded metrics, citation checks): see _audit_spans.
    attrs.update(full_audit_attributes(record, capture, self._text))
    sentences, dropped = sentence_events(j, capture, self._text)
    if dropped:
        attrs[c.ATTR_SENTENCES_EVENTS_DROPPED] = dropped

    # An LLM judge's span is also a GenAI inference span (operation chat, its provider; CLIENT: a
    # call to a model). Its name stays ragaudit.judge: the EVALUATOR span Phoenix and Langfuse show.
    llm = _llm_judge(attrs, identity_dict)
    span = tracer.start_span(
        c.SPAN_JUDGE,
        context=parent,
        kind=SpanKind.CLIENT if llm else SpanKind.INTERNAL,
        attributes=self._bounded(attrs),
        links=links,
        start_time=start_ns,
    )
    try:
        # The same gen_ai.evaluation.result attributes as the log records (tracing.evaluation_logs):
        # gen_ai.response.id names the evaluated completion (when known), never the judge's own.
        for event in evaluation_attributes(turn, j, reason, error):
            span.add_event(c.GEN_AI_EVALUATION_RESULT, self._bounded(event), timestamp=end_ns)
        for sentence_event in sentences:
            span.add_event(c.EVENT_SENTENCE, self._bounded(sentence_event), timestamp=end_ns)
        if j.error:
            extra: dict[str, Any] = {}
            error_type = c.error_type_of(j.error)
            self._mark_error(span, extra, j.error,
                             c.ERROR_TYPE_JUDGE_ERROR if error_type == c.ERROR_TYPE_OTHER else error_type, status)
            span.set_attributes(extra)
    finally:
        span.end(end_time=end_ns)

def _llm_judge(attrs: dict[str, Any], identity: dict[str, str] | None) -> bool:
    """Add the inference-span attributes when the judge asked a model (its identity names one)."""
    if not identity or not identity.get("model"):
        return False
    attrs[c.GEN_AI_OPERATION_NAME] = c.GEN_AI_OPERATION_CHAT
    attrs.setdefault(c.GEN_AI_REQUEST_MODEL, identity["model"])
    attrs[c.GEN_AI_PROVIDER_NAME] = attrs[c.LLM_PROVIDER] = c.provider_of_endpoint(identity.get("endpoint"))
    return True


def _verdict_attributes(self: SpanWriter, attrs: dict[str, Any], output: dict[str, Any],
                        j: Judgement) -> tuple[str | None, str | None, int | None]:
    """Scores, missing scores, reason, error, latency and usage on the judge span (and the
    observation's *output*); returns the reason and error as recorded, and the HTTP status."""
    scores = j.scores()
    missing = [name for name, value in scores.items() if value is None]
    for name, value in scores.items():
        if value is not None:
            attrs[c.judge_score_key(name)] = value
    if missing:
        attrs[c.ATTR_JUDGE_MISSING_SCORES] = missing
    # The reason: with capture on, or kept on its own (capture_reason); the error follows capture.
    reason = self.content_policy.reason(j.reason, self.max_attribute_chars)
    reason = otlp_safe(reason) if reason is not None else None
    if j.reason is not None:
        attrs[c.ATTR_JUDGE_REASON_CHARS] = len(j.reason)
    if reason is not None:
        attrs[c.ATTR_JUDGE_REASON] = reason
        output["reason"] = reason
    status = j.details.get("status_code")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    error = (otlp_safe(self.content_policy.error(j.error, status=status, limit=self.max_attribute_chars) or "")
             if j.error else None)
    if error is not None:
        attrs[c.ATTR_JUDGE_ERROR] = error
        output["error"] = error
    if j.latency_s is not None:
        attrs[c.ATTR_JUDGE_LATENCY_S] = float(j.latency_s)
    for key, value in j.usage.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[c.judge_usage_key(key)] = value
    return reason, error, status


def _judge_model(self: SpanWriter, attrs: dict[str, Any], j: Judgement) -> None:
    """The judge's model and token use where Langfuse (model, usage, hence cost), Jaeger
    (``gen_ai.*``) and Phoenix (``llm.*``) read them."""
    details = j.details
    model = details.get("model")
    response_model = details.get("response_model")
    if isinstance(model, str) and model:
        attrs[c.GEN_AI_REQUEST_MODEL] = model
    if isinstance(response_model, str) and response_model:
        attrs[c.GEN_AI_RESPONSE_MODEL] = response_model
    name = response_model if isinstance(response_model, str) and response_model else model
    if isinstance(name, str) and name:
        attrs[c.LANGFUSE_OBSERVATION_MODEL_NAME] = attrs[c.LLM_MODEL_NAME] = name

    def tokens(*keys: str) -> int | None:
        for key in keys:
            value = j.usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    self._usage(attrs, tokens("prompt_tokens", "input_tokens"), tokens("completion_tokens", "output_tokens"))


class JudgeSpanExporter(BaseExporter):
    """The judge span of every judged record, through the record's policy and tracer provider.

    *default*: the writer settings (judge_trace, caps) and provider of the Auditor; a record whose
    turn was traced with another provider or policy (an integration handler's) gets a writer of its
    own, made once per (policy, provider) and held as long as the policy lives. `force_flush`
    flushes every provider judge spans went to, once each.
    """

    def __init__(self, default: SpanWriter) -> None:
        self._default = default
        self._lock = _fork.lock()
        self._writers: weakref.WeakKeyDictionary[ContentPolicy, list[SpanWriter]] = weakref.WeakKeyDictionary()

    def writer_for(self, record: AuditRecord | SessionRecord) -> SpanWriter:
        """The writer of *record*'s judge span (same policy and provider as its turn or turns)."""
        default = self._default
        provider = record.tracer_provider
        policy = record.content_policy
        if policy is default.content_policy and (provider is None or provider is default.tracer_provider):
            return default
        with self._lock:
            writers = self._writers.setdefault(policy, [])
            for writer in writers:
                if writer.tracer_provider is provider:
                    return writer
            writer = SpanWriter(provider if provider is not None else default.tracer_provider, content=policy,
                                judge_trace=default.judge_trace, max_attribute_chars=default.max_attribute_chars,
                                max_documents=default.max_documents)
            writers.append(writer)
            return writer

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        for record in records:
            if record.judgement is not None:
                write_judge_span(self.writer_for(record), record)
        return ExportResult.SUCCESS

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        """The ``ragaudit.session`` span of every judged session, linked to its turns' spans."""
        for record in records:
            write_session_span(self.writer_for(record), record)
        return ExportResult.SUCCESS

    def providers(self) -> list[SpanWriter]:
        """One writer per tracer provider in use (the default's first)."""
        with self._lock:
            writers = [w for group in list(self._writers.values()) for w in group]
        out, seen = [self._default], {id(self._default.tracer_provider)}
        for writer in writers:
            if id(writer.tracer_provider) not in seen:
                seen.add(id(writer.tracer_provider))
                out.append(writer)
        return out

    @property
    def errors(self) -> int:
        """Spans that never reached the backend (`spans_not_exported`): the Auditor adds them to
        ``stats()["export_errors"]``, so an export that failed (a batch the endpoint refused as too
        large, a dead endpoint) is counted where the rest of the delivery failures are."""
        return self.spans_not_exported()

    def spans_not_exported(self) -> int:
        """Spans the exporters [`ragaudit.tracing.configure`][ragaudit.tracing.configure] installed on the providers
        judge spans went to failed to export so far (a flush says truthfully whether its spans were
        delivered: the SDK's ``force_flush`` returns True even when the export failed). A provider
        of another Auditor, or of the host alone, is not counted."""
        from .setup import spans_not_exported

        seen: dict[int, Any] = {}
        for writer in self.providers():
            provider = writer.tracer_provider
            provider = provider if provider is not None else _trace_api.get_tracer_provider()
            seen.setdefault(id(provider), provider)
        return sum(spans_not_exported(provider) for provider in seen.values())

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Flush every provider judge spans went to within *timeout_s* (shared)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        ok = True
        for writer in self.providers():
            ok = writer.force_flush(max(0.0, deadline - time.monotonic())) and ok
        return ok
