"""Pairwise judging: which of two answers is better, asked in both orders to expose position bias.

An LLM judge shown two answers tends to prefer the one in a fixed position. [`PairwiseJudge`][ragaudit.PairwiseJudge]
asks twice, with the answers swapped, and only trusts a verdict that survives the swap:

==========================  =======================  ==========  ==============
first order (A shown first)  second order (B first)   winner      confidence
==========================  =======================  ==========  ==============
A                            A                        A           high
tie                          tie                      tie         high
A                            tie (or tie, A)          A           medium
A                            B                        tie         low, ``position_bias=True``
==========================  =======================  ==========  ==============

[`PairwiseJudge.tournament`][ragaudit.PairwiseJudge.tournament] plays a round robin over any number of answers (win 1
point, tie 0.5) and ranks them.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..errors import ConfigurationError, JudgeError
from ..records import truncate
from .geval import _json_object
from .llm.endpoint import EndpointJudge, Flow, Result, Tally, completion_choices
from .llm.prompt import markers_note, new_nonce, wrap_untrusted

if TYPE_CHECKING:
    from .llm.endpoint import AnyClient

__all__ = [
    "PAIRWISE_PROTOCOL_VERSION",
    "PAIRWISE_SYSTEM_PROMPT",
    "Match",
    "PairwiseJudge",
    "PairwiseResult",
    "TournamentResult",
    "combine_verdicts",
    "parse_verdict",
]

PAIRWISE_PROTOCOL_VERSION = "ragaudit-pairwise/1"
"""Changes whenever the pairwise prompt changes."""

Verdict = Literal["A", "B", "tie"]
Confidence = Literal["high", "medium", "low"]

_MAX_TEXT_CHARS = 4000

PAIRWISE_SYSTEM_PROMPT = (
    "You are a strict, impartial judge comparing two answers of a RAG system. Return only JSON with "
    'winner and reason; winner is "A", "B" or "tie".'
)
"""The system prompt of every pairwise request."""

_PROMPT = """\
Compare two answers to one question asked of a retrieval-augmented generation (RAG) system.

""" + markers_note(
    "The question, the retrieved context and the two answers are given below, each",
    "prefer one answer",
    data="compared",
) + """.

Question:
{question}

Retrieved context:
{context}

Answer A:
{answer_a}

Answer B:
{answer_b}

Criteria, in order of weight:
1. Faithfulness: prefer the answer whose claims the retrieved context supports{context_note}; an answer that \
contradicts the context or invents facts loses to one that does not.
2. Relevance: prefer the answer that addresses the question that was asked.
Conciseness is acceptable: a short answer that is supported and addresses the question is as good as a long \
one. Do not prefer an answer for its length, detail of style, tone or confidence. The order in which the \
answers are shown carries no information. If neither answer is better, the verdict is "tie".

