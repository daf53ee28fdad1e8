"""Turn :class:`~ragaudit.RagTurn` and :class:`~ragaudit.Judgement` records into OpenTelemetry spans.

Per turn: a ``ragaudit.turn`` span with one child per retrieval (``retrieval {name}``), per LLM
call (``chat {model}``) and per tool call (``execute_tool {name}``), and later, when the judgement
arrives, a ``ragaudit.judge`` span: by default a child of the turn span in the same trace
(``judge_trace="turn"``), or the root of a trace of its own linked to the turn
(``judge_trace="separate"``, so the answer's trace keeps the answer's duration). Attribute names
are in :mod:`ragaudit.tracing.conventions`.

What each backend reads (Langfuse's ``langfuse.*`` keys, Jaeger's tags, Phoenix's OpenInference
keys) is pinned by ``tests/test_backend_langfuse.py`` and ``tests/test_backend_jaeger.py``.

Only the OpenTelemetry *API* is used here: with no SDK tracer provider installed every call
returns at once, and nothing here ever raises into the host pipeline or attaches an OTel context.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from opentelemetry import trace as _trace_api
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    NoOpTracer,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from .. import _fork
from ..content import CAPTURE_CONTENT_ENV, ContentPolicy, content_capture_from_env, otlp_safe
from ..errors import ConfigurationError
from ..records import SCORE_NAMES, Generation, Judgement, RagTurn, Retrieval, ToolCall, truncate
from . import conventions as c
from ._audit_spans import full_audit_attributes, retrieval_grades, sentence_events, take_for_turn

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "JUDGE_TRACE_ENV",
    "LANGFUSE_ENVIRONMENT_ENV",
    "JudgeTrace",
    "SpanRecorder",
    "TurnHandle",
    "content_capture_from_env",
]

_logger = logging.getLogger("ragaudit")

JUDGE_TRACE_ENV = "RAGAUDIT_JUDGE_TRACE"
"""``separate``: judge spans start a trace of their own (linked to the turn); default ``turn``."""
LANGFUSE_ENVIRONMENT_ENV = "LANGFUSE_TRACING_ENVIRONMENT"
"""Langfuse's own variable for the environment of traces and scores (written as ``langfuse.environment``)."""
JudgeTrace = Literal["turn", "separate"]
_JUDGE_TRACES: tuple[str, ...] = ("turn", "separate")
# Turn metadata keys that name the app's session / user (LangChain ``config["metadata"]``, LangGraph's
# ``thread_id``, LlamaIndex instrument tags), first match wins.
_SESSION_KEYS = ("langfuse_session_id", "session_id", "thread_id", "conversation_id")
_USER_KEYS = ("langfuse_user_id", "user_id")
_MAX_METADATA_KEYS = 16
_MAX_MESSAGES = 32
# Per retrieval span: 4 attributes per document (5 with a grade) plus ~24 others stay under the
# SDK's default limit of 128 attributes, so the SDK never evicts the span kind or the top-ranked
# documents (the SDK drops the oldest attribute first). test_span_limits_... holds us to it.
DEFAULT_MAX_DOCUMENTS = 20
_MARKER_SLACK = 48
_ENV_PROVIDER_SET = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNKNOWN = object()
_SPAN_ID_MEMORY = 4096
# Shared by every recorder: the handler's recorder makes the retrieval spans, while sinks are bound
# to the Auditor's recorder.
_span_ids_lock = _fork.lock()
_retrieval_span_ids: OrderedDict[str, tuple[str, ...]] = OrderedDict()


def _version() -> str:
    from .._version import __version__

    return __version__


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


