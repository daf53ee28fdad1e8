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

SCORE_NAMES: tuple[str, str, str] = ("faithfulness", "context_relevance", "answer_relevance")
"""The three judge scores, in the order they are reported everywhere."""

TRUNCATION_MARKER = "…[truncated {n} chars]"
"""Appended where text was cut; ``{n}`` is the number of characters removed."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_IDENTITY_FIELDS = ("model", "endpoint", "protocol", "protocol_version", "prompt_hash", "response_id", "response_model")

Message = tuple[str, str]
"""One earlier message of a conversation: ``(role, text)``, role ``"user"`` or ``"assistant"``."""

_ROLES = frozenset({"user", "assistant"})


def _check_history(owner: str, history: Any) -> tuple[Message, ...]:
    out = tuple(tuple(m) if isinstance(m, (list, tuple)) else m for m in history)
    for message in out:
        if not (isinstance(message, tuple) and len(message) == 2 and message[0] in _ROLES
                and isinstance(message[1], str)):
            raise ConfigurationError(f"{owner}.history must hold (role, text) pairs with role 'user' or "
                                     f"'assistant', got {message!r}")
    return out


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


def _frozen_mapping(value: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} must be a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


def _check_score(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a float in [0, 1] or None, got {value!r}")
    value = float(value)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{name} must be in [0, 1] or None, got {value!r}")
    return value


def _check_time(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigurationError(f"{name} must be epoch nanoseconds (int >= 0) or None, got {value!r}")


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
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata, "RetrievedDoc.metadata"))


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
        _check_time("Retrieval.started_at", self.started_at)
        _check_time("Retrieval.ended_at", self.ended_at)


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
        _check_time("Generation.started_at", self.started_at)
        _check_time("Generation.ended_at", self.ended_at)
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
        _check_time("ToolCall.started_at", self.started_at)
        _check_time("ToolCall.ended_at", self.ended_at)


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
        _check_time("RagTurn.started_at", self.started_at)
        _check_time("RagTurn.ended_at", self.ended_at)
        object.__setattr__(self, "relevant_ids", normalize_relevance(self.relevant_ids))
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata, "RagTurn.metadata"))
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
        _check_optional_str("JudgeRequest.reference", self.reference)
        if isinstance(self.documents, (str, bytes)) or not isinstance(self.documents, Iterable):
            raise ConfigurationError(
                f"JudgeRequest.documents must be a sequence of RetrievedDoc, got {type(self.documents).__name__}"
            )
        documents = tuple(self.documents)
        for doc in documents:
            if not isinstance(doc, RetrievedDoc):
                raise ConfigurationError(f"JudgeRequest.documents must hold RetrievedDoc, got {type(doc).__name__}")
        object.__setattr__(self, "documents", documents)
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata, "JudgeRequest.metadata"))
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


SentenceVerdictName = Literal["supported", "partially_supported", "unsupported", "contradicted", "no_claim"]

SENTENCE_VERDICTS: tuple[str, ...] = (
    "supported", "partially_supported", "unsupported", "contradicted", "no_claim",
)
"""The support verdicts of one answer sentence, from best to worst, then "makes no claim"."""

DOCUMENT_GRADES: Mapping[int, str] = MappingProxyType({
    0: "unrelated", 1: "related but does not answer", 2: "partly answers", 3: "answers",
})
"""The UMBRELA relevance scale of one retrieved document for the question (0-3)."""


@dataclass(frozen=True, slots=True)
class SentenceVerdict:
    """Whether one sentence of the answer is supported by the retrieved documents.

    ``index`` is the sentence's 1-based number in the answer as
    [`ragaudit.turn_audit.answer_sentences`][ragaudit.turn_audit.answer_sentences] splits it (the numbering the judge
    saw); ``start``/``end`` are its character offsets in the answer. ``verdict`` is one of `SENTENCE_VERDICTS`, or
    **None when the judge gave none**. ``supporting_ranks`` are the numbers (ranks) of the documents the judge says
    support it and ``supporting_doc_ids`` their ids, in the same order. ``method`` says who decided: ``"llm"`` or
    ``"lexical"``.
    """

    index: int
    text: str
    verdict: SentenceVerdictName | None = None
    supporting_ranks: tuple[int, ...] = ()
    supporting_doc_ids: tuple[str, ...] = ()
    start: int | None = None
    end: int | None = None
    method: str = "llm"

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 1:
            raise ConfigurationError(f"SentenceVerdict.index must be an int >= 1, got {self.index!r}")
        if not isinstance(self.text, str):
            raise ConfigurationError(f"SentenceVerdict.text must be a string, got {type(self.text).__name__}")
        if self.verdict is not None and self.verdict not in SENTENCE_VERDICTS:
            raise ConfigurationError(
                f"SentenceVerdict.verdict must be one of {SENTENCE_VERDICTS} or None, got {self.verdict!r}")
        ranks = tuple(self.supporting_ranks)
        ids = tuple(self.supporting_doc_ids)
        if any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in ranks):
            raise ConfigurationError(f"SentenceVerdict.supporting_ranks must be ints >= 1, got {ranks!r}")
        if any(not isinstance(i, str) or not i for i in ids) or len(ids) != len(ranks):
            raise ConfigurationError(
                "SentenceVerdict.supporting_doc_ids must be non-empty strings, one per supporting rank")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigurationError(f"SentenceVerdict.{name} must be an int >= 0 or None, got {value!r}")
        if not isinstance(self.method, str) or not self.method:
            raise ConfigurationError(f"SentenceVerdict.method must be a non-empty string, got {self.method!r}")
        object.__setattr__(self, "supporting_ranks", ranks)
        object.__setattr__(self, "supporting_doc_ids", ids)

    @property
    def problem(self) -> bool:
        """True for an ``unsupported`` or ``contradicted`` sentence."""
        return self.verdict in ("unsupported", "contradicted")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "index": self.index,
            "text": self.text,
            "verdict": self.verdict,
            "supporting_ranks": list(self.supporting_ranks),
            "supporting_doc_ids": list(self.supporting_doc_ids),
            "start": self.start,
            "end": self.end,
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SentenceVerdict:
        """The record [`to_dict`][ragaudit.SentenceVerdict.to_dict] wrote (lists back to tuples); raises
        ConfigurationError."""
        return cls(
            index=data.get("index"),  # type: ignore[arg-type]
            text=data.get("text", ""),
            verdict=data.get("verdict"),
            supporting_ranks=tuple(data.get("supporting_ranks") or ()),
            supporting_doc_ids=tuple(data.get("supporting_doc_ids") or ()),
            start=data.get("start"),
            end=data.get("end"),
            method=data.get("method") or "llm",
        )


@dataclass(frozen=True, slots=True)
class DocumentGrade:
    """How relevant one retrieved document is to the question, on the UMBRELA 0-3 scale.

    ``rank`` is the document's number in the judge's prompt (its rank), ``doc_id`` its id.
    ``grade`` is 0 (unrelated), 1 (related but does not answer), 2 (partly answers) or 3
    (answers), or **None when the judge gave none**. ``method`` is ``"llm"`` or ``"lexical"``.
    """

    rank: int
    doc_id: str
    grade: int | None = None
    method: str = "llm"

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigurationError(f"DocumentGrade.rank must be an int >= 1, got {self.rank!r}")
        if not isinstance(self.doc_id, str) or not self.doc_id:
            raise ConfigurationError(f"DocumentGrade.doc_id must be a non-empty string, got {self.doc_id!r}")
        if self.grade is not None and (
            isinstance(self.grade, bool) or not isinstance(self.grade, int) or self.grade not in DOCUMENT_GRADES
        ):
            raise ConfigurationError(f"DocumentGrade.grade must be 0, 1, 2, 3 or None, got {self.grade!r}")
        if not isinstance(self.method, str) or not self.method:
            raise ConfigurationError(f"DocumentGrade.method must be a non-empty string, got {self.method!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"rank": self.rank, "doc_id": self.doc_id, "grade": self.grade, "method": self.method}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DocumentGrade:
        """The record [`to_dict`][ragaudit.DocumentGrade.to_dict] wrote; raises ConfigurationError."""
        return cls(rank=data.get("rank"), doc_id=data.get("doc_id"),  # type: ignore[arg-type]
                   grade=data.get("grade"), method=data.get("method") or "llm")


@dataclass(frozen=True, slots=True)
class JudgeIdentity:
    """Which judge made a judgement, so a score can always be traced to it.

    ``model``: the model asked (``response_model``: the one the server said answered);
    ``endpoint``: the endpoint's host and port, never credentials, path or query; ``protocol``: the
    judge protocol's name (``"full-audit"``, ``"g-eval"``, ...), ``protocol_version`` its wire version
    (``"ragaudit-judge/3"``); ``prompt_hash``: SHA-256 (hex, first 16) of the prompt template and
    verdict schema; ``response_id``: the completion id of the reply the scores were read from.
    """

    model: str | None = None
    endpoint: str | None = None
    protocol: str | None = None
    prompt_hash: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    protocol_version: str | None = None

    def __post_init__(self) -> None:
        for name in _IDENTITY_FIELDS:
            _check_optional_str(f"JudgeIdentity.{name}", getattr(self, name))

    def to_dict(self) -> dict[str, str]:
        """The fields that are set, by name."""
        return {name: value for name in _IDENTITY_FIELDS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JudgeIdentity | None:
        """The identity [`to_dict`][ragaudit.JudgeIdentity.to_dict] wrote (None stays None; unknown keys are
        ignored)."""
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"judge identity must be a mapping, got {type(data).__name__}")
        fields = {k: data[k] for k in _IDENTITY_FIELDS if k in data}
        if "protocol_version" not in fields and "/" in str(fields.get("protocol", "")):  # 0.1.0: the version
            fields["protocol_version"] = fields.pop("protocol")
        return cls(**fields)


def _check_optional_str(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string or None, got {type(value).__name__}")


def _usage_counts(value: Mapping[str, Any] | None) -> Mapping[str, int | None]:
    """*value* frozen, every count that is not a finite non-negative integer made None."""
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"Judgement.usage must be a mapping, got {type(value).__name__}")
    counts: dict[str, int | None] = {}
    for key, count in value.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"Judgement.usage keys must be strings, got {key!r}")
        counts[key] = _count(count)
    return MappingProxyType(counts)


def _count(value: Any) -> int | None:
    """*value* as a non-negative int, or None when it is not a finite non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    return int(value) if value >= 0 else None


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's verdict on one answer.

    Each score is a float in [0, 1], or **None when the judge gave none** (missing key, unparseable
    output, transport error). None is never turned into 0. ``error`` is set when the judgement
    could not be made in full; ``raw_output`` keeps the judge's text verbatim; ``usage`` holds
    token counts (``prompt_tokens``, ``completion_tokens``) and ``calls``; ``details`` holds
    judge-specific extras (method per score, distributions, per-juror scores); ``identity`` says
    which judge (model, endpoint, protocol, prompt, response) made it, when known.

    Every field is checked at construction ([`ConfigurationError`][ragaudit.ConfigurationError] for a wrong type
    or range); a usage count that is not a finite non-negative integer is recorded as None.

    A full audit (``ChatRagJudge(protocol="full-audit")``, [`LexicalJudge`][ragaudit.LexicalJudge]) also
    fills ``sentences`` (one [`SentenceVerdict`][ragaudit.SentenceVerdict] per answer sentence, verdict None where the
    judge gave none) and ``document_grades`` (one [`DocumentGrade`][ragaudit.DocumentGrade] per retrieved document,
    grade None where the judge gave none); both are empty for a judge that does not audit them.
    """

    faithfulness: float | None = None
    context_relevance: float | None = None
    answer_relevance: float | None = None
    reason: str | None = None
    raw_output: str | None = None
    judge: str = "unknown"
    latency_s: float | None = None
    usage: Mapping[str, int | None] = field(default_factory=dict)
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    identity: JudgeIdentity | None = None
    sentences: tuple[SentenceVerdict, ...] = ()
    document_grades: tuple[DocumentGrade, ...] = ()

    def __post_init__(self) -> None:
        for name in SCORE_NAMES:
            object.__setattr__(self, name, _check_score(f"Judgement.{name}", getattr(self, name)))
        for name in ("reason", "raw_output", "error"):
            _check_optional_str(f"Judgement.{name}", getattr(self, name))
        if not isinstance(self.judge, str) or not self.judge:
            raise ConfigurationError(f"Judgement.judge must be a non-empty string, got {self.judge!r}")
        if self.latency_s is not None:
            if isinstance(self.latency_s, bool) or not isinstance(self.latency_s, (int, float)):
                raise ConfigurationError(f"Judgement.latency_s must be a number or None, got {self.latency_s!r}")
            if not math.isfinite(self.latency_s) or self.latency_s < 0:
                raise ConfigurationError(f"Judgement.latency_s must be finite and >= 0, got {self.latency_s!r}")
            object.__setattr__(self, "latency_s", float(self.latency_s))
        if self.identity is not None and not isinstance(self.identity, JudgeIdentity):
            raise ConfigurationError(
                f"Judgement.identity must be a JudgeIdentity or None, got {type(self.identity).__name__}"
            )
        object.__setattr__(self, "usage", _usage_counts(self.usage))
        object.__setattr__(self, "sentences", tuple(self.sentences))
        object.__setattr__(self, "document_grades", tuple(self.document_grades))
        if any(not isinstance(s, SentenceVerdict) for s in self.sentences):
            raise ConfigurationError("Judgement.sentences must hold SentenceVerdict records")
        if any(not isinstance(g, DocumentGrade) for g in self.document_grades):
            raise ConfigurationError("Judgement.document_grades must hold DocumentGrade records")
        object.__setattr__(self, "details", _frozen_mapping(self.details, "Judgement.details"))

    @property
    def ok(self) -> bool:
        """True when there is no error and all three scores are present."""
        return self.error is None and all(getattr(self, n) is not None for n in SCORE_NAMES)

    def scores(self) -> dict[str, float | None]:
        """The three scores by name (None where missing)."""
        return {name: getattr(self, name) for name in SCORE_NAMES}

    @classmethod
    def failed(cls, judge: str, error: str, **kwargs: Any) -> Judgement:
        """A judgement with no scores and *error* set."""
        return cls(judge=judge, error=error, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (scores may be None)."""
        return {
            **self.scores(),
            "reason": self.reason,
            "judge": self.judge,
            "latency_s": self.latency_s,
            "usage": dict(self.usage),
            "error": self.error,
            "details": dict(self.details),
            "raw_output": self.raw_output,
            "identity": self.identity.to_dict() if self.identity is not None else None,
            "sentences": [s.to_dict() for s in self.sentences],
            "document_grades": [g.to_dict() for g in self.document_grades],
        }


# --- derived values and the audit record ------------------------------------------------------------


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
        _check_time("AuditRecord.judge_started_at", self.judge_started_at)
        if self.ground_truth_metrics is not None:
            object.__setattr__(self, "ground_truth_metrics",
                               _frozen_mapping(self.ground_truth_metrics, "AuditRecord.ground_truth_metrics"))

    @property
    def status(self) -> RecordStatus:
        """``"judged"``, ``"failed"`` (a judgement with an error) or ``"unjudged"``."""
        return "unjudged" if self.judgement is None else "judged" if self.judgement.error is None else "failed"

    @property
    def judge_identity(self) -> JudgeIdentity | None:
        """Which judge made the judgement (model, endpoint, protocol, prompt, response), when known."""
        return self.judgement.identity if self.judgement is not None else None
