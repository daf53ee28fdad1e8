"""The records every part of ragaudit speaks: documents, citations, turns, judge requests, judgements.

All are frozen, slotted dataclasses validated at construction, so a bad value fails where it is
made and not three layers later. Times are Unix epoch **nanoseconds** (``time.time_ns()``), the
unit OpenTelemetry uses, so no precision is lost between a framework event and its span.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ._judgement_records import (
    DOCUMENT_GRADES,
    SCORE_NAMES,
    SENTENCE_VERDICTS,
    DocumentGrade,
    JudgeIdentity,
    Judgement,
    SentenceVerdict,
)
from ._record_checks import check_optional_str, check_time, frozen_mapping
from .errors import ConfigurationError

if TYPE_CHECKING:  # content imports records: the policy is only named here, never imported at run time
    from opentelemetry.trace import TracerProvider

    from .content import ContentPolicy

__all__ = [
    "DOCUMENT_GRADES",
    "SCORE_NAMES",
    "SENTENCE_VERDICTS",
    "TRUNCATION_MARKER",
    "UNJUDGED_REASONS",
    "UNSUBMITTED_REASONS",
    "AuditRecord",
    "Citation",
    "CitationCheck",
    "DocumentGrade",
    "Generation",
    "JudgeIdentity",
    "JudgeRequest",
    "Judgement",
    "Message",
    "RagTurn",
    "RecordStatus",
    "Retrieval",
    "RetrievedDoc",
    "SentenceVerdict",
    "ToolCall",
    "TurnAudit",
    "normalize_relevance",
    "stable_doc_id",
    "truncate",
]

TRUNCATION_MARKER = "…[truncated {n} chars]"
"""Appended where text was cut; ``{n}`` is the number of characters removed."""


Message = tuple[str, str]
"""One earlier message of a conversation: ``(role, text)``, role ``"user"`` or ``"assistant"``."""

_ROLES = frozenset({"user", "assistant"})


def _check_history(owner: str, history: Iterable[object]) -> tuple[Message, ...]:
    out: list[Message] = []
    for item in history:
        message = tuple(item) if isinstance(item, (list, tuple)) else item
        if not (isinstance(message, tuple) and len(message) == 2 and message[0] in _ROLES
                and isinstance(message[1], str)):
            raise ConfigurationError(f"{owner}.history must hold (role, text) pairs with role 'user' or "
                                     f"'assistant', got {message!r}")
        out.append((str(message[0]), message[1]))
    return tuple(out)


def truncate(text: str, limit: int) -> str:
    """Return *text* cut to at most *limit* characters plus a visible marker saying how much went."""
    if limit < 0:
        raise ConfigurationError(f"truncation limit must be >= 0, got {limit}")
    if len(text) <= limit:
        return text
    return text[:limit] + TRUNCATION_MARKER.format(n=len(text) - limit)


def stable_doc_id(content: str, source: str | None = None) -> str:
    """A stable id for a document that has none: a hash of its source and content."""
    digest = hashlib.sha1(f"{source or ''}\x00{content}".encode("utf-8", "replace")).hexdigest()
    return f"doc-{digest[:16]}"


@dataclass(frozen=True, slots=True)
class RetrievedDoc:
    """One document a retriever returned, in retrieval order.

    ``id`` is the store's own id when it has one (Chroma id, LlamaIndex node id, ``Document.id``,
    metadata ``id``/``doc_id``), else [`stable_doc_id`][ragaudit.records.stable_doc_id]. ``rank`` is 1-based. ``score``
    is the retriever's similarity score when it reported one. ``truncated``: the document reached the model
    in part (an app or a middleware cut it to fit) and ``content`` is that part, as evidence is.
    """

    id: str
    content: str
    score: float | None = None
    rank: int = 1
    source: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    truncated: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConfigurationError(f"RetrievedDoc.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.content, str):
            raise ConfigurationError(
                f"RetrievedDoc.content must be a string, got {type(self.content).__name__}"
            )
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigurationError(f"RetrievedDoc.rank must be an int >= 1, got {self.rank!r}")
        if self.score is not None:
            if isinstance(self.score, bool) or not isinstance(self.score, (int, float)):
                raise ConfigurationError(f"RetrievedDoc.score must be a number, got {self.score!r}")
            if math.isnan(self.score):
                raise ConfigurationError("RetrievedDoc.score must not be NaN")
            object.__setattr__(self, "score", float(self.score))
        if not isinstance(self.truncated, bool):
            raise ConfigurationError(f"RetrievedDoc.truncated must be a bool, got {self.truncated!r}")
        object.__setattr__(self, "metadata", frozen_mapping(self.metadata, "RetrievedDoc.metadata"))


CitationMethod = Literal["marker", "overlap", "structured"]


@dataclass(frozen=True, slots=True)
class Citation:
    """A retrieved document the answer cites. ``method``: ``"marker"`` (the answer says ``[2]``, ``[doc-id]``
    or names the source; ``marker`` holds that text), ``"overlap"`` (a sentence is drawn from the document;
    ``marker`` holds it, cut) or ``"structured"`` (a structured answer's citation field; its value)."""

    doc_id: str
    rank: int
    marker: str | None = None
    method: CitationMethod = "marker"

    def __post_init__(self) -> None:
        if not isinstance(self.doc_id, str) or not self.doc_id:
            raise ConfigurationError(f"Citation.doc_id must be a non-empty string, got {self.doc_id!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigurationError(f"Citation.rank must be an int >= 1, got {self.rank!r}")
        if self.method not in ("marker", "overlap", "structured"):
            raise ConfigurationError(f"Citation.method must be marker, overlap or structured, got {self.method!r}")


@dataclass(frozen=True, slots=True)
class Retrieval:
    """One retriever call of a turn; ``used_ids``: its documents that reached the answering call (None: not known)."""

    name: str
    documents: tuple[RetrievedDoc, ...] = ()
    query: str | None = None
    started_at: int | None = None
    ended_at: int | None = None
    error: str | None = None
    used_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "documents", tuple(self.documents))
        object.__setattr__(self, "used_ids", None if self.used_ids is None else tuple(self.used_ids))
        check_time("Retrieval.started_at", self.started_at)
        check_time("Retrieval.ended_at", self.ended_at)


@dataclass(frozen=True, slots=True)
class Generation:
    """One LLM call inside a turn (token counts None when not reported). ``messages``: the chat
    messages sent, ``(role, content)`` pairs, when the framework gave them; ``prompt``: the prompt as
    one text (completion models, or messages unknown); ``tool_calls``: the calls the reply asked for
    (their ``output`` None), when the reply was a tool call."""

    model: str | None = None
    prompt: str | None = None
    output: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    started_at: int | None = None
    ended_at: int | None = None
    error: str | None = None
    provider: str | None = None
    messages: tuple[tuple[str, str], ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        check_time("Generation.started_at", self.started_at)
        check_time("Generation.ended_at", self.ended_at)
        messages = tuple(tuple(m) for m in self.messages)
        for message in messages:
            if len(message) != 2 or not all(isinstance(part, str) for part in message):
                raise ConfigurationError(
                    f"Generation.messages must hold (role, content) string pairs, got {message!r}"
                )
        object.__setattr__(self, "messages", messages)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call inside a turn (agents): the tool's name, the arguments the model wrote, what
    the tool returned, the model's call id."""

    name: str
    arguments: str | None = None
    output: str | None = None
    call_id: str | None = None
    started_at: int | None = None
    ended_at: int | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigurationError(f"ToolCall.name must be a string, got {type(self.name).__name__}")
        check_time("ToolCall.started_at", self.started_at)
        check_time("ToolCall.ended_at", self.ended_at)


@dataclass(frozen=True, slots=True)
class RagTurn:
    """One question through one pipeline run: what was asked, retrieved, answered and cited.

    ``documents`` are the documents the answer was built from (after any reranking), ranked 1..n;
    ``retrievals``, ``generations`` and ``tool_calls`` keep each retriever, LLM and tool call as it
    happened, for the trace. ``relevant_ids`` is the ground truth when known: a sequence of relevant ids (binary) or a
    mapping id -> graded label. ``trace_id``/``span_id`` (hex) point at the turn's span once traced.
    ``tool_calls`` are an agent's tool calls (for the trace); ``history`` the earlier user and
    assistant messages of a conversation (capped) and ``standalone_query`` the app's rewrite of
    ``query`` that retrieval used, when it made one. ``sampled_out`` is True when the trace
    sampler dropped the turn's span: there is no trace to put a judge span or scores in.
    """

    turn_id: str
    query: str
    answer: str | None
    documents: tuple[RetrievedDoc, ...] = ()
    citations: tuple[Citation, ...] = ()
    model: str | None = None
    framework: str | None = None
    started_at: int | None = None
    ended_at: int | None = None
    trace_id: str | None = None
    span_id: str | None = None
    relevant_ids: Mapping[str, int] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    retrievals: tuple[Retrieval, ...] = ()
    generations: tuple[Generation, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    history: tuple[Message, ...] = ()
    standalone_query: str | None = None
    sampled_out: bool = False
    retrieval_span_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.turn_id, str) or not self.turn_id:
            raise ConfigurationError(f"RagTurn.turn_id must be a non-empty string, got {self.turn_id!r}")
        if not isinstance(self.query, str):
            raise ConfigurationError(f"RagTurn.query must be a string, got {type(self.query).__name__}")
        if self.answer is not None and not isinstance(self.answer, str):
            raise ConfigurationError(
                f"RagTurn.answer must be a string or None, got {type(self.answer).__name__}"
            )
        object.__setattr__(self, "documents", tuple(self.documents))
        object.__setattr__(self, "citations", tuple(self.citations))
        object.__setattr__(self, "retrievals", tuple(self.retrievals))
        object.__setattr__(self, "generations", tuple(self.generations))
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "history", _check_history("RagTurn", self.history))
        if self.standalone_query is not None and not isinstance(self.standalone_query, str):
            raise ConfigurationError("RagTurn.standalone_query must be a string or None")
        for doc in self.documents:
            if not isinstance(doc, RetrievedDoc):
                raise ConfigurationError(f"RagTurn.documents must hold RetrievedDoc, got {type(doc).__name__}")
        check_time("RagTurn.started_at", self.started_at)
        check_time("RagTurn.ended_at", self.ended_at)
        object.__setattr__(self, "relevant_ids", normalize_relevance(self.relevant_ids))
        object.__setattr__(self, "metadata", frozen_mapping(self.metadata, "RagTurn.metadata"))
        object.__setattr__(self, "retrieval_span_ids", tuple(self.retrieval_span_ids))
        if any(not isinstance(span_id, str) for span_id in self.retrieval_span_ids):
            raise ConfigurationError("RagTurn.retrieval_span_ids must hold hex span id strings")

    def with_trace(self, trace_id: str, span_id: str, retrieval_span_ids: Sequence[str] = ()) -> RagTurn:
        """A copy of this turn that points at its span (and its retrieval spans, in order)."""
        return replace(self, trace_id=trace_id, span_id=span_id, retrieval_span_ids=tuple(retrieval_span_ids))


def normalize_relevance(
    value: Mapping[str, int] | Iterable[str] | None,
) -> Mapping[str, int] | None:
    """Turn ``relevant_ids`` given as ids (binary) or ``{id: label}`` (graded) into a frozen mapping."""
    if value is None:
        return None
    if isinstance(value, str):
        raise ConfigurationError("relevant_ids must be a list of ids or a mapping id -> label, not a string")
    if isinstance(value, Mapping):
        out: dict[str, int] = {}
        for key, label in value.items():
            if isinstance(label, bool) or not isinstance(label, (int, float)) or math.isnan(float(label)):
                raise ConfigurationError(f"relevance label for {key!r} must be an integer, got {label!r}")
            out[str(key)] = int(label)
        return MappingProxyType(out)
    return MappingProxyType({str(doc_id): 1 for doc_id in value})


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """What a judge is asked to assess. ``context`` is the exact text the judge sees as evidence.

    ``reference`` is an optional reference answer (for correctness judges); it is never the
    evidence for faithfulness. ``history`` (earlier ``(role, text)`` messages) and
    ``standalone_query`` (the app's rewrite of the question) are set for follow-up questions.
    """

    query: str
    answer: str
    context: str
    documents: tuple[RetrievedDoc, ...] = ()
    reference: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    history: tuple[Message, ...] = ()
    standalone_query: str | None = None

    def __post_init__(self) -> None:
        for name in ("query", "answer", "context"):
            if not isinstance(getattr(self, name), str):
                raise ConfigurationError(
                    f"JudgeRequest.{name} must be a string, got {type(getattr(self, name)).__name__}"
                )
        check_optional_str("JudgeRequest.reference", self.reference)
        if isinstance(self.documents, (str, bytes)) or not isinstance(self.documents, Iterable):
            raise ConfigurationError(
                f"JudgeRequest.documents must be a sequence of RetrievedDoc, got {type(self.documents).__name__}"
            )
        documents = tuple(self.documents)
        for doc in documents:
            if not isinstance(doc, RetrievedDoc):
                raise ConfigurationError(f"JudgeRequest.documents must hold RetrievedDoc, got {type(doc).__name__}")
        object.__setattr__(self, "documents", documents)
        object.__setattr__(self, "metadata", frozen_mapping(self.metadata, "JudgeRequest.metadata"))
        object.__setattr__(self, "history", _check_history("JudgeRequest", self.history))
        if self.standalone_query is not None and not isinstance(self.standalone_query, str):
            raise ConfigurationError("JudgeRequest.standalone_query must be a string or None")

    @staticmethod
    def build_context(documents: Sequence[RetrievedDoc], max_context_chars: int = 24_000) -> str:
        """Number the documents ``[1] (source: ...)`` and join them, cut to *max_context_chars*."""
        if max_context_chars < 1:
            raise ConfigurationError(f"max_context_chars must be >= 1, got {max_context_chars}")
        parts = []
        for doc in documents:
            source = f" (source: {doc.source})" if doc.source else ""
            parts.append(f"[{doc.rank}]{source} id={doc.id}\n{doc.content}")
        return truncate("\n\n".join(parts), max_context_chars)

    @classmethod
    def from_turn(cls, turn: RagTurn, max_context_chars: int = 24_000) -> JudgeRequest:
        """The request for judging *turn*: its query, answer and numbered documents as context."""
        return cls(
            query=turn.query,
            answer=turn.answer or "",
            context=cls.build_context(turn.documents, max_context_chars),
            documents=turn.documents,
            reference=turn.metadata.get("reference_answer") if turn.metadata else None,
            history=turn.history,
            standalone_query=turn.standalone_query,
        )


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """One explicit citation of one answer sentence, checked against the judge's sentence verdict.

    ``sentence`` is the 1-based sentence number, ``doc_id``/``rank`` the cited document, ``marker``
    the marker as written. ``holds`` is True when the judge lists the document among the sentence's
    supporting documents, False when it does not, None when the judge gave the sentence no verdict.
    ``verdict`` is the sentence's verdict (None when not given).
    """

    sentence: int
    doc_id: str
    rank: int
    marker: str | None
    holds: bool | None
    verdict: str | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"sentence": self.sentence, "doc_id": self.doc_id, "rank": self.rank, "marker": self.marker,
                "holds": self.holds, "verdict": self.verdict}


