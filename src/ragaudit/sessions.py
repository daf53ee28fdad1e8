"""The records of a conversation judged as a whole: its turns, the session judge's verdict, the judgement.

A **session** is the turns of one conversation: the turns whose metadata names the same session
([`session_id_of`][ragaudit.sessions.session_id_of]: LangChain ``config["metadata"]``/``configurable`` ``session_id``,
LangGraph's ``thread_id``, LlamaIndex instrument tags, OTLP ``session.id``/``gen_ai.conversation.id``; the same
keys the turn span's ``session.id`` is written from). When a session has been idle for
``session_idle_s``, or the app ends it (``Auditor.end_session``), **one** judge call over the whole
conversation gives a [`SessionVerdict`][ragaudit.SessionVerdict]: whether the user's need was resolved (and at which
turn), cross-turn contradictions (pairs of sentences), and the turns where the user had to repeat or
rephrase. The [`SessionJudgement`][ragaudit.SessionJudgement] adds what is **computed, never asked again**: the overall
groundedness from the turns' own sentence verdicts
([`consistent_faithfulness`][ragaudit.turn_audit.consistent_faithfulness] over every judged sentence of the session),
the counts, and whether the session was seen only in part (turns sampled out, evicted by the caps, or never seen by this
process) and what was missed.

As every record: frozen, slotted, validated at construction; None where the judge gave nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ._export import ExportResult
from .errors import ConfigurationError
from .records import SCORE_NAMES, AuditRecord, JudgeIdentity, SentenceVerdict
from .turn_audit import answer_sentences, consistent_faithfulness

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .content import ContentPolicy

__all__ = [
    "RESOLUTIONS",
    "SESSION_ENDS",
    "SESSION_KEYS",
    "SESSION_MISSED",
    "Contradiction",
    "Repetition",
    "SessionExporter",
    "SessionJudgement",
    "SessionRecord",
    "SessionRequest",
    "SessionTurn",
    "SessionVerdict",
    "session_id_of",
]

SESSION_KEYS: tuple[str, ...] = ("langfuse_session_id", "session_id", "thread_id", "conversation_id")
"""Turn metadata keys that name the app's session, first match wins (also the turn span's ``session.id``)."""

Resolution = Literal["yes", "partly", "no"]
RESOLUTIONS: tuple[str, ...] = ("yes", "partly", "no")
"""Whether the user's need was resolved in the session."""

SessionEnd = Literal["idle", "ended", "shutdown", "evicted"]
SESSION_ENDS: tuple[str, ...] = ("idle", "ended", "shutdown", "evicted")
"""Why a session was judged: idle for ``session_idle_s``, ``end_session()``, the Auditor's shutdown,
or pushed out of memory by ``max_sessions`` (judged on what was seen)."""