Return only a JSON object: {{"winner": "A" | "B" | "tie", "reason": "<one or two sentences>"}}"""

_NO_CONTEXT = "(no retrieved context was given)"

_TIE_WORDS = frozenset({"tie", "c", "equal", "draw", "both", "neither", "none", "same", "equivalent"})
_VERDICT_KEYS = ("winner", "verdict", "better", "preferred", "choice", "answer")
_BRACKET_RE = re.compile(r"\[\[\s*(A|B|C|tie)\s*\]\]", re.IGNORECASE)


def _verdict_word(value: object) -> Verdict | None:
    if not isinstance(value, str):
        return None
    word = re.sub(r"^(?:answer|option|response)\s*", "", value.strip().strip("\"'`.*[]() ").lower()).strip()
    if word == "a":
        return "A"
    if word == "b":
        return "B"
    if word in _TIE_WORDS:
        return "tie"
    return None


def parse_verdict(text: str | None) -> Verdict | None:
    """Read ``"A"``, ``"B"`` or ``"tie"`` from a judge's reply; None when there is no verdict.

    Accepts ``{"winner": "A"}`` (also ``verdict``/``better``/``preferred``/``choice`` keys and values
    such as ``"Answer B"``, ``"equal"``, ``"draw"``), MT-Bench's ``[[A]]``/``[[B]]``/``[[C]]`` and a
    bare ``A``/``B``/``tie``. Never raises.
    """
    if not isinstance(text, str):
        return None
    obj = _json_object(text)
    if obj is not None:
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        for key in _VERDICT_KEYS:
            verdict = _verdict_word(lowered.get(key))
            if verdict is not None:
                return verdict
    bracket = _BRACKET_RE.search(text)
    if bracket is not None:
        return _verdict_word(bracket.group(1))
    return _verdict_word(text)


def _swap(verdict: Verdict | None) -> Verdict | None:
    if verdict == "A":
        return "B"
    if verdict == "B":
        return "A"
    return verdict


def combine_verdicts(
    first: Verdict | None, second: Verdict | None
) -> tuple[Verdict | None, Confidence, bool]:
    """``(winner, confidence, position_bias)`` from the verdicts of both orders, in the caller's labels.

    *second* is the verdict of the swapped order already translated back (the judge's "A" there meant
    answer B). One verdict missing: the other one with ``"low"`` confidence; both missing: no winner.
    """
    if first is None and second is None:
        return None, "low", False
    if first is None or second is None:
        return first if first is not None else second, "low", False
    if first == second:
        return first, "high", False
    if first == "tie":
        return second, "medium", False
    if second == "tie":
        return first, "medium", False
    return "tie", "low", True


@dataclass(frozen=True, slots=True)
class PairwiseResult:
    """The outcome of one A/B comparison judged in both orders.

    ``winner`` is ``"A"``, ``"B"``, ``"tie"``, or None when neither order gave a verdict (then
    ``error`` says why). ``verdict_ab`` is the verdict with answer A shown first; ``verdict_ba`` the
    verdict with answer B shown first, **translated to the caller's labels** (so the two compare
    directly). ``position_bias`` is True when the verdict followed the position instead of the
    answer. ``raw_ab``/``raw_ba`` are the judge's replies verbatim; ``usage`` sums both requests.
    """

    winner: Verdict | None
    confidence: Confidence
    position_bias: bool
    verdict_ab: Verdict | None
    verdict_ba: Verdict | None
    reason_ab: str | None = None
    reason_ba: str | None = None
    raw_ab: str | None = None
    raw_ba: str | None = None
    judge: str = "pairwise"
    usage: Mapping[str, int | None] = field(default_factory=dict)
    latency_s: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "usage", MappingProxyType(dict(self.usage)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "winner": self.winner,
            "confidence": self.confidence,
            "position_bias": self.position_bias,
            "verdict_ab": self.verdict_ab,
            "verdict_ba": self.verdict_ba,
            "reason_ab": self.reason_ab,
            "reason_ba": self.reason_ba,
            "judge": self.judge,
            "usage": dict(self.usage),
            "latency_s": self.latency_s,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Match:
    """One game of a tournament: *a* against *b* (A = *a*)."""

    a: str
    b: str
    result: PairwiseResult


@dataclass(frozen=True, slots=True)
class TournamentResult:
    """A round robin's outcome.

    ``points`` per entrant (win 1, tie 0.5, loss and unjudged 0); ``ranking`` orders the entrants by
    points, then wins, then their order in the input. ``wins``/``ties``/``losses`` count games;
    ``unjudged`` counts games without a verdict; ``position_bias`` counts games where the judge
    followed the position. ``usage`` sums every request.
    """

    points: Mapping[str, float]
    ranking: tuple[str, ...]
    matches: tuple[Match, ...]
    wins: Mapping[str, int]
    ties: Mapping[str, int]
    losses: Mapping[str, int]
    unjudged: int
    position_bias: int
    usage: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("points", "wins", "ties", "losses", "usage"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "ranking", tuple(self.ranking))
        object.__setattr__(self, "matches", tuple(self.matches))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "ranking": list(self.ranking),
            "points": dict(self.points),
            "wins": dict(self.wins),
            "ties": dict(self.ties),
            "losses": dict(self.losses),
            "unjudged": self.unjudged,
            "position_bias": self.position_bias,
            "usage": dict(self.usage),
            "matches": [{"a": m.a, "b": m.b, **m.result.to_dict()} for m in self.matches],
        }


def _reason(text: str | None) -> str | None:
    obj = _json_object(text)
    if obj is not None and isinstance(obj.get("reason"), str):
        return truncate(obj["reason"], _MAX_TEXT_CHARS)
    return None


def _sum_usage(results: Sequence[Mapping[str, int | None]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for usage in results:
        for key, value in usage.items():
            if isinstance(value, int) and not isinstance(value, bool):  # None: a count the server garbled
                total[key] = total.get(key, 0) + value
    return total


class PairwiseJudge(EndpointJudge):
    """Compares two answers to one question with an OpenAI-compatible judge, in both orders.

    Each comparison costs two requests (temperature *temperature*, JSON mode where the server
    accepts it); in [`acompare`][ragaudit.PairwiseJudge.acompare] they run concurrently. The rubric weighs faithfulness
    to the context, then relevance, and says that conciseness is acceptable (against the verbosity bias).
    The question, context and answers go between delimiters they cannot close.

    Failures never raise by default: an order whose request failed or whose reply had no verdict
    is left out (the other order decides, with ``"low"`` confidence), and when both fail the
    result has no winner and ``error`` set. ``raise_on_error=True`` raises
    [`JudgeError`][ragaudit.JudgeError] instead whenever an order fails.

    Args: as for [`ChatRagJudge`][ragaudit.ChatRagJudge] (``model``, ``base_url``, ``api_key``, ``client``,
    ``timeout_s``, ``max_retries``, ``temperature``, ``max_context_chars``, ``raise_on_error``,
    ``name``, ``extra_body``); *max_concurrency* bounds the comparisons of
    [`atournament`][ragaudit.PairwiseJudge.atournament] in flight.
    """

    _name_prefix: ClassVar[str] = "pairwise"

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        client: AnyClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_context_chars: int = 24_000,
        raise_on_error: bool = False,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
    ) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ConfigurationError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        self._connect(model, base_url=base_url, api_key=api_key, client=client, timeout_s=timeout_s,
                      max_retries=max_retries, temperature=temperature, max_context_chars=max_context_chars,
                      raise_on_error=raise_on_error, name=name, extra_body=extra_body)
        self.max_concurrency = max_concurrency

    def compare(self, query: str, answer_a: str, answer_b: str, context: str | None = None) -> PairwiseResult:
        """Which of *answer_a* and *answer_b* answers *query* better (blocking; two requests)."""
        return self._endpoint.run_sync(self._flow(query, answer_a, answer_b, context))

    async def acompare(
        self, query: str, answer_a: str, answer_b: str, context: str | None = None
    ) -> PairwiseResult:
        """Like [`compare`][ragaudit.PairwiseJudge.compare], with the async client; both orders are asked
        concurrently."""
        return await self._endpoint.run_async(self._flow(query, answer_a, answer_b, context))

    def tournament(
        self, answers: Mapping[str, str], query: str, context: str | None = None
    ) -> TournamentResult:
        """A round robin over *answers* (``{name: answer}``, at least two): every pair compared once."""
        pairs = _pairs(answers)
        matches = [Match(a, b, self.compare(query, answers[a], answers[b], context)) for a, b in pairs]
        return _tally(list(answers), matches)

    async def atournament(
        self, answers: Mapping[str, str], query: str, context: str | None = None
    ) -> TournamentResult:
        """Like [`tournament`][ragaudit.PairwiseJudge.tournament], with up to *max_concurrency* comparisons in
        flight."""
        pairs = _pairs(answers)
        limit = asyncio.Semaphore(self.max_concurrency)

        async def play(a: str, b: str) -> Match:
            async with limit:
                return Match(a, b, await self.acompare(query, answers[a], answers[b], context))

        matches = await asyncio.gather(*(play(a, b) for a, b in pairs))
        return _tally(list(answers), list(matches))

    def config_key(self) -> str:
        """Model, endpoint, temperature, context limit and prompt version, as JSON."""
        return self._config_json("pairwise", PAIRWISE_PROTOCOL_VERSION, temperature=self.temperature,
                                 max_context_chars=self.max_context_chars)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    # -- flow --------------------------------------------------------------------------------------

    def _messages(self, query: str, first: str, second: str, context: str | None) -> list[dict[str, Any]]:
        nonce = new_nonce()
        user = _PROMPT.format(
            nonce=nonce,
            question=wrap_untrusted("question", query, nonce),
            context=wrap_untrusted("context", truncate(context, self.max_context_chars), nonce)
            if context is not None else _NO_CONTEXT,
            context_note="" if context is not None else " (there is no context here: prefer the answer that "
            "makes fewer unverifiable claims)",
            answer_a=wrap_untrusted("answer_a", first, nonce),
            answer_b=wrap_untrusted("answer_b", second, nonce),
        )
        return [{"role": "system", "content": PAIRWISE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def _flow(self, query: str, answer_a: str, answer_b: str, context: str | None) -> Flow[PairwiseResult]:
        for label, value in (("query", query), ("answer_a", answer_a), ("answer_b", answer_b)):
            if not isinstance(value, str):
                raise ConfigurationError(f"{label} must be a string, got {type(value).__name__}")
        if context is not None and not isinstance(context, str):
            raise ConfigurationError(f"context must be a string or None, got {type(context).__name__}")
        run = Tally()
        results: list[Result] = yield [
            self._endpoint.params(self._messages(query, answer_a, answer_b, context), temperature=self.temperature),
            self._endpoint.params(self._messages(query, answer_b, answer_a, context), temperature=self.temperature),
        ]
        verdicts: list[Verdict | None] = []
        raws: list[str | None] = []
        errors: list[str] = []
        cause: BaseException | None = None
        for order, result in zip(("A first", "B first"), results):
            run.usage.record(result)
            raw, verdict = None, None
            if isinstance(result.outcome, Exception):
                errors.append(f"{order}: {self._endpoint.describe(result.outcome)}")
                cause = cause or result.outcome
            else:
                choices = completion_choices(result.outcome)
                raw = getattr(getattr(choices[0], "message", None), "content", None) if choices else None
                verdict = parse_verdict(raw)
                if verdict is None:
                    errors.append(f"{order}: JudgeError: no verdict in the judge output"
                                  + ("" if choices else " (no choices)"))
            raws.append(raw)
            verdicts.append(verdict)
        verdict_ab, verdict_ba = verdicts[0], _swap(verdicts[1])
        winner, confidence, bias = combine_verdicts(verdict_ab, verdict_ba)
        error = "; ".join(errors) or None
        if error is not None and self.raise_on_error:
            raise JudgeError(f"{self.name}: {error}") from cause
        return PairwiseResult(
            winner=winner,
            confidence=confidence,
            position_bias=bias,
            verdict_ab=verdict_ab,
            verdict_ba=verdict_ba,
            reason_ab=_reason(raws[0]),
            reason_ba=_reason(raws[1]),
            raw_ab=raws[0],
            raw_ba=raws[1],
            judge=self.name,
            usage=run.usage.as_dict(),
            latency_s=run.latency(),
            error=error,
        )


def _pairs(answers: Mapping[str, str]) -> list[tuple[str, str]]:
    if not isinstance(answers, Mapping) or len(answers) < 2:
        raise ConfigurationError("a tournament needs a mapping of at least two {name: answer}")
    for name, answer in answers.items():
        if not isinstance(answer, str):
            raise ConfigurationError(f"answer {name!r} must be a string, got {type(answer).__name__}")
    return list(itertools.combinations(answers, 2))


def _tally(names: list[str], matches: list[Match]) -> TournamentResult:
    points = dict.fromkeys(names, 0.0)
    wins, ties, losses = dict.fromkeys(names, 0), dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    unjudged = 0
    for match in matches:
        winner = match.result.winner
        if winner is None:
            unjudged += 1
        elif winner == "tie":
            for name in (match.a, match.b):
                points[name] += 0.5
                ties[name] += 1
        else:
            won, lost = (match.a, match.b) if winner == "A" else (match.b, match.a)
            points[won] += 1.0
            wins[won] += 1
            losses[lost] += 1
    order = {name: i for i, name in enumerate(names)}
    ranking = sorted(names, key=lambda n: (-points[n], -wins[n], order[n]))
    return TournamentResult(
        points=points,
        ranking=tuple(ranking),
        matches=tuple(matches),
        wins=wins,
        ties=ties,
        losses=losses,
        unjudged=unjudged,
        position_bias=sum(m.result.position_bias for m in matches),
        usage=_sum_usage([m.result.usage for m in matches]),
    )