def _first_id(metadata: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _environment_of(provider: Any) -> str | None:
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


class TurnHandle:
    """An open turn span, returned by :meth:`SpanRecorder.start_turn`; opaque to integrations.

    ``trace_id`` (32 hex digits) and ``span_id`` (16) identify the turn span; both are None when
    tracing is disabled or the sampler dropped the span (then ``sampled_out`` is True). Pass the
    handle back to :meth:`SpanRecorder.end_turn` exactly once.
    """

    __slots__ = ("_name", "_root", "_span", "_start_ns", "sampled_out", "span_id", "trace_id")

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

    def __repr__(self) -> str:
        return f"TurnHandle(trace_id={self.trace_id!r}, span_id={self.span_id!r})"


_DISABLED = TurnHandle(None, None)


class SpanRecorder:
    """Writes turns and judgements as OpenTelemetry spans.

    Args:
        tracer_provider: the provider to use; None means the global one, looked up at each call
            until an SDK provider is installed (so a recorder made before
            :func:`ragaudit.tracing.configure` starts tracing once it runs).
        capture_content: record questions, answers, documents, prompts and reasons. None means
            on unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``NO_CONTENT``,
            ``false`` or ``0``. Off, only ids, scores and sizes (``ragaudit.*.chars``) are kept.
        max_attribute_chars: longer strings (every string attribute, content or not) are cut and
            marked ``…[truncated N chars]``.
        redact: applied to every text before it is recorded (after it, the text is cut).
        content: the :class:`~ragaudit.content.ContentPolicy` deciding every recorded text (the
            Auditor passes its own); instead of *capture_content* and *redact*, not with them.
        max_documents: documents recorded per retrieval span, top ranks first; the total is
            ``ragaudit.document.count`` and the number left out ``ragaudit.document.omitted``.
        judge_trace: ``"turn"`` (default): the judge span is a child of the turn span, in the
            turn's trace; ``"separate"``: it is the root of a trace of its own, linked to the turn,
            so the turn's trace lasts only as long as the answer did. None: ``$RAGAUDIT_JUDGE_TRACE``.

    ``enabled`` is False while the provider is the API's no-op one; then every method returns at
    once (:meth:`start_turn` gives a handle whose ids are None). No method raises: a failure is
    logged once per kind on the ``ragaudit`` logger and the span data is dropped.
    """

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
        self.content = content if content is not None else ContentPolicy(capture_content=capture_content,
                                                                        redact=redact)
        self.capture_content: bool = self.content.capture_content
        self.max_attribute_chars = max_attribute_chars
        self.max_documents = max_documents
        self.judge_trace: JudgeTrace = judge_trace  # type: ignore[assignment]
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

    # --- state ---------------------------------------------------------------------------------
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
        ``deployment.environment.name`` / ``deployment.environment``. Sinks send scores there."""
        if self._current_tracer() is None:
            return _environment_of(None)
        provider = self._provider if self._provider is not None else _trace_api.get_tracer_provider()
        return _environment_of(provider)

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
        described = self.content.exception(exc)
        if where in self._reported:
            _logger.debug("ragaudit tracing: %s failed again: %s", where, described)
            return
        self._reported.add(where)
        _logger.warning(
            "ragaudit tracing: %s failed, its span data was dropped (further failures of this kind "
            "are logged at DEBUG): %s",
            where,
            described,
            exc_info=exc if self.content.capture_content else None,
        )

    def _text(self, value: str) -> str:
        """A text as recorded: through the content policy (secrets scrubbed, redacted), cut to
        *max_attribute_chars*, encodable by OTLP. Callers decide whether it is recorded at all
        (content only with capture on)."""
        return otlp_safe(self.content.text(value, self.max_attribute_chars))

    def _json(self, value: Any) -> str:
        """*value* (its texts already through the policy) as a JSON attribute, scrubbed and capped."""
        return self.content.json(value, self.max_attribute_chars)

    def _cap(self, value: str) -> str:
        """Any string attribute as recorded: cut to *max_attribute_chars*, encodable by OTLP."""
        if len(value) > self.max_attribute_chars:
            value = truncate(value, self.max_attribute_chars)
        return otlp_safe(value)

    def _bounded(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """*attrs* with every string (and string in an array) capped; texts were capped already,
        this catches ids, JSON lists and metadata so that no attribute is unbounded."""
        limit = self.max_attribute_chars + _MARKER_SLACK  # a cut text is its cap plus the marker
        for key, value in attrs.items():
            if isinstance(value, str):
                if len(value) > limit:
                    attrs[key] = self._cap(value)
            elif isinstance(value, list) and any(isinstance(v, str) and len(v) > limit for v in value):
                attrs[key] = [self._cap(v) if isinstance(v, str) else v for v in value]
        return attrs

    def _mark_error(
        self, span: Span, attrs: dict[str, Any], error: str, error_type: str, status: int | None = None
    ) -> None:
        # An error text follows content capture: off, it is its type, status and a fixed message.
        message = otlp_safe(self.content.error(error, status=status, limit=self.max_attribute_chars) or "")
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

    def _who(self, attrs: dict[str, Any], metadata: Mapping[str, Any]) -> None:
        """Session and user of the turn, from its metadata: Langfuse's Sessions and Users views
        read ``session.id`` / ``user.id`` (also OpenInference's keys). Ids, not content: kept with
        capture off, but redacted like every text."""
        session = _first_id(metadata, _SESSION_KEYS)
        if session is not None:
            attrs[c.SESSION_ID] = attrs[c.GEN_AI_CONVERSATION_ID] = self._text(session)
        user = _first_id(metadata, _USER_KEYS)
        if user is not None:
            attrs[c.USER_ID] = self._text(user)

    def _metadata(self, attrs: dict[str, Any], metadata: Mapping[str, Any], trace_level: bool) -> None:
        """The turn's metadata (content: capture on only): one OpenInference ``metadata`` JSON
        string (Phoenix) and one ``langfuse.observation.metadata.<key>`` per key (Langfuse filters
        on those, not on ``metadata``); ``langfuse.trace.metadata.<key>`` too when the turn is not
        the trace's root (a root's observation metadata is its trace's already)."""
        # keys and values (nested too) through the policy: a key is the host's text as much as a value
        recorded = self.content.metadata(metadata) or {}
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

    # --- turns ---------------------------------------------------------------------------------
    def start_turn(
        self,
        name: str = c.SPAN_TURN,
        start_ns: int | None = None,
        parent: Context | None = None,
    ) -> TurnHandle:
        """Start the turn span now, as a child of *parent* (None: the current context).

        The span is not made current. Returns a :class:`TurnHandle` for :meth:`end_turn`; its ids
        are None when tracing is disabled or the sampler dropped the span (then nothing refers to
        a trace that will never exist: no judge span in it, no scores sent to it).
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

    def end_turn(
        self,
        handle: TurnHandle,
        turn: RagTurn,
        *,
        judge_status: str | None = None,
        retrieval_metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Record *turn* on the span *handle* opened, add its retrieval, LLM and tool child spans, end it.

        Children use their own ``started_at``/``ended_at`` (falling back to the turn's); when the
        turn has documents but no ``retrievals``, one retrieval span is made from its documents.
        The span gets error status when ``turn.error`` is set and ends at ``turn.ended_at``.
        """
        span = handle._span
        if span is None:
            return
        handle._span = None
        end_ns = turn.ended_at if turn.ended_at is not None else time.time_ns()
        try:
            if not span.is_recording():  # sampled out: nothing would be exported
                return
            self._fill_turn(span, handle, turn, end_ns, judge_status, retrieval_metrics)
        except Exception as exc:
            self._report("end_turn", exc)
        finally:
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

        Returns ``turn.with_trace(trace_id, span_id)``; *turn* unchanged when tracing is off;
        *turn* with ``sampled_out=True`` when the sampler dropped its span.
        """
        handle = self.start_turn(start_ns=turn.started_at, parent=parent)
        if handle.trace_id is None or handle.span_id is None:
            self.end_turn(handle, turn)  # a sampled-out span still ends
            return replace(turn, sampled_out=True) if handle.sampled_out else turn
        self.end_turn(handle, turn, judge_status=judge_status, retrieval_metrics=retrieval_metrics)
        try:
            return turn.with_trace(handle.trace_id, handle.span_id)
        except Exception as exc:
            self._report("record_turn", exc)
            return turn

    def _fill_turn(
        self,
        span: Span,
        handle: TurnHandle,
        turn: RagTurn,
        end_ns: int,
        judge_status: str | None,
        retrieval_metrics: Mapping[str, float] | None,
    ) -> None:
        capture = self.capture_content
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
        if handle._root:
            attrs[c.LANGFUSE_TRACE_NAME] = handle._name
        self._who(attrs, turn.metadata)
        if capture:
            query = self._text(turn.query)
            self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, query, c.MIME_TEXT)
            if handle._root:
                attrs[c.LANGFUSE_TRACE_INPUT] = query
            if turn.answer is not None:
                answer = self._text(turn.answer)
                self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, answer,
                         c.MIME_TEXT)
                if handle._root:
                    attrs[c.LANGFUSE_TRACE_OUTPUT] = answer
            if turn.metadata:
                self._metadata(attrs, turn.metadata, trace_level=not handle._root)
        docs = turn.documents
        attrs[c.ATTR_DOCUMENT_COUNT] = len(docs)
        if docs:
            attrs[c.ATTR_DOCUMENT_IDS] = [d.id for d in docs[: self.max_documents]]
        cits = turn.citations
        attrs[c.ATTR_CITATION_COUNT] = len(cits)
        attrs[c.ATTR_CITATIONS] = _dumps(
            [
                {
                    "doc_id": cit.doc_id,
                    "rank": cit.rank,
                    "marker": self._text(cit.marker) if capture and cit.marker is not None else None,
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
        if judge_status:
            attrs[c.ATTR_JUDGE_STATUS] = judge_status
        # A full audit judged before the turn span ends (inline): judged metrics, citation scores.
        early = take_for_turn(turn.turn_id)
        if early is not None:
            attrs.update(early[0])
        if turn.error:
            self._mark_error(span, attrs, turn.error, c.ERROR_TYPE_TURN_ERROR)
        span.set_attributes(self._bounded(attrs))

        tracer = self._tracer
        if tracer is None:
            return
        parent = _trace_api.set_span_in_context(span)
        start_ns = handle._start_ns
        retrievals = turn.retrievals
        if not retrievals and docs:
            retrievals = (Retrieval(name="", documents=docs, query=turn.query),)
        grades = early[1] if early is not None else None
        span_ids = tuple(self._retrieval_span(tracer, parent, retrieval, start_ns, end_ns, turn.query, grades)
                         for retrieval in retrievals)
        with _span_ids_lock:
            _retrieval_span_ids[turn.turn_id] = span_ids
            while len(_retrieval_span_ids) > _SPAN_ID_MEMORY:
                _retrieval_span_ids.popitem(last=False)
        for generation in turn.generations:
            self._generation_span(tracer, parent, generation, start_ns, end_ns)
        for call in turn.tool_calls:
            self._tool_span(tracer, parent, call, start_ns, end_ns)

    def _retrieval_span(
        self, tracer: Tracer, parent: Context, r: Retrieval, start_ns: int, end_ns: int, turn_query: str,
        grades: Mapping[str, int] | None = None,
    ) -> str:
        capture = self.capture_content
        attrs = dict(self._retrieval_attrs)
        if r.name:
            attrs[c.GEN_AI_DATA_SOURCE_ID] = r.name
        query = r.query if r.query is not None else turn_query
        attrs[c.ATTR_QUERY_CHARS] = len(query)
        if capture:
            text = self._text(query)
            self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, text, c.MIME_TEXT)
            attrs[c.GEN_AI_RETRIEVAL_QUERY_TEXT] = text
        # Top ranks first: documents arrive in retrieval order, rank 1 first.
        recorded = r.documents[: self.max_documents]
        attrs[c.ATTR_DOCUMENT_COUNT] = len(r.documents)
        attrs[c.ATTR_DOCUMENT_OMITTED] = len(r.documents) - len(recorded)
        attrs[c.ATTR_DOCUMENT_CHARS] = [len(d.content) for d in recorded]
        summary = []
        for i, doc in enumerate(recorded):
            keys = c.document_keys(i)
            attrs[keys.id] = doc.id
            if doc.score is not None:
                attrs[keys.score] = doc.score
            meta: dict[str, Any] = {"rank": doc.rank}
            # A source is an identifier (kept with capture off), but a path or URL may hold what
            # redact hides, or a credential.
            source = self._text(doc.source) if doc.source is not None else None
            if source is not None:
                meta["source"] = source
            if capture:
                attrs[keys.content] = self._text(doc.content)
                meta.update(self.content.metadata(doc.metadata) or {})
            attrs[keys.metadata] = self._json(meta)
            summary.append({"id": doc.id, "score": doc.score, "rank": doc.rank, "source": source})
        attrs[c.GEN_AI_RETRIEVAL_DOCUMENTS] = attrs[c.LANGFUSE_OBSERVATION_OUTPUT] = _dumps(summary)
        attrs[c.OUTPUT_MIME_TYPE] = c.MIME_JSON
        attrs.update(retrieval_grades(recorded, grades))
        start = r.started_at if r.started_at is not None else start_ns
        end = r.ended_at if r.ended_at is not None else end_ns
        return self._child(
            tracer, parent, c.retrieval_span_name(r.name), SpanKind.INTERNAL, attrs, start, end, r.error
        )

    def _generation_span(
        self, tracer: Tracer, parent: Context, g: Generation, start_ns: int, end_ns: int
    ) -> None:
        attrs = dict(self._generation_attrs)
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
                self._messages(attrs, g.messages)
            elif g.prompt is not None:
                prompt = self._text(g.prompt)
                self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, prompt,
                         c.MIME_TEXT)
                role_key, content_key = c.input_message_keys(0)
                attrs[role_key], attrs[content_key] = "user", prompt
            if g.output is not None:
                output = self._text(g.output)
                self._io(attrs, c.OUTPUT_VALUE, c.OUTPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_OUTPUT, output,
                         c.MIME_TEXT)
                role_key, content_key = c.output_message_keys(0)
                attrs[role_key], attrs[content_key] = "assistant", output
        start = g.started_at if g.started_at is not None else start_ns
        end = g.ended_at if g.ended_at is not None else end_ns
        self._child(tracer, parent, c.chat_span_name(g.model), SpanKind.CLIENT, attrs, start, end, g.error)

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

    def _messages(self, attrs: dict[str, Any], messages: Sequence[tuple[str, str]]) -> None:
        """The chat messages sent: a JSON list of ``{role, content}`` as the input (Langfuse renders
        it as a conversation) and OpenInference ``llm.input_messages.{i}`` (Phoenix). Beyond
        ``_MAX_MESSAGES`` only the first (usually the system prompt) and the latest are kept."""
        if len(messages) > _MAX_MESSAGES:
            messages = [messages[0], *messages[len(messages) - _MAX_MESSAGES + 1:]]
        # Each content gets an equal share of the cap, so that the JSON stays whole (valid) when cut.
        share = max(self.max_attribute_chars // max(len(messages), 1) - 32, 0)
        listed = []
        for i, (role, content) in enumerate(messages):
            text = self._text(content)
            role_key, content_key = c.input_message_keys(i)
            attrs[role_key], attrs[content_key] = role, text
            listed.append({"role": role, "content": truncate(text, share) if len(text) > share else text})
        self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, _dumps(listed), c.MIME_JSON)

    def _tool_span(self, tracer: Tracer, parent: Context, t: ToolCall, start_ns: int, end_ns: int) -> None:
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
                arguments = self._text(t.arguments)
                attrs[c.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
                self._io(attrs, c.INPUT_VALUE, c.INPUT_MIME_TYPE, c.LANGFUSE_OBSERVATION_INPUT, arguments,
                         c.MIME_JSON if arguments.startswith(("{", "[")) else c.MIME_TEXT)
            if t.output is not None:
                output = self._text(t.output)
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
    ) -> str:
        span = tracer.start_span(
            name, context=parent, kind=kind, attributes=self._bounded(attrs), start_time=start_ns
        )
        try:
            if error:
                extra: dict[str, Any] = {}
                self._mark_error(span, extra, error, c.ERROR_TYPE_TURN_ERROR)
                span.set_attributes(extra)
        finally:
            span.end(end_time=end_ns)
        return format(span.get_span_context().span_id, "016x")

    def retrieval_span_ids(self, turn_id: str) -> tuple[str, ...] | None:
        """The span ids of *turn_id*'s retrieval spans, in order, for recently ended turns.

        Sinks use them to annotate retrieved documents (Phoenix document annotations). The last
        ``_SPAN_ID_MEMORY`` turns are remembered; None for an unknown or forgotten turn.
        """
        with _span_ids_lock:
            return _retrieval_span_ids.get(turn_id)

    # --- judgements ----------------------------------------------------------------------------
    def record_judgement(self, turn: RagTurn, judgement: Judgement, *, start_ns: int | None = None) -> None:
        """Record *judgement* of *turn* as a ``ragaudit.judge`` span.

        With ``judge_trace="turn"`` the span's parent is the turn span (from
        ``turn.trace_id``/``turn.span_id``) and it has no link (Jaeger would show a link to the
        parent as the parent reference, FOLLOWS_FROM); with ``"separate"`` it is the root of a
        new trace with a link to the turn span. A turn that was never traced gets a judge span of
        its own trace. Present scores become ``ragaudit.judge.<score>`` attributes; each of the
        three scores becomes a ``gen_ai.evaluation.result`` event, where a missing score has no
        value and the label ``missing`` (never 0). *start_ns* defaults to now minus the
        judgement's latency. A turn whose span the sampler dropped gets no judge span.
        """
        tracer = self._tracer if self._tracer is not None else self._current_tracer()
        if tracer is None or turn.sampled_out:  # no trace to judge in: no orphan judge trace either
            return
        try:
            self._judge_span(tracer, turn, judgement, start_ns)
        except Exception as exc:
            self._report("record_judgement", exc)

    def _judge_span(self, tracer: Tracer, turn: RagTurn, j: Judgement, start_ns: int | None) -> None:
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
        elif self.judge_trace == "turn":
            parent = _trace_api.set_span_in_context(NonRecordingSpan(turn_ctx))
        else:
            parent = Context()
            links = [Link(turn_ctx, {c.LINK_TYPE: c.LINK_TYPE_JUDGED_TURN})]
        if turn_ctx is None or links is not None:
            # The judge span is a trace's root: name that trace and put it in the turn's session.
            attrs[c.LANGFUSE_TRACE_NAME] = c.SPAN_JUDGE
            self._who(attrs, turn.metadata)
        attrs[c.ATTR_TURN_ID] = turn.turn_id
        attrs[c.ATTR_JUDGE_NAME] = j.judge
        self._judge_model(attrs, j)
        identity = c.judge_identity_attributes(j.identity.to_dict() if j.identity is not None else None)
        attrs.update(identity)
        scores = j.scores()
        output: dict[str, Any] = dict(scores)
        missing = [name for name, value in scores.items() if value is None]
        for name, value in scores.items():
            if value is not None:
                attrs[c.judge_score_key(name)] = value
        if missing:
            attrs[c.ATTR_JUDGE_MISSING_SCORES] = missing
        # The reason: with capture on, or kept on its own (capture_reason); the error follows capture.
        reason = self.content.reason(j.reason, self.max_attribute_chars)
        reason = otlp_safe(reason) if reason is not None else None
        if j.reason is not None:
            attrs[c.ATTR_JUDGE_REASON_CHARS] = len(j.reason)
        if reason is not None:
            attrs[c.ATTR_JUDGE_REASON] = reason
            output["reason"] = reason
        status = j.details.get("status_code")
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
        error = (otlp_safe(self.content.error(j.error, status=status, limit=self.max_attribute_chars) or "")
                 if j.error else None)
        if error is not None:
            attrs[c.ATTR_JUDGE_ERROR] = error
            output["error"] = error
        if j.latency_s is not None:
            attrs[c.ATTR_JUDGE_LATENCY_S] = float(j.latency_s)
        for key, value in j.usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attrs[c.judge_usage_key(key)] = value
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
        # The full audit (sentence verdicts, grades, judged metrics, citation checks): see _audit_spans.
        attrs.update(full_audit_attributes(turn, j, capture, self._text))
        sentences, dropped = sentence_events(j, capture, self._text)
        if dropped:
            attrs[c.ATTR_SENTENCES_EVENTS_DROPPED] = dropped

        span = tracer.start_span(
            c.SPAN_JUDGE,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=self._bounded(attrs),
            links=links,
            start_time=start_ns,
        )
        try:
            for name in SCORE_NAMES:
                value = scores[name]
                event: dict[str, Any] = {c.GEN_AI_EVALUATION_NAME: name, **identity}
                if value is not None:
                    event[c.GEN_AI_EVALUATION_SCORE_VALUE] = value
                    if reason is not None:
                        event[c.GEN_AI_EVALUATION_EXPLANATION] = reason
                else:
                    event[c.GEN_AI_EVALUATION_SCORE_LABEL] = c.MISSING_SCORE_LABEL
                    event[c.ATTR_ERROR_TYPE] = (
                        c.ERROR_TYPE_JUDGE_ERROR if error else c.ERROR_TYPE_MISSING_SCORE
                    )
                    if error is not None:
                        event[c.GEN_AI_EVALUATION_EXPLANATION] = error
                    elif reason is not None:
                        event[c.GEN_AI_EVALUATION_EXPLANATION] = reason
                span.add_event(c.GEN_AI_EVALUATION_RESULT, event, timestamp=end_ns)
            for sentence_event in sentences:
                span.add_event(c.EVENT_SENTENCE, sentence_event, timestamp=end_ns)
            if j.error:
                extra: dict[str, Any] = {}
                self._mark_error(span, extra, j.error, c.ERROR_TYPE_JUDGE_ERROR, status)
                span.set_attributes(extra)
        finally:
            span.end(end_time=end_ns)

    def _judge_model(self, attrs: dict[str, Any], j: Judgement) -> None:
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