SESSION_MISSED: tuple[str, ...] = ("sampled_out", "evicted", "unseen")
"""What a partial session missed: turns the sampler left out, turns dropped by ``max_session_turns``,
and turns the conversation had before this process saw it (its first turn seen had history)."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def session_id_of(metadata: Mapping[str, Any] | None) -> str | None:
    """The session id named by *metadata* (`SESSION_KEYS`, first match), or None."""
    if not metadata:
        return None
    for key in SESSION_KEYS:
        value = metadata.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _index(owner: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{owner} must be an int >= {low}, got {value!r}")
    return value


def _opt_str(owner: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{owner} must be a string or None, got {type(value).__name__}")


def _counts(owner: str, value: Mapping[str, Any] | None) -> Mapping[str, int]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{owner} must be a mapping, got {type(value).__name__}")
    out: dict[str, int] = {}
    for key, count in value.items():
        if key not in SESSION_MISSED:
            raise ConfigurationError(f"{owner} keys must be among {SESSION_MISSED}, got {key!r}")
        out[key] = _index(f"{owner}[{key!r}]", count, 0)
    return MappingProxyType({k: v for k, v in out.items() if v})


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """One turn of a session as the session judge sees it and the exporters show it.

    ``index`` is its 1-based place among the turns seen; ``sentences`` the answer's sentences with the
    turn's own verdicts (a full audit's; verdict None for a turn not audited sentence by sentence),
    numbered as every audit numbers them; ``scores`` the turn judge's three scores (None where missing);
    ``status`` the turn record's (``judged``, ``failed``, ``unjudged``) and ``unjudged`` its reason.
    """

    index: int
    turn_id: str
    query: str
    answer: str | None
    sentences: tuple[SentenceVerdict, ...] = ()
    scores: Mapping[str, float | None] = field(default_factory=dict)
    status: str = "judged"
    unjudged: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    ended_at: int | None = None

    def __post_init__(self) -> None:
        _index("SessionTurn.index", self.index)
        if not isinstance(self.turn_id, str) or not self.turn_id:
            raise ConfigurationError(f"SessionTurn.turn_id must be a non-empty string, got {self.turn_id!r}")
        if not isinstance(self.query, str):
            raise ConfigurationError("SessionTurn.query must be a string")
        for name in ("answer", "unjudged", "trace_id", "span_id"):
            _opt_str(f"SessionTurn.{name}", getattr(self, name))
        if self.status not in ("judged", "failed", "unjudged"):
            raise ConfigurationError(f"SessionTurn.status must be judged, failed or unjudged, got {self.status!r}")
        object.__setattr__(self, "sentences", tuple(self.sentences))
        if any(not isinstance(s, SentenceVerdict) for s in self.sentences):
            raise ConfigurationError("SessionTurn.sentences must hold SentenceVerdict records")
        scores = {name: self.scores.get(name) for name in SCORE_NAMES} if isinstance(self.scores, Mapping) else None
        if scores is None:
            raise ConfigurationError("SessionTurn.scores must be a mapping of score names")
        object.__setattr__(self, "scores", MappingProxyType(scores))

    @classmethod
    def from_record(cls, record: AuditRecord, index: int) -> SessionTurn:
        """The session's view of one turn's [`AuditRecord`][ragaudit.AuditRecord] (no text recomputed but the
        sentence split of a turn the judge gave no sentence verdicts)."""
        turn, judgement = record.turn, record.judgement
        sentences = tuple(judgement.sentences) if judgement is not None else ()
        if not sentences and turn.answer:
            answer = turn.answer
            sentences = tuple(SentenceVerdict(index=i, text=" ".join(answer[s:e].split()), start=s, end=e,
                                              method="split")
                              for i, (s, e) in enumerate(answer_sentences(answer), start=1))
        return cls(index=index, turn_id=turn.turn_id, query=turn.query, answer=turn.answer, sentences=sentences,
                   scores=judgement.scores() if judgement is not None else {}, status=record.status,
                   unjudged=record.unjudged, trace_id=turn.trace_id, span_id=turn.span_id, ended_at=turn.ended_at)

    def sentence(self, number: int) -> SentenceVerdict | None:
        """Sentence *number* (1-based) of the answer, or None when there is no such sentence."""
        return self.sentences[number - 1] if 1 <= number <= len(self.sentences) else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"index": self.index, "turn_id": self.turn_id, "query": self.query, "answer": self.answer,
                "sentences": [s.to_dict() for s in self.sentences], "scores": dict(self.scores),
                "status": self.status, "unjudged": self.unjudged, "trace_id": self.trace_id,
                "span_id": self.span_id}


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What the session judge is asked about: the turns seen (in order), and whether that is all of it.

    ``partial`` is True when turns were missed; ``missed`` counts them by reason (`SESSION_MISSED`).
    """

    session_id: str
    turns: tuple[SessionTurn, ...]
    missed: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not self.session_id:
            raise ConfigurationError(f"SessionRequest.session_id must be a non-empty string, got {self.session_id!r}")
        object.__setattr__(self, "turns", tuple(self.turns))
        if any(not isinstance(t, SessionTurn) for t in self.turns):
            raise ConfigurationError("SessionRequest.turns must hold SessionTurn records")
        if [t.index for t in self.turns] != list(range(1, len(self.turns) + 1)):
            raise ConfigurationError("SessionRequest.turns must be numbered 1..n in order")
        object.__setattr__(self, "missed", _counts("SessionRequest.missed", self.missed))

    @property
    def partial(self) -> bool:
        """True when some of the session's turns were not seen (see ``missed``)."""
        return bool(self.missed)

    def turn(self, number: int) -> SessionTurn | None:
        """Turn *number* (1-based), or None when there is no such turn."""
        return self.turns[number - 1] if 1 <= number <= len(self.turns) else None

    def contradiction(self, turn_a: int, sentence_a: int, turn_b: int, sentence_b: int) -> Contradiction | None:
        """The contradiction between sentence *sentence_a* of turn *turn_a* and *sentence_b* of *turn_b*
        (either order), both texts from these turns; None when either does not exist or it is one turn."""
        if (turn_b, sentence_b) < (turn_a, sentence_a):
            turn_a, sentence_a, turn_b, sentence_b = turn_b, sentence_b, turn_a, sentence_a
        first, second = self.turn(turn_a), self.turn(turn_b)
        if first is None or second is None or turn_a == turn_b:
            return None
        one, two = first.sentence(sentence_a), second.sentence(sentence_b)
        if one is None or two is None:
            return None
        return Contradiction(turn_a, sentence_a, one.text, turn_b, sentence_b, two.text)

    def repetition(self, turn: int, repeats: int) -> Repetition | None:
        """*turn* repeating the earlier turn *repeats*; None when either does not exist or it is not earlier."""
        if self.turn(turn) is None or self.turn(repeats) is None or repeats >= turn:
            return None
        return Repetition(turn, repeats)


