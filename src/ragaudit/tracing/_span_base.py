"""The part of span writing every span shares: the content policy, caps, the tracer, common attributes.

`SpanWriter` is the base of [`SpanRecorder`][ragaudit.tracing.SpanRecorder] (turn spans) and of the
judge-span exporter (`ragaudit.tracing._judge_spans`). Only the OpenTelemetry API is used.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from opentelemetry import trace as _trace_api
from opentelemetry.trace import (
    NoOpTracer,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from ..content import ContentPolicy, TextMemo, bounded_attributes, otlp_safe
from ..errors import ConfigurationError
from ..records import truncate
from ..sessions import session_id_of
from . import conventions as c

__all__ = ["DEFAULT_MAX_DOCUMENTS", "JUDGE_TRACE_ENV", "LANGFUSE_ENVIRONMENT_ENV", "JudgeTrace", "SpanWriter",
           "environment_of"]

_logger = logging.getLogger("ragaudit")

JUDGE_TRACE_ENV = "RAGAUDIT_JUDGE_TRACE"
"""``separate``: judge spans start a trace of their own (linked to the turn); default ``turn``."""
LANGFUSE_ENVIRONMENT_ENV = "LANGFUSE_TRACING_ENVIRONMENT"
"""Langfuse's own variable for the environment of traces and scores (written as ``langfuse.environment``)."""
JudgeTrace = Literal["turn", "separate"]
_JUDGE_TRACES: tuple[str, ...] = ("turn", "separate")
# Turn metadata keys that name the app's user (LangChain ``config["metadata"]``, LlamaIndex instrument
# tags), first match wins; the session's are ragaudit.sessions.SESSION_KEYS (the session judge's too).
_USER_KEYS = ("langfuse_user_id", "user_id")
_MAX_METADATA_KEYS = 16
_MAX_MESSAGES = 32
# Per retrieval span: 4 attributes per document (5 with a grade) plus ~24 others stay under the
# SDK's default limit of 128 attributes, so the SDK never evicts the span kind or the top-ranked
# documents (the SDK drops the oldest attribute first). test_span_limits_... holds us to it.
DEFAULT_MAX_DOCUMENTS = 20
_ENV_PROVIDER_SET = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNKNOWN = object()


def _version() -> str:
    from .._version import __version__

    return __version__


_COMPACT = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"))  # built once, not per call
_dumps = _COMPACT.encode
"""*value* as compact JSON (what ``json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))``
gives)."""


def _first_id(metadata: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def environment_of(provider: Any) -> str | None:
    """The environment Langfuse gives spans of *provider*: ``LANGFUSE_TRACING_ENVIRONMENT``, else
    the resource's ``langfuse.environment`` / ``deployment.environment[.name]`` (Langfuse's order)."""
    value = os.environ.get(LANGFUSE_ENVIRONMENT_ENV, "").strip()
    if value:
        return value
    attributes = getattr(getattr(provider, "resource", None), "attributes", None) or {}
    for key in (c.LANGFUSE_ENVIRONMENT, *c.DEPLOYMENT_ENVIRONMENT_KEYS):
        found = attributes.get(key)
        if isinstance(found, str) and found:
            return found
    return None


def _global_provider_maybe_set() -> bool:
    # get_tracer_provider() costs ~1 µs when nothing is set (it consults os.environ each call);
    # this module global is what it checks first, so reading it keeps the disabled path cheap.
    return _ENV_PROVIDER_SET or getattr(_trace_api, "_TRACER_PROVIDER", _UNKNOWN) is not None


def _tracer_from(provider: TracerProvider) -> Tracer | None:
    if isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider)):
        return None
    tracer = provider.get_tracer(c.TRACER_NAME, _version())
    return None if isinstance(tracer, NoOpTracer) else tracer


