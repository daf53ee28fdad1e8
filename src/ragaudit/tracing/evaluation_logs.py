"""Evaluation results as OpenTelemetry log records: ``gen_ai.evaluation.result`` events.

The OTel GenAI conventions define evaluation results as *events*, and events are log records
(``event_name`` set), not span events: Logfire's live evaluations, Splunk and AWS AgentCore read log
records, and Langfuse drops span events. `EvaluationLogExporter` writes one record per score of
every judgement through the OTel Logs SDK, each carrying the **evaluated** span's trace and span
ids (the model call that produced the answer when the source knows it, else the turn's span), so a
backend files it under the operation it grades. The judge span keeps its span events too
(``SpanRecorder``): both, for backends that read either.

```python
from ragaudit import Auditor
from ragaudit.tracing.evaluation_logs import EvaluationLogExporter

auditor = Auditor(exporters=[EvaluationLogExporter()])  # OTLP/HTTP logs to $OTEL_EXPORTER_OTLP_[LOGS_]ENDPOINT
```

Each record: ``event_name`` and body ``gen_ai.evaluation.result``; attributes
``gen_ai.evaluation.name`` (the score), ``gen_ai.evaluation.score.value`` (absent when the judge gave
none: then ``gen_ai.evaluation.score.label = "missing"`` and ``error.type``, never 0),
``gen_ai.evaluation.explanation`` (the reason, under the content policy), ``gen_ai.response.id``
of the evaluated completion when known (never the judge's own, which is
``ragaudit.judge.response_id``), the judge identity, and ``ragaudit.score.id`` /
``ragaudit.judgement.id``: derived from the trace, the evaluated span, the judge and the score name,
so judging the same trace again (a redelivery, a restart) gives the same ids.

A judged session ([`SessionRecord`][ragaudit.SessionRecord]) gives one record per session number,
named ``session.resolved`` (1 / 0.5 / 0, with the label ``yes`` / ``partly`` / ``no``),
``session.groundedness`` (computed from the turns' sentence verdicts), ``session.contradictions`` and
``session.repeated_turns`` (counts), with ``session.id`` and ``gen_ai.conversation.id``, on the context
of the session's last turn (`session_evaluation_attributes`).

A source that knows the evaluated operation puts its ids in the turn's metadata under
`EVALUATED_SPAN_ID` and `EVALUATED_RESPONSE_ID` (``ragaudit worker`` does).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _fork
from .._export import BaseExporter, ExportResult
from ..content import bounded_attributes, register_headers, register_url
from ..errors import ConfigurationError
from ..records import SCORE_NAMES, AuditRecord, Judgement, RagTurn
from ..sessions import SessionRecord
from . import conventions as c

__all__ = [
    "EVALUATED_RESPONSE_ID",
    "EVALUATED_SPAN_ID",
    "EvaluationLogExporter",
    "evaluation_attributes",
    "judgement_id",
    "score_record_id",
    "session_evaluation_attributes",
]

EVALUATED_SPAN_ID: str = "ragaudit.evaluated.span_id"
"""Turn metadata key: the span id (16 hex digits) of the operation the judgement evaluates."""
EVALUATED_RESPONSE_ID: str = "ragaudit.evaluated.response_id"
"""Turn metadata key: the completion id (``gen_ai.response.id``) of the evaluated model call."""

ATTR_SCORE_ID = "ragaudit.score.id"
ATTR_JUDGEMENT_ID = "ragaudit.judgement.id"

_NAMESPACE = uuid.UUID("6f1d0c1e-8e1b-4f0e-9a57-2b9a4c7e5d10")


def judgement_id(trace_id: str | None, span_id: str | None, turn_id: str, judge: str) -> str:
    """A UUID of one judge's judgement of one turn, the same every time it is judged again."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join((trace_id or "", span_id or "", turn_id, judge))))