@dataclass(frozen=True, slots=True)
class TurnAudit:
    """Everything derived from one fully audited turn, for spans, the audit log, exporters and reports.

    ``metrics`` are the graded retrieval metrics (None without grades); ``citation_checks`` one per
    explicit citation; ``citation_precision``/``citation_recall`` the ALCE scores (see
    [`ragaudit.turn_audit`][ragaudit.turn_audit]). ``unsupported`` counts ``unsupported`` and ``contradicted``
    sentences, ``sentences_missing`` the sentences the judge gave no verdict, ``grades_missing`` the
    documents it gave no grade.
    """

    metrics: Mapping[str, float] | None
    citation_checks: tuple[CitationCheck, ...]
    citation_precision: float | None
    citation_recall: float | None
    unsupported: int
    sentences_missing: int
    grades_missing: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "graded_metrics": dict(self.metrics) if self.metrics is not None else None,
            "citation_checks": [c.to_dict() for c in self.citation_checks],
            "citation_precision": self.citation_precision,
            "citation_recall": self.citation_recall,
            "unsupported_sentences": self.unsupported,
            "sentences_missing": self.sentences_missing,
            "grades_missing": self.grades_missing,
        }


UNSUBMITTED_REASONS: tuple[str, ...] = ("failed", "no_evidence", "empty_answer", "no_answer", "no_model", "standalone")
"""Why the assembler did not submit a finished turn (each counted in ``stats()["unjudged_<reason>"]``)."""
UNJUDGED_REASONS: tuple[str, ...] = ("sampled_out", "dropped", *UNSUBMITTED_REASONS,
                                     "filtered_out", "over_budget", "paused", "budget_unavailable", "rate_limited")
