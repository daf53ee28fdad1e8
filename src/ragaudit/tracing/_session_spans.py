"""The session judge span: one ``ragaudit.session`` span per judged session.

A session spans many traces (one per turn), so its judge span is the root of a trace of its own with
a **span link** to every turn's span (Jaeger and Phoenix show the links; Langfuse files the trace in
the session by ``session.id``). It carries the session verdict (``ragaudit.session.*``), the judge's
identity, model and usage, the ``session.*`` ``gen_ai.evaluation.result`` span events (as the log
records, `session_evaluation_attributes`) and one
``ragaudit.session.contradiction`` event per contradiction (both sentences' texts with content
capture on, their numbers always).
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind

from ..content import otlp_safe
from ..sessions import SessionRecord
from . import conventions as c
from ._span_base import SpanWriter, _span_context
from .evaluation_logs import session_evaluation_attributes

__all__ = ["write_session_span"]

_MAX_LINKS = 64  # the SDK's default link limit is 128; the turns cap (max_session_turns) is lower by default


def write_session_span(writer: SpanWriter, record: SessionRecord) -> None:
    """Record *record* as a ``ragaudit.session`` span with *writer*; never raises."""
    tracer = writer._tracer if writer._tracer is not None else writer._current_tracer()
    if tracer is None:
        return
    try:
        _session_span(writer, tracer, record)
    except Exception as exc:
        writer._report("record_session", exc)


def _verdict_attrs(writer: SpanWriter, record: SessionRecord) -> dict[str, Any]:
    j = record.judgement
    v = j.verdict
    attrs: dict[str, Any] = {c.ATTR_SESSION_TURNS: j.turns, c.ATTR_SESSION_TURNS_JUDGED: j.turns_judged,
                             c.ATTR_SESSION_PARTIAL: j.partial, c.ATTR_SESSION_ENDED: j.ended,
                             c.ATTR_JUDGE_NAME: v.judge}
    for reason, count in j.missed.items():
        attrs[c.ATTR_SESSION_MISSED_PREFIX + reason] = count
    if j.resolved is not None:
        attrs[c.ATTR_SESSION_RESOLVED] = j.resolved
    if j.resolved_turn is not None:
        attrs[c.ATTR_SESSION_RESOLVED_TURN] = j.resolved_turn
    if j.groundedness is not None:
        attrs[c.ATTR_SESSION_GROUNDEDNESS] = j.groundedness
    scores = j.scores()
    if scores["session.contradictions"] is not None:
        attrs[c.ATTR_SESSION_CONTRADICTIONS] = len(j.contradictions)
        attrs[c.ATTR_SESSION_REPEATED] = len(j.repeated)
    identity = v.identity.to_dict() if v.identity is not None else None
    attrs.update(c.judge_identity_attributes(identity))
    attrs.update(c.evaluator_attributes(v.judge, identity))
    if v.latency_s is not None:
        attrs[c.ATTR_JUDGE_LATENCY_S] = float(v.latency_s)
    for key, value in v.usage.items():
        if isinstance(value, int):
            attrs[c.judge_usage_key(key)] = value
    model = v.details.get("response_model") or v.details.get("model")
    if isinstance(model, str) and model:
        attrs[c.GEN_AI_REQUEST_MODEL] = attrs[c.LANGFUSE_OBSERVATION_MODEL_NAME] = attrs[c.LLM_MODEL_NAME] = model
    writer._usage(attrs, v.usage.get("prompt_tokens"), v.usage.get("completion_tokens"))
    return attrs


def _session_span(writer: SpanWriter, tracer: Any, record: SessionRecord) -> None:
    j = record.judgement
    v = j.verdict
    capture = writer.capture_content
    end_ns = time.time_ns()
    start_ns = end_ns - int((v.latency_s or 0.0) * 1e9)
    links = [Link(ctx, writer._bounded({c.LINK_TYPE: c.LINK_TYPE_SESSION_TURN, c.ATTR_TURN_ID: turn.turn_id}))
             for turn in record.request.turns[-_MAX_LINKS:]
             if (ctx := _span_context(turn.trace_id, turn.span_id)) is not None]
    attrs = dict(writer._judge_attrs)
    attrs[c.LANGFUSE_TRACE_NAME] = c.SPAN_SESSION
    attrs[c.SESSION_ID] = attrs[c.GEN_AI_CONVERSATION_ID] = writer._text(record.session_id)
    attrs.update(_verdict_attrs(writer, record))
    reason = writer.content_policy.reason(v.reason, writer.max_attribute_chars)
    reason = otlp_safe(reason) if reason is not None else None
    error = otlp_safe(writer.content_policy.error(v.error, limit=writer.max_attribute_chars) or "") if v.error else None
    if reason is not None:
        attrs[c.ATTR_JUDGE_REASON] = reason
    if error is not None:
        attrs[c.ATTR_JUDGE_ERROR] = error
    shown: dict[str, Any] = {"session_id": record.session_id, "turn_ids": [t.turn_id for t in record.request.turns]}
    if capture:
        shown["turns"] = [{"query": writer._text(t.query), "answer": writer._text(t.answer or "")}
                          for t in record.request.turns]
    output = {name: value for name, value in j.scores().items() if value is not None}
    writer._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, writer._json(shown), c.MIME_JSON)
    writer._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, writer._json(output),
               c.MIME_JSON)
    span = tracer.start_span(c.SPAN_SESSION, context=Context(), kind=SpanKind.INTERNAL,
                             attributes=writer._bounded(attrs), links=links, start_time=start_ns)
    try:
        for event in session_evaluation_attributes(record, reason, error):
            span.add_event(c.GEN_AI_EVALUATION_RESULT, writer._bounded(event), timestamp=end_ns)
        for pair in j.contradictions:
            event = {"first_turn": pair.first_turn, "first_sentence": pair.first_sentence,
                     "second_turn": pair.second_turn, "second_sentence": pair.second_sentence}
            if capture:
                event.update(first_text=writer._text(pair.first_text), second_text=writer._text(pair.second_text))
            span.add_event(c.EVENT_SESSION_CONTRADICTION, writer._bounded(event), timestamp=end_ns)
        if v.error:
            extra: dict[str, Any] = {}
            writer._mark_error(span, extra, v.error, c.ERROR_TYPE_JUDGE_ERROR)
            span.set_attributes(extra)
    finally:
        span.end(end_time=end_ns)