def score_record_id(judgement: str, name: str) -> str:
    """The id of score *name* within the judgement with id *judgement*."""
    return str(uuid.uuid5(_NAMESPACE, f"{judgement}\x1f{name}"))


def evaluated_span(turn: RagTurn) -> tuple[str | None, str | None]:
    """``(trace_id, span_id)`` of the operation *turn*'s judgement evaluates."""
    span = turn.metadata.get(EVALUATED_SPAN_ID)
    return turn.trace_id, span if isinstance(span, str) and span else turn.span_id


def evaluation_attributes(turn: RagTurn, judgement: Judgement, reason: str | None, error: str | None
                          ) -> list[dict[str, Any]]:
    """The attributes of each score's ``gen_ai.evaluation.result`` record, in `SCORE_NAMES` order.

    *reason* and *error* are the texts as the content policy lets them out (None: withheld).
    """
    trace_id, span_id = evaluated_span(turn)
    jid = judgement_id(trace_id, span_id, turn.turn_id, judgement.judge)
    identity_dict = judgement.identity.to_dict() if judgement.identity is not None else None
    identity = c.judge_identity_attributes(identity_dict)
    identity.update(c.evaluator_attributes(judgement.judge, identity_dict, turn.metadata))
    # The judge's own completion id stays under ragaudit.judge.response_id: gen_ai.response.id names
    # the completion being evaluated (the convention), set only when the source knows it.
    identity.pop(c.GEN_AI_RESPONSE_ID, None)
    evaluated_response = turn.metadata.get(EVALUATED_RESPONSE_ID)
    scores = judgement.scores()
    out: list[dict[str, Any]] = []
    for name in SCORE_NAMES:
        value = scores[name]
        attrs: dict[str, Any] = {c.GEN_AI_EVALUATION_NAME: name, **identity, ATTR_JUDGEMENT_ID: jid,
                                 ATTR_SCORE_ID: score_record_id(jid, name), c.ATTR_TURN_ID: turn.turn_id,
                                 c.ATTR_JUDGE_NAME: judgement.judge}
        if isinstance(evaluated_response, str) and evaluated_response:
            attrs[c.GEN_AI_RESPONSE_ID] = evaluated_response
        out.append(_scored(attrs, value, reason, error))
    return out


def _scored(attrs: dict[str, Any], value: float | None, reason: str | None, error: str | None) -> dict[str, Any]:
    """*attrs* with the score *value* and its explanation, or, for a score not given, ``missing``
    (never 0) with the error type and the error (else the reason) as the explanation."""
    if value is not None:
        attrs[c.GEN_AI_EVALUATION_SCORE_VALUE] = float(value)
        if reason is not None:
            attrs[c.GEN_AI_EVALUATION_EXPLANATION] = reason
        return attrs
    attrs[c.GEN_AI_EVALUATION_SCORE_LABEL] = c.MISSING_SCORE_LABEL
    attrs[c.ATTR_ERROR_TYPE] = c.ERROR_TYPE_JUDGE_ERROR if error else c.ERROR_TYPE_MISSING_SCORE
    explanation = error if error is not None else reason
    if explanation is not None:
        attrs[c.GEN_AI_EVALUATION_EXPLANATION] = explanation
    return attrs


