"""The judge's side of the records: a judgement and its parts (sentence verdicts, document grades, the judge's
identity). Re-exported by [`ragaudit.records`][ragaudit.records], where every record is named; kept apart from the
turn's side (documents, citations, turns, requests) that the judge reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ._record_checks import EMPTY, check_optional_str, check_score, frozen_mapping
from .errors import ConfigurationError

SCORE_NAMES: tuple[str, str, str] = ("faithfulness", "context_relevance", "answer_relevance")
"""The three judge scores, in the order they are reported everywhere."""

IDENTITY_FIELDS = ("model", "endpoint", "protocol", "protocol_version", "prompt_hash", "response_id", "response_model")

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
        for name in IDENTITY_FIELDS:
            check_optional_str(f"JudgeIdentity.{name}", getattr(self, name))

    def to_dict(self) -> dict[str, str]:
        """The fields that are set, by name."""
        return {name: value for name in IDENTITY_FIELDS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JudgeIdentity | None:
        """The identity [`to_dict`][ragaudit.JudgeIdentity.to_dict] wrote (None stays None; unknown keys are
        ignored)."""
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"judge identity must be a mapping, got {type(data).__name__}")
        fields = {k: data[k] for k in IDENTITY_FIELDS if k in data}
        if "protocol_version" not in fields and "/" in str(fields.get("protocol", "")):  # 0.1.0: the version
            fields["protocol_version"] = fields.pop("protocol")
        return cls(**fields)


def _usage_counts(value: Mapping[str, Any] | None) -> Mapping[str, int | None]:
    """*value* frozen, every count that is not a finite non-negative integer made None."""
    if value is None:
        return EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"Judgement.usage must be a mapping, got {type(value).__name__}")
    counts: dict[str, int | None] = {}
    for key, count in value.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"Judgement.usage keys must be strings, got {key!r}")
        counts[key] = _count(count)
    return MappingProxyType(counts)


def _count(value: object) -> int | None:
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
            object.__setattr__(self, name, check_score(f"Judgement.{name}", getattr(self, name)))
        for name in ("reason", "raw_output", "error"):
            check_optional_str(f"Judgement.{name}", getattr(self, name))
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
        object.__setattr__(self, "details", frozen_mapping(self.details, "Judgement.details"))

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