@dataclass(frozen=True, slots=True)
class Contradiction:
    """A later answer that contradicts an earlier one: turn and sentence numbers (1-based) and, from our
    own records (never from the judge's reply), both sentences' texts. ``first_turn < second_turn``."""

    first_turn: int
    first_sentence: int
    first_text: str
    second_turn: int
    second_sentence: int
    second_text: str

    def __post_init__(self) -> None:
        for name in ("first_turn", "first_sentence", "second_turn", "second_sentence"):
            _index(f"Contradiction.{name}", getattr(self, name))
        if self.first_turn >= self.second_turn:
            raise ConfigurationError("Contradiction.first_turn must come before second_turn")
        if not isinstance(self.first_text, str) or not isinstance(self.second_text, str):
            raise ConfigurationError("Contradiction texts must be strings")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"first_turn": self.first_turn, "first_sentence": self.first_sentence, "first_text": self.first_text,
                "second_turn": self.second_turn, "second_sentence": self.second_sentence,
                "second_text": self.second_text}


@dataclass(frozen=True, slots=True)
class Repetition:
    """A turn where the user had to repeat or rephrase an earlier request (``turn`` > ``repeats``)."""

    turn: int
    repeats: int

    def __post_init__(self) -> None:
        _index("Repetition.turn", self.turn)
        _index("Repetition.repeats", self.repeats)
        if self.repeats >= self.turn:
            raise ConfigurationError("Repetition.repeats must be an earlier turn than Repetition.turn")

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return {"turn": self.turn, "repeats": self.repeats}