def session_evaluation_attributes(record: SessionRecord, reason: str | None, error: str | None
                                  ) -> list[dict[str, Any]]:
    """The attributes of each ``session.*`` ``gen_ai.evaluation.result`` record of a judged session
    (*reason*, *error*: as the content policy lets them out). A number the judge did not give is
    ``missing``, never 0."""
    j = record.judgement
    verdict = j.verdict
    turns = record.request.turns
    first = turns[0].turn_id if turns else ""
    jid = judgement_id(None, None, f"session:{record.session_id}:{first}", verdict.judge)
    identity_dict = verdict.identity.to_dict() if verdict.identity is not None else None
    identity = c.judge_identity_attributes(identity_dict)
    identity.update(c.evaluator_attributes(verdict.judge, identity_dict))  # the session judge's identity
    identity.pop(c.GEN_AI_RESPONSE_ID, None)
    out: list[dict[str, Any]] = []
    for name, value in j.scores().items():
        attrs: dict[str, Any] = {c.GEN_AI_EVALUATION_NAME: name, **identity, ATTR_JUDGEMENT_ID: jid,
                                 ATTR_SCORE_ID: score_record_id(jid, name), c.SESSION_ID: record.session_id,
                                 c.GEN_AI_CONVERSATION_ID: record.session_id, c.ATTR_JUDGE_NAME: verdict.judge,
                                 c.ATTR_SESSION_PARTIAL: j.partial}
        if name == "session.resolved" and j.resolved is not None:
            attrs[c.GEN_AI_EVALUATION_SCORE_LABEL] = j.resolved
        out.append(_scored(attrs, value, reason, error))
    return out


def _span_context_of(trace_id: str | None, span_id: str | None) -> Any:
    """An OTel context whose current span is the remote span (trace_id, span_id); None without both."""
    from opentelemetry import trace as trace_api
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    if not (trace_id and span_id):
        return None
    span_context = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                               trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace_api.set_span_in_context(NonRecordingSpan(span_context))


# Log records the counted exporters of a LoggerProvider failed to export, by provider (weak keys: a
# provider dropped takes its count with it): the errors of an exporter given that provider (the worker's).
_failed_lock = _fork.lock()
_failed: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def logs_not_exported(provider: Any) -> int:
    """Log records the exporters `counted_log_exporter` added to *provider* failed to export."""
    with _failed_lock:
        return _failed.get(provider, 0)


def counted_log_exporter(inner: Any, provider: Any) -> Any:
    """*inner* (a log exporter), its failures counted under *provider* (`logs_not_exported`): an
    `EvaluationLogExporter` given that provider reports them as its ``errors``, so a batch the
    backend refused (too large, a dead endpoint) shows in ``stats()["export_errors"]``."""
    return _CountingLogExporter(inner, provider)


class _CountingLogExporter:
    """Wraps a log exporter and counts the records whose export failed (the exporter's ``errors``)."""

    def __init__(self, inner: Any, provider: Any = None) -> None:
        self._inner = inner
        self._lock = _fork.lock()
        self._owner = weakref.ref(provider) if provider is not None else None
        self.failed = 0

    def export(self, batch: Sequence[Any]) -> Any:
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        try:
            result = self._inner.export(batch)
        except Exception:
            result = LogRecordExportResult.FAILURE
        if result != LogRecordExportResult.SUCCESS:
            with self._lock:
                self.failed += len(batch)
            owner = self._owner() if self._owner is not None else None
            if owner is not None:
                with _failed_lock:
                    _failed[owner] = _failed.get(owner, 0) + len(batch)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._inner.shutdown()


def _logs_url(endpoint: str | None) -> str | None:
    if endpoint is None:
        return None
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/logs") else base + "/v1/logs"