"""Why a finished turn was not judged (an [`AuditRecord`][ragaudit.AuditRecord]'s ``unjudged``); the assembler's are
above."""

RecordStatus = Literal["judged", "failed", "unjudged"]
"""An [`AuditRecord`][ragaudit.AuditRecord]'s outcome: judged, judged with an error, or not judged (with a reason)."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """Everything recorded of one finished turn, made once and handed to every exporter.

    ``turn`` (its span context: ``turn.trace_id``, ``turn.span_id``, ``turn.retrieval_span_ids``),
    the ``judgement`` or, for a turn not judged, the ``unjudged`` reason (one of
    `UNJUDGED_REASONS`); every derived value, computed once: ``ground_truth_metrics`` (the
    turn's retrieval metrics against its ``relevant_ids``, None when unknown) and ``audit`` (graded
    metrics and citation checks of a full audit, None otherwise). ``content_policy`` is the one
    [`ContentPolicy`][ragaudit.content.ContentPolicy] every text of this record is exported through (the
    turn's integration handler's, or the Auditor's); ``tracer_provider`` the provider the turn was
    traced with (None: the Auditor's). ``judge_started_at`` is when judging began (epoch ns).
    Exporters read, never recompute.
    """

    turn: RagTurn
    content_policy: ContentPolicy
    judgement: Judgement | None = None
    unjudged: str | None = None
    ground_truth_metrics: Mapping[str, float] | None = None
    audit: TurnAudit | None = None
    tracer_provider: TracerProvider | None = None
    judge_started_at: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.turn, RagTurn):
            raise ConfigurationError(f"AuditRecord.turn must be a RagTurn, got {type(self.turn).__name__}")
        if (self.judgement is None) == (self.unjudged is None):
            raise ConfigurationError("AuditRecord needs a judgement or an unjudged reason, exactly one")
        if self.judgement is not None and not isinstance(self.judgement, Judgement):
            raise ConfigurationError(f"AuditRecord.judgement must be a Judgement, got {type(self.judgement).__name__}")
        if self.unjudged is not None and self.unjudged not in UNJUDGED_REASONS:
            raise ConfigurationError(f"AuditRecord.unjudged must be one of {UNJUDGED_REASONS}, got {self.unjudged!r}")
        if self.audit is not None and (self.judgement is None or not isinstance(self.audit, TurnAudit)):
            raise ConfigurationError("AuditRecord.audit must be a TurnAudit, and only with a judgement")
        check_time("AuditRecord.judge_started_at", self.judge_started_at)
        if self.ground_truth_metrics is not None:
            object.__setattr__(self, "ground_truth_metrics",
                               frozen_mapping(self.ground_truth_metrics, "AuditRecord.ground_truth_metrics"))

    @property
    def status(self) -> RecordStatus:
        """``"judged"``, ``"failed"`` (a judgement with an error) or ``"unjudged"``."""
        return "unjudged" if self.judgement is None else "judged" if self.judgement.error is None else "failed"

    @property
    def judge_identity(self) -> JudgeIdentity | None:
        """Which judge made the judgement (model, endpoint, protocol, prompt, response), when known."""
        return self.judgement.identity if self.judgement is not None else None