def _span_context(trace_id: str | None, span_id: str | None) -> SpanContext | None:
    if not trace_id or not span_id:
        return None
    ctx = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    if not ctx.is_valid:
        raise ValueError(f"invalid trace/span id {trace_id!r}/{span_id!r}")
    return ctx


class SpanWriter:
    """Content policy, caps and tracer of a span writer (see [`SpanRecorder`][ragaudit.tracing.SpanRecorder]
    for the arguments)."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        max_attribute_chars: int = 8192,
        redact: Callable[[str], str] | None = None,
        max_documents: int = DEFAULT_MAX_DOCUMENTS,
        judge_trace: JudgeTrace | None = None,
        content: ContentPolicy | None = None,
    ) -> None:
        if isinstance(max_documents, bool) or not isinstance(max_documents, int) or max_documents < 0:
            raise ConfigurationError(f"max_documents must be an int >= 0, got {max_documents!r}")
        if judge_trace is None:
            judge_trace = os.environ.get(JUDGE_TRACE_ENV, "").strip().lower() or "turn"  # type: ignore[assignment]
        if judge_trace not in _JUDGE_TRACES:
            raise ConfigurationError(f"judge_trace must be 'turn' or 'separate', got {judge_trace!r}")
        if isinstance(max_attribute_chars, bool) or not isinstance(max_attribute_chars, int):
            raise ConfigurationError(f"max_attribute_chars must be an int, got {max_attribute_chars!r}")
        if max_attribute_chars < 0:
            raise ConfigurationError(f"max_attribute_chars must be >= 0, got {max_attribute_chars}")
        if content is not None and (capture_content is not None or redact is not None):
            raise ConfigurationError("give SpanRecorder a content policy or capture_content/redact, not both")
        if tracer_provider is not None and not hasattr(tracer_provider, "get_tracer"):
            raise ConfigurationError(
                "tracer_provider must be an OpenTelemetry TracerProvider, "
                f"got {type(tracer_provider).__name__}"
            )
        self.content_policy = content if content is not None else ContentPolicy(capture_content=capture_content,
                                                                        redact=redact)
        self.capture_content: bool = self.content_policy.capture_content
        self.max_attribute_chars = max_attribute_chars
        self.max_documents = max_documents
        self.judge_trace: JudgeTrace = judge_trace
        self._reported: set[str] = set()
        self._tracer: Tracer | None = None
        explicit = None if isinstance(tracer_provider, ProxyTracerProvider) else tracer_provider
        self._follow_global = explicit is None
        self._provider = explicit
        if explicit is not None:
            self._tracer = _tracer_from(explicit)
        self._turn_attrs: dict[str, Any] = {
            c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_CHAIN,
            c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_SPAN,
        }
        self._retrieval_attrs: dict[str, Any] = {
            c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_RETRIEVER,
            c.GEN_AI_OPERATION_NAME: c.GEN_AI_OPERATION_RETRIEVAL,
            c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_RETRIEVER,
            c.ATTR_CONTENT_CAPTURED: self.capture_content,
        }
        self._generation_attrs: dict[str, Any] = {
            c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_LLM,
            c.GEN_AI_OPERATION_NAME: c.GEN_AI_OPERATION_CHAT,
            c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_GENERATION,
            c.ATTR_CONTENT_CAPTURED: self.capture_content,
        }
        self._judge_attrs: dict[str, Any] = {
            c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_EVALUATOR,
            c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_EVALUATOR,
            c.ATTR_CONTENT_CAPTURED: self.capture_content,
        }
        self._tool_attrs: dict[str, Any] = {
            c.OPENINFERENCE_SPAN_KIND: c.SPAN_KIND_TOOL,
            c.GEN_AI_OPERATION_NAME: c.GEN_AI_OPERATION_EXECUTE_TOOL,
            c.LANGFUSE_OBSERVATION_TYPE: c.LANGFUSE_TYPE_TOOL,
            c.ATTR_CONTENT_CAPTURED: self.capture_content,
        }
        # Langfuse's own environment variable wins over the resource there too, so it is written on
        # every span; otherwise Langfuse reads deployment.environment from the resource itself.
        lf_environment = os.environ.get(LANGFUSE_ENVIRONMENT_ENV, "").strip()
        if lf_environment:
            for base in (self._turn_attrs, self._retrieval_attrs, self._generation_attrs,
                         self._judge_attrs, self._tool_attrs):
                base[c.LANGFUSE_ENVIRONMENT] = lf_environment

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The provider given (None: this recorder follows the global one)."""
        return self._provider

    def _current_tracer(self) -> Tracer | None:
        tracer = self._tracer
        if tracer is not None or not self._follow_global or not _global_provider_maybe_set():
            return tracer
        tracer = _tracer_from(_trace_api.get_tracer_provider())
        self._tracer = tracer
        return tracer

    @property
    def enabled(self) -> bool:
        """True when spans go to a real (SDK) tracer provider."""
        return self._current_tracer() is not None

    @property
    def environment(self) -> str | None:
        """The environment Langfuse files this recorder's traces under (None: Langfuse's
        ``default``): ``$LANGFUSE_TRACING_ENVIRONMENT``, else the provider's resource
        ``deployment.environment.name`` / ``deployment.environment``. Exporters send scores there."""
        if self._current_tracer() is None:
            return environment_of(None)
        provider = self._provider if self._provider is not None else _trace_api.get_tracer_provider()
        return environment_of(provider)

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Ask the provider to export the spans it still buffers, waiting up to *timeout_s*.

        True when there was nothing to do or the provider finished in time; never raises.
        """
        if self._current_tracer() is None:
            return True
        provider = self._provider if self._provider is not None else _trace_api.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if flush is None:
            return True
        try:
            return bool(flush(max(0, int(timeout_s * 1000))))
        except Exception as exc:
            self._report("force_flush", exc)
            return False

    def _report(self, where: str, exc: BaseException) -> None:
        # The exception as the policy allows (its text may quote what failed to be recorded); the
        # traceback only with content capture on.
        described = self.content_policy.exception(exc)
        if where in self._reported:
            _logger.debug("ragaudit tracing: %s failed again: %s", where, described)
            return
        self._reported.add(where)
        _logger.warning(
            "ragaudit tracing: %s failed, its span data was dropped (further failures of this kind "
            "are logged at DEBUG): %s",
            where,
            described,
            exc_info=exc if self.content_policy.capture_content else None,
        )

    def _text(self, value: str, texts: TextMemo | None = None) -> str:
        """A text as recorded: through the content policy (secrets scrubbed, redacted), cut to
        *max_attribute_chars*, encodable by OTLP. Callers decide whether it is recorded at all
        (content only with capture on). *texts*: the turn's memo (each distinct text through the
        policy once per turn)."""
        return otlp_safe((texts if texts is not None else self.content_policy).text(value, self.max_attribute_chars))

    def _json(self, value: Any) -> str:
        """*value* (its texts already through the policy) as a JSON attribute, scrubbed and capped."""
        return self.content_policy.json(value, self.max_attribute_chars)

    def _cap(self, value: str) -> str:
        """Any string attribute as recorded: cut to *max_attribute_chars*, encodable by OTLP."""
        if len(value) > self.max_attribute_chars:
            value = truncate(value, self.max_attribute_chars)
        return otlp_safe(value)

    def _bounded(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """*attrs* with every string (and string in an array) capped; texts were capped already,
        this catches ids, JSON lists and metadata so that no attribute is unbounded. Span attributes,
        events and links all go through it."""
        return bounded_attributes(attrs, self.max_attribute_chars)

    def _mark_error(
        self, span: Span, attrs: dict[str, Any], error: str, error_type: str, status: int | None = None
    ) -> None:
        # An error text follows content capture: off, it is its type, status and a fixed message.
        message = otlp_safe(self.content_policy.error(error, status=status, limit=self.max_attribute_chars) or "")
        attrs[c.ATTR_ERROR_TYPE] = error_type
        attrs[c.LANGFUSE_OBSERVATION_LEVEL] = "ERROR"
        attrs[c.LANGFUSE_OBSERVATION_STATUS_MESSAGE] = message
        span.set_status(Status(StatusCode.ERROR, message))
        span.add_event(c.EVENT_EXCEPTION, {c.ATTR_EXCEPTION_MESSAGE: message, c.ATTR_ERROR_TYPE: error_type})

    def _io(self, attrs: dict[str, Any], key: str, mime_key: str, lf_key: str, value: str, mime: str) -> None:
        """One input or output: OpenInference ``input.value``/``output.value`` (Phoenix) and the
        Langfuse key, which Langfuse reads instead of ``input.value`` once any Langfuse key is set."""
        attrs[key] = attrs[lf_key] = value
        attrs[mime_key] = mime

    def _who(self, attrs: dict[str, Any], metadata: Mapping[str, Any], texts: TextMemo | None = None) -> None:
        """Session and user of the turn, from its metadata: Langfuse's Sessions and Users views
        read ``session.id`` / ``user.id`` (also OpenInference's keys). Ids, not content: kept with
        capture off, but redacted like every text."""
        session = session_id_of(metadata)
        if session is not None:
            attrs[c.SESSION_ID] = attrs[c.GEN_AI_CONVERSATION_ID] = self._text(session, texts)
        user = _first_id(metadata, _USER_KEYS)
        if user is not None:
            attrs[c.USER_ID] = self._text(user, texts)

    def _metadata(self, attrs: dict[str, Any], metadata: Mapping[str, Any], trace_level: bool,
                  texts: TextMemo | None = None) -> None:
        """The turn's metadata (content: capture on only): one OpenInference ``metadata`` JSON
        string (Phoenix) and one ``langfuse.observation.metadata.<key>`` per key (Langfuse filters
        on those, not on ``metadata``); ``langfuse.trace.metadata.<key>`` too when the turn is not
        the trace's root (a root's observation metadata is its trace's already)."""
        # keys and values (nested too) through the policy: a key is the host's text as much as a value
        recorded = (texts if texts is not None else self.content_policy).metadata(metadata) or {}
        attrs[c.METADATA] = self._json(recorded)
        for n, (key, value) in enumerate(recorded.items()):
            if n >= _MAX_METADATA_KEYS:
                break
            if isinstance(value, str):
                value = self._cap(value)
            elif not isinstance(value, (bool, int, float)):
                value = self._json(value)
            attrs[c.langfuse_metadata_key(c.LANGFUSE_OBSERVATION_METADATA, str(key))] = value
            if trace_level:
                attrs[c.langfuse_metadata_key(c.LANGFUSE_TRACE_METADATA, str(key))] = value


    def _usage(self, attrs: dict[str, Any], input_tokens: int | None, output_tokens: int | None) -> None:
        """Token use as GenAI (Jaeger), OpenInference (Phoenix) and Langfuse usage details."""
        usage: dict[str, int] = {}
        if input_tokens is not None:
            attrs[c.GEN_AI_USAGE_INPUT_TOKENS] = attrs[c.LLM_TOKEN_COUNT_PROMPT] = input_tokens
            usage["input"] = input_tokens
        if output_tokens is not None:
            attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] = attrs[c.LLM_TOKEN_COUNT_COMPLETION] = output_tokens
            usage["output"] = output_tokens
        if input_tokens is not None and output_tokens is not None:
            attrs[c.LLM_TOKEN_COUNT_TOTAL] = usage["total"] = input_tokens + output_tokens
        if usage:
            attrs[c.LANGFUSE_OBSERVATION_USAGE_DETAILS] = _dumps(usage)