class EvaluationLogExporter(BaseExporter):
    """Writes each judgement as ``gen_ai.evaluation.result`` log records (see the module docstring).

    Args:
        logger_provider: an OTel SDK ``LoggerProvider`` to emit through. None: one of its own with
            a batch processor and the OTLP/HTTP log exporter (``opentelemetry-exporter-otlp-proto-http``),
            sending to *endpoint* (a base URL; ``/v1/logs`` is added) or, when that is None, to
            ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` as the exporter reads them.
        headers: extra request headers of that exporter (None: ``OTEL_EXPORTER_OTLP_[LOGS_]HEADERS``).
        resource: attributes of that provider's resource (e.g. ``{"service.name": "ragaudit-worker"}``).

    Texts (the reason, an error) go out through each record's content policy, as on the judge span.
    Records that never reached the endpoint (its own provider only) are counted in `errors`.
    """

    max_attribute_chars = 8192

    def __init__(
        self,
        logger_provider: Any = None,
        *,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        resource: Mapping[str, Any] | None = None,
    ) -> None:
        if logger_provider is not None and not hasattr(logger_provider, "get_logger"):
            raise ConfigurationError(f"logger_provider must be an OTel LoggerProvider, got "
                                     f"{type(logger_provider).__name__}")
        if logger_provider is not None and (endpoint is not None or headers is not None or resource is not None):
            raise ConfigurationError(
                "give EvaluationLogExporter a logger_provider or endpoint/headers/resource, not both")
        self._counting: _CountingLogExporter | None = None
        self._own = logger_provider is None
        if logger_provider is None:
            logger_provider = self._make_provider(_logs_url(endpoint), headers, resource)
        self._provider = logger_provider
        self._logger = logger_provider.get_logger(c.TRACER_NAME)

    def _make_provider(self, url: str | None, headers: Mapping[str, str] | None,
                       resource: Mapping[str, Any] | None) -> Any:
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
            from opentelemetry.sdk.resources import Resource
        except ImportError as exc:
            raise ConfigurationError("EvaluationLogExporter needs the OTel SDK and OTLP/HTTP exporter: "
                                     "pip install 'ragaudit[otlp]'") from exc
        register_url(url)  # the exporter's credentials are scrubbed from everything ragaudit records
        register_headers(headers)
        self._counting = _CountingLogExporter(OTLPLogExporter(endpoint=url, headers=dict(headers) if headers
                                                              else None))
        provider = LoggerProvider(resource=Resource.create(dict(resource or {})), shutdown_on_exit=False)
        provider.add_log_record_processor(BatchLogRecordProcessor(self._counting))  # type: ignore[arg-type]
        return provider

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        """Emit the ``gen_ai.evaluation.result`` records of every judged record (unjudged: nothing)."""
        for record in records:
            if record.judgement is not None:
                self._emit_logs(record)
        return ExportResult.SUCCESS

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        """Emit the ``session.*`` records of every judged session, on its last traced turn's context."""
        for record in records:
            contexts = list(record.turn_contexts())
            context = _span_context_of(*contexts[-1]) if contexts else None
            verdict, policy, limit = record.judgement.verdict, record.content_policy, self.max_attribute_chars
            reason = policy.reason(verdict.reason, limit)
            error = policy.error(verdict.error, limit=limit) if verdict.error else None
            for attrs in session_evaluation_attributes(record, reason, error):
                self._logger.emit(context=context, event_name=c.GEN_AI_EVALUATION_RESULT,
                                  body=c.GEN_AI_EVALUATION_RESULT, attributes=bounded_attributes(attrs, limit))
        return ExportResult.SUCCESS

    def _emit_logs(self, record: AuditRecord) -> None:
        """The log records of one judged *record*, on its evaluated span's context."""
        turn, judgement = record.turn, record.judgement
        if judgement is None:
            return
        context = _span_context_of(*evaluated_span(turn))
        policy, limit = record.content_policy, self.max_attribute_chars
        reason = policy.reason(judgement.reason, limit)
        error = policy.error(judgement.error, limit=limit) if judgement.error else None
        for attrs in evaluation_attributes(turn, judgement, reason, error):
            self._logger.emit(context=context, event_name=c.GEN_AI_EVALUATION_RESULT,
                              body=c.GEN_AI_EVALUATION_RESULT, attributes=bounded_attributes(attrs, limit))

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        return bool(self._provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float = 30.0) -> None:
        if self._own:
            self._provider.force_flush(int(timeout_s * 1000))
            self._provider.shutdown()

    @property
    def errors(self) -> int:
        """Records that never reached the endpoint: of its own provider, or counted under the provider
        it was given (`counted_log_exporter`)."""
        return self._counting.failed if self._counting is not None else logs_not_exported(self._provider)