@dataclass(frozen=True, slots=True)
class SessionVerdict:
    """What the session judge said about a conversation: **None where it gave nothing**.

    ``resolved`` (`RESOLUTIONS`) and ``resolved_turn`` (the turn where it was, 1-based);
    ``contradictions`` and ``repeated`` (empty when the judge found none *or* gave none: ``error`` and
    ``details["notes"]`` say which); the judge's ``reason``; as a [`Judgement`][ragaudit.Judgement]: the
    judge's name, raw reply, latency, token ``usage``, ``error``, ``details`` and ``identity``.
    """

    resolved: Resolution | None = None
    resolved_turn: int | None = None
    contradictions: tuple[Contradiction, ...] = ()
    repeated: tuple[Repetition, ...] = ()
    reason: str | None = None
    judge: str = "unknown"
    raw_output: str | None = None
    latency_s: float | None = None
    usage: Mapping[str, int | None] = field(default_factory=dict)
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    identity: JudgeIdentity | None = None

    def __post_init__(self) -> None:
        if self.resolved is not None and self.resolved not in RESOLUTIONS:
            raise ConfigurationError(f"SessionVerdict.resolved must be one of {RESOLUTIONS} or None, "
                                     f"got {self.resolved!r}")
        if self.resolved_turn is not None:
            _index("SessionVerdict.resolved_turn", self.resolved_turn)
        object.__setattr__(self, "contradictions", tuple(self.contradictions))
        object.__setattr__(self, "repeated", tuple(self.repeated))
        if any(not isinstance(c, Contradiction) for c in self.contradictions):
            raise ConfigurationError("SessionVerdict.contradictions must hold Contradiction records")
        if any(not isinstance(r, Repetition) for r in self.repeated):
            raise ConfigurationError("SessionVerdict.repeated must hold Repetition records")
        for name in ("reason", "raw_output", "error"):
            _opt_str(f"SessionVerdict.{name}", getattr(self, name))
        if not isinstance(self.judge, str) or not self.judge:
            raise ConfigurationError(f"SessionVerdict.judge must be a non-empty string, got {self.judge!r}")
        if self.latency_s is not None and (isinstance(self.latency_s, bool) or not isinstance(
                self.latency_s, (int, float)) or not math.isfinite(self.latency_s) or self.latency_s < 0):
            raise ConfigurationError(f"SessionVerdict.latency_s must be a finite number >= 0, got {self.latency_s!r}")
        if self.identity is not None and not isinstance(self.identity, JudgeIdentity):
            raise ConfigurationError("SessionVerdict.identity must be a JudgeIdentity or None")
        if not isinstance(self.usage, Mapping) or not isinstance(self.details, Mapping):
            raise ConfigurationError("SessionVerdict.usage and details must be mappings")
        object.__setattr__(self, "usage", MappingProxyType(
            {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
             for k, v in self.usage.items()}))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    @classmethod
    def failed(cls, judge: str, error: str, **kwargs: Any) -> SessionVerdict:
        """A verdict with nothing given and *error* set."""
        return cls(judge=judge, error=error, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"resolved": self.resolved, "resolved_turn": self.resolved_turn,
                "contradictions": [c.to_dict() for c in self.contradictions],
                "repeated": [r.to_dict() for r in self.repeated], "reason": self.reason, "judge": self.judge,
                "latency_s": self.latency_s, "usage": dict(self.usage), "error": self.error,
                "details": dict(self.details), "raw_output": self.raw_output,
                "identity": self.identity.to_dict() if self.identity is not None else None}


@dataclass(frozen=True, slots=True)
class SessionJudgement:
    """A conversation judged as a whole: the judge's [`SessionVerdict`][ragaudit.SessionVerdict] and what is computed.

    ``groundedness`` is [`consistent_faithfulness`][ragaudit.turn_audit.consistent_faithfulness] over every sentence
    verdict the turns' own judgements gave (supported 1, partially supported 0.5, unsupported and contradicted
    0; no-claim sentences left out), so it always agrees with the per-turn audit; None when no turn has
    a sentence verdict. ``sentences_judged``/``sentences_missing``: sentences with and without a
    verdict. ``turns``: turns seen; ``turns_judged``: those with a judgement. ``partial`` and ``missed``
    (by `SESSION_MISSED` reason): the session was seen only in part and is judged on what was
    seen. ``ended``: why it was judged (`SESSION_ENDS`).
    """

    session_id: str
    verdict: SessionVerdict
    ended: SessionEnd = "idle"
    groundedness: float | None = None
    sentences_judged: int = 0
    sentences_missing: int = 0
    turns: int = 0
    turns_judged: int = 0
    missed: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not self.session_id:
            raise ConfigurationError("SessionJudgement.session_id must be a non-empty string")
        if not isinstance(self.verdict, SessionVerdict):
            raise ConfigurationError("SessionJudgement.verdict must be a SessionVerdict")
        if self.ended not in SESSION_ENDS:
            raise ConfigurationError(f"SessionJudgement.ended must be one of {SESSION_ENDS}, got {self.ended!r}")
        if self.groundedness is not None and (isinstance(self.groundedness, bool) or not isinstance(
                self.groundedness, (int, float)) or not 0.0 <= self.groundedness <= 1.0):
            raise ConfigurationError(f"SessionJudgement.groundedness must be in [0, 1] or None, "
                                     f"got {self.groundedness!r}")
        for name in ("sentences_judged", "sentences_missing", "turns", "turns_judged"):
            _index(f"SessionJudgement.{name}", getattr(self, name), 0)
        object.__setattr__(self, "missed", _counts("SessionJudgement.missed", self.missed))

    @classmethod
    def of(cls, request: SessionRequest, verdict: SessionVerdict, ended: SessionEnd = "idle") -> SessionJudgement:
        """The judgement of *request*: *verdict* and the values computed from the turns' own verdicts."""
        sentences = [s for turn in request.turns for s in turn.sentences]
        judged = sum(1 for s in sentences if s.verdict is not None)
        return cls(session_id=request.session_id, verdict=verdict, ended=ended,
                   groundedness=consistent_faithfulness(sentences), sentences_judged=judged,
                   sentences_missing=len(sentences) - judged, turns=len(request.turns),
                   turns_judged=sum(1 for t in request.turns if t.status != "unjudged"), missed=request.missed)

    @property
    def partial(self) -> bool:
        """True when the session was seen only in part (``missed``); judged on what was seen."""
        return bool(self.missed)

    @property
    def resolved(self) -> Resolution | None:
        """The judge's ``yes``/``partly``/``no`` (None: not given)."""
        return self.verdict.resolved

    @property
    def resolved_turn(self) -> int | None:
        """The turn (1-based) where the need was resolved (None: not given or not resolved)."""
        return self.verdict.resolved_turn

    @property
    def contradictions(self) -> tuple[Contradiction, ...]:
        """Cross-turn contradictions the judge found."""
        return self.verdict.contradictions

    @property
    def repeated(self) -> tuple[Repetition, ...]:
        """Turns where the user had to repeat or rephrase."""
        return self.verdict.repeated

    @property
    def error(self) -> str | None:
        """Why the judge gave nothing (or not everything), None when it answered."""
        return self.verdict.error

    def scores(self) -> dict[str, float | None]:
        """The session's numbers by their ``session.*`` evaluation name (None where missing)."""
        resolved = {"yes": 1.0, "partly": 0.5, "no": 0.0}.get(self.resolved or "")
        given = self.verdict.error is None or self.verdict.resolved is not None
        return {"session.resolved": resolved, "session.groundedness": self.groundedness,
                "session.contradictions": float(len(self.contradictions)) if given else None,
                "session.repeated_turns": float(len(self.repeated)) if given else None}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"session_id": self.session_id, **self.verdict.to_dict(), "ended": self.ended,
                "groundedness": self.groundedness, "sentences_judged": self.sentences_judged,
                "sentences_missing": self.sentences_missing, "turns": self.turns, "turns_judged": self.turns_judged,
                "partial": self.partial, "missed": dict(self.missed)}


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What every exporter gets for a judged session: the ``request`` (the turns, with their span
    context for links), the ``judgement``, the content policy its texts go out through and the tracer
    provider its turns were traced with (None: the Auditor's)."""

    request: SessionRequest
    judgement: SessionJudgement
    content_policy: ContentPolicy
    tracer_provider: TracerProvider | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.request, SessionRequest) or not isinstance(self.judgement, SessionJudgement):
            raise ConfigurationError("SessionRecord needs a SessionRequest and a SessionJudgement")

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.request.session_id

    def turn_contexts(self) -> Iterable[tuple[str, str]]:
        """``(trace_id, span_id)`` of every traced turn, in order."""
        return [(t.trace_id, t.span_id) for t in self.request.turns if t.trace_id and t.span_id]


@runtime_checkable
class SessionExporter(Protocol):
    """An exporter that also records judged sessions: the Auditor's export stage gives it batches of
    [`SessionRecord`][ragaudit.SessionRecord] (on the same thread as the turns' records) when it has this method. The
    judge spans, the audit log and the Langfuse exporter have it; an exporter of yours may add it."""

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        """Take a batch of session records; never raise (a raise is counted as one error per record)."""
        ...
