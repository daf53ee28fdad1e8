"""G-Eval: scores as the probability-weighted mean of a judge's 1-5 score tokens, with a sampling fallback.

The judge follows written evaluation steps per criterion (decompose the answer into claims, check each
against the context, weigh severity, decide) and writes an integer score from 1 to 5. Instead of
taking that integer at face value, [`GEvalJudge`][ragaudit.GEvalJudge] reads the ``top_logprobs`` of the token that
carries it, keeps the alternatives that are score digits ``"1"`` .. ``"5"`` (other tokens are
dropped), renormalises their probabilities and takes the expected score::

    P(5)=0.684, P(4)=0.262, P(3)=0.046, P(2)=0.006, P(1)=0.002  ->  4.620  ->  (4.620 - 1) / 4 = 0.905

In ``"single_call"`` mode one request returns all three scores: the position of each score's digit in
the JSON reply is found and that token's own ``top_logprobs`` are read, so one call gives three
distributions. ``"per_dimension"`` mode makes one request per criterion.

A server that returns no logprobs (or rejects the parameter) is remembered, and the judge falls back
to Monte Carlo: ``samples`` completions at ``sample_temperature`` (one request with ``n`` where the
server honours it, else one request per missing sample), scored by the mean of the parsed integers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..errors import ConfigurationError, JudgeError
from ..records import SCORE_NAMES, JudgeIdentity, Judgement, JudgeRequest, truncate
from .base import BaseRagJudge
from .cost import CostEstimate, chat_call_estimate, typical_reply_chars
from .geval_protocol import GEVAL_PROTOCOL_VERSION, GEVAL_SYSTEM_PROMPT, GEvalProtocol, build_geval_messages
from .llm.endpoint import (
    EndpointJudge,
    Flow,
    Result,
    Tally,
    choice_text,
    completion_choices,
    endpoint_host,
)
from .llm.parsing import DEFAULT_MAX_REPLY_CHARS, find_json_object
from .llm.prompt import template_hash

if TYPE_CHECKING:
    from .llm.endpoint import AnyClient

__all__ = [
    "GEVAL_PROTOCOL_VERSION",
    "GEVAL_SYSTEM_PROMPT",
    "GEvalJudge",
    "GEvalProtocol",
    "build_geval_messages",
    "expected_score",
    "score_distribution",
]

Mode = Literal["single_call", "per_dimension"]
Method = Literal["logprobs", "sampling", "parsed"]

_SCORES = (1, 2, 3, 4, 5)
_MAX_REASON_CHARS = 4000
_MAX_NOTES = 20

def _json_object(text: str | None) -> dict[str, Any] | None:
    """The judge's JSON object (the protocol's tolerant rule, any object accepted), or None."""
    return find_json_object(text, wanted=lambda obj: True) if isinstance(text, str) else None


# -- reading scores and their token distributions --------------------------------------------------

_DIGIT_RE = re.compile(r"\s*\"?\s*([1-5])\s*\"?\s*[,}]?\s*")
_NUMBER_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")
_KEY_SUFFIX_RE = re.compile(r"score$")


def score_distribution(
    alternatives: Sequence[tuple[str, float]], prefix: str = ""
) -> dict[int, float] | None:
    """The probabilities of the scores 1..5 among a token's alternatives, renormalised to sum to 1.

    *alternatives* are ``(token, logprob)`` pairs (a token's ``top_logprobs``). A token counts for a
    score when, after *prefix* (the part of the sampled token before the digit, e.g. a space), it is
    that digit alone (surrounding spaces, a quote or a following ``,``/``}`` allowed); every other
    token (``"four"``, ``"10"``, ``"\\n"``) is dropped. Alternatives for the same digit (``"4"`` and
    ``" 4"``) add up. Returns None when no alternative is a score.
    """
    mass: dict[int, float] = {}
    for token, logprob in alternatives:
        if not isinstance(token, str) or not isinstance(logprob, (int, float)) or math.isnan(logprob):
            continue
        if prefix and token.startswith(prefix):
            token = token[len(prefix):]
        elif prefix.strip():  # the sampled token was e.g. ':4'; an alternative without ':' is another path
            continue
        match = _DIGIT_RE.fullmatch(token)
        if match is None:
            continue
        score = int(match.group(1))
        mass[score] = mass.get(score, 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0.0 or not math.isfinite(total):
        return None
    return {score: mass.get(score, 0.0) / total for score in _SCORES}


def expected_score(distribution: Mapping[int, float]) -> float:
    """The mean score (1..5) under *distribution* (score -> probability, summing to 1)."""
    return sum(score * p for score, p in distribution.items())


def _to_unit(score: float) -> float:
    # *score* is a mean of 1..5 (scores outside 1-5 are never read), so this bound only absorbs float
    # rounding; it never turns an out-of-scale value into a score.
    return min(1.0, max(0.0, (score - 1.0) / 4.0))


def _norm_key(key: str) -> str:
    return _KEY_SUFFIX_RE.sub("", re.sub(r"[\s_\-]", "", key).lower()) or "score"


_KEY_NAMES = {"faithfulness": "faithfulness", "contextrelevance": "context_relevance",
              "answerrelevance": "answer_relevance", "score": "score"}


def _string_end(text: str, start: int) -> int:
    """The index after the JSON string that opens at *start* (len(text) when it never closes)."""
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i + 1
        i += 1
    return len(text)


def _top_level_values(text: str) -> dict[str, int]:
    """Where the value of each top-level key of the first JSON object in *text* starts.

    Keys are normalised (``faithfulnessScore`` -> ``faithfulness``); nested objects and strings are
    skipped, so ``"faithfulness": 3`` quoted inside an analysis string is never taken for the score.
    """
    start = text.find("{")
    if start < 0:
        return {}
    found: dict[str, int] = {}
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            j = end
            while j < len(text) and text[j].isspace():
                j += 1
            if depth == 1 and j < len(text) and text[j] == ":":
                j += 1
                while j < len(text) and text[j].isspace():
                    j += 1
                try:
                    key = json.loads(text[i:end])
                except ValueError:
                    key = text[i + 1 : end - 1]
                name = _KEY_NAMES.get(_norm_key(str(key)))
                if name is not None:
                    found.setdefault(name, j)
                i = j
                continue
            i = end
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                break
        i += 1
    return found


def _read_number(text: str, offset: int) -> tuple[float | None, int]:
    """The number whose text starts at *offset* (a quoted number allowed) and where its first digit is."""
    if offset < len(text) and text[offset] == '"':
        offset += 1
    match = _NUMBER_RE.match(text, offset)
    if match is None:
        return None, offset
    digit = offset + (1 if text[offset] in "+-" else 0)
    return float(match.group(0)), digit


def _read_reason(text: str) -> str | None:
    obj = _json_object(text)
    if obj is None:
        return None
    for key in ("reason", "reasoning", "explanation", "analysis"):
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            return value[:_MAX_REASON_CHARS]
    return None


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    logprob: float
    alternatives: tuple[tuple[str, float], ...]


def _tokens(choice: Any) -> list[_Token]:
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    tokens = []
    for item in content:
        text = getattr(item, "token", None)
        if not isinstance(text, str):
            return []
        logprob = float(getattr(item, "logprob", 0.0) or 0.0)
        alternatives = tuple(
            (alt.token, float(alt.logprob))
            for alt in (getattr(item, "top_logprobs", None) or [])
            if isinstance(getattr(alt, "token", None), str) and isinstance(getattr(alt, "logprob", None), (int, float))
        )
        tokens.append(_Token(text, logprob, alternatives))
    return tokens


@dataclass(slots=True)
class _DimScore:
    """One dimension's outcome on the 1-5 scale, before mapping to [0, 1]."""

    method: Method | None = None
    expected: float | None = None
    distribution: dict[int, float] | None = None
    samples: list[float] = field(default_factory=list)
    sampled_token: str | None = None
    error: str | None = None

    @property
    def variance(self) -> float | None:
        if self.method == "sampling" and self.samples:
            mean = sum(self.samples) / len(self.samples)
            return sum((s - mean) ** 2 for s in self.samples) / len(self.samples)
        if self.distribution is not None and self.expected is not None:
            return sum(p * (s - self.expected) ** 2 for s, p in self.distribution.items())
        return None


def _value_offset(positions: Mapping[str, int], name: str, several: bool) -> int | None:
    for key in (name,) if several else ("score", name):
        if key in positions:
            return positions[key]
    return None


def _logprob_scores(text_tokens: list[_Token], names: Sequence[str], notes: list[str]) -> dict[str, _DimScore]:
    """Each named score's distribution, read from the top_logprobs of the token carrying its digit.

    A score written as a number from 1 to 5 that is not one digit token (``4.5``), or whose token has
    no digit among its alternatives, is taken as written (method ``"parsed"``).
    """
    text = "".join(t.text for t in text_tokens)
    starts, offset = [], 0
    for token in text_tokens:
        starts.append(offset)
        offset += len(token.text)
    positions = _top_level_values(text)
    out: dict[str, _DimScore] = {}
    for name in names:
        at = _value_offset(positions, name, len(names) > 1)
        if at is None:
            notes.append(f"{name}: no score key in the judge output")
            continue
        value, digit_at = _read_number(text, at)
        if value is None or not 1.0 <= value <= 5.0:
            notes.append(f"{name}: the score is not a number from 1 to 5 ({text[at:at + 12]!r})")
            continue
        distribution = None
        if value in _SCORES:
            index = max(i for i, s in enumerate(starts) if s <= digit_at)
            token = text_tokens[index]
            alternatives = list(token.alternatives)
            if all(alt != token.text for alt, _ in alternatives):
                alternatives.append((token.text, token.logprob))
            distribution = score_distribution(alternatives, token.text[: digit_at - starts[index]])
        if distribution is None:
            notes.append(f"{name}: no score digit among the token's top_logprobs; the written score is used")
            out[name] = _DimScore("parsed", value)
            continue
        out[name] = _DimScore("logprobs", expected_score(distribution), distribution, sampled_token=token.text)
    return out


def _parsed_scores(text: str, names: Sequence[str]) -> dict[str, float]:
    """The 1-5 scores a sampled reply gives (values outside 1..5 or unreadable are left out)."""
    positions = _top_level_values(text)
    out: dict[str, float] = {}
    for name in names:
        at = _value_offset(positions, name, len(names) > 1)
        if at is not None:
            value, _ = _read_number(text, at)
            if value is not None and 1.0 <= value <= 5.0:
                out[name] = int(value) if value.is_integer() else value
    return out


# -- the judge ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run(Tally):
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cause: BaseException | None = None
    response_id: str | None = None
    prompt_hash: str | None = None

    def answered(self, outcome: Any) -> None:
        """Note the model and completion id of a reply (the judge's identity)."""
        self.response_model = getattr(outcome, "model", None) or self.response_model
        response_id = getattr(outcome, "id", None)
        self.response_id = response_id if isinstance(response_id, str) else self.response_id

    def fail(self, message: str, cause: BaseException | None = None) -> None:
        self.errors.append(message)
        if self.cause is None:
            self.cause = cause


_Group = tuple[tuple[str, ...], list[dict[str, Any]]]


class GEvalJudge(EndpointJudge, BaseRagJudge):
    """A RAG judge that scores with G-Eval: evaluation steps, 1-5 scores, probability-weighted.

    Each score is ``(E[s] - 1) / 4`` where ``E[s]`` is the expected score under the judge's token
    probabilities for the digits 1..5 (see `score_distribution`). ``mode="single_call"``
    (default) gets all three scores, each with its own distribution, from one request;
    ``mode="per_dimension"`` sends one request per criterion (concurrently in [`ajudge`][ragaudit.GEvalJudge.ajudge]).

    When the server returns no logprobs, or rejects them, the judge remembers it and uses Monte Carlo
    sampling instead: *samples* completions at *sample_temperature*, in one request with ``n`` when
    the server returns that many choices, else in one request per missing sample. The score is then
    ``(mean - 1) / 4`` of the parsed integers. ``use_logprobs=False`` skips the logprob attempt.

    ``details`` of each judgement holds, per score: ``methods`` (``"logprobs"``, ``"sampling"``, or
    ``"parsed"`` for a written score that no digit token carries, such as ``4.5``),
    ``distributions`` (probability per score ``"1"`` .. ``"5"``: token probabilities, or sample
    frequencies), ``expected`` (the mean on the 1-5 scale), ``variance`` (on the 1-5 scale) and, for
    sampling, ``samples``; plus ``mode``, ``notes`` and what was learnt about the server.

    Failures never raise by default (``raise_on_error=True`` raises [`JudgeError`][ragaudit.JudgeError]):
    a transport error or a reply without any readable score gives a judgement with ``error`` set;
    a score that could not be read is None.

    ``model``, ``base_url``, ``api_key``, ``client``, ``timeout_s``, ``max_retries``,
    ``max_context_chars``, ``extra_body``, ``name`` and ``raise_on_error`` are as for
    [`ChatRagJudge`][ragaudit.ChatRagJudge].

    Args:
        mode: ``"single_call"`` or ``"per_dimension"``.
        top_logprobs: alternatives asked for per token, 1 to 20 (5 covers the five digits).
        samples: completions for the sampling fallback (>= 1).
        sample_temperature: temperature of the fallback samples, 0 to 2.
        temperature: temperature of the logprob request, 0 to 2.
        use_logprobs: False to go straight to sampling.
    """

    _name_prefix: ClassVar[str] = "geval"
    protocol: ClassVar[GEvalProtocol] = GEvalProtocol()
    """The protocol (its messages); the reading is this judge's own (token probabilities or samples)."""

    @property
    def protocol_version(self) -> str:
        """The protocol's wire version, in every judgement's identity."""
        return self.protocol.version

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        client: AnyClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        mode: Mode = "single_call",
        top_logprobs: int = 5,
        samples: int = 5,
        sample_temperature: float = 1.0,
        temperature: float = 0.0,
        use_logprobs: bool = True,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_context_chars: int = 24_000,
        raise_on_error: bool = False,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in ("single_call", "per_dimension"):
            raise ConfigurationError(f"mode must be 'single_call' or 'per_dimension', got {mode!r}")
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 1 <= top_logprobs <= 20:
            raise ConfigurationError(f"top_logprobs must be an int from 1 to 20, got {top_logprobs!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ConfigurationError(f"samples must be an int >= 1, got {samples!r}")
        if isinstance(sample_temperature, bool) or not isinstance(sample_temperature, (int, float)) \
                or not 0.0 <= sample_temperature <= 2.0:
            raise ConfigurationError(f"sample_temperature must be a number from 0 to 2, got {sample_temperature!r}")
        self._connect(model, base_url=base_url, api_key=api_key, client=client, timeout_s=timeout_s,
                      max_retries=max_retries, temperature=temperature, max_context_chars=max_context_chars,
                      raise_on_error=raise_on_error, name=name, extra_body=extra_body)
        self.mode: Mode = mode
        self.top_logprobs = top_logprobs
        self.samples = samples
        self.sample_temperature = float(sample_temperature)
        self._logprobs_supported: bool | None = None if use_logprobs else False
        self._n_supported: bool | None = None

    @property
    def logprobs_supported(self) -> bool | None:
        """Whether the server returned logprobs (None until the first judgement)."""
        return self._logprobs_supported

    @property
    def n_supported(self) -> bool | None:
        """Whether the server honours ``n`` > 1 (None until the sampling fallback first ran)."""
        return self._n_supported

    def judge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the sync client (blocking)."""
        return self._finish(self._endpoint.run_sync(self._flow(request)))

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the async client; per-dimension requests run concurrently."""
        return self._finish(await self._endpoint.run_async(self._flow(request)))

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float = 4.0, exact: bool = True
    ) -> CostEstimate:
        """Calls and tokens for *request* as this judge would send it now (see `cost`).

        The exact prompts and a typical reply (an analysis of about 40 words); with sampling, *samples*
        replies, in one call where the server honours ``n`` (or it is not known yet) and else in
        *samples* calls. The one-off probe that finds a server without logprobs is not counted.
        """
        total = CostEstimate()
        for names, messages in self._groups(request):
            shape: dict[str, Any] = {"analysis": "x" * 240}
            shape.update({name: 4 for name in names} if len(names) > 1 else {"score": 4})
            one = chat_call_estimate(messages, typical_reply_chars(shape), chars_per_token)
            if self._logprobs_supported is not False:
                total += one
            elif self._n_supported is False:
                total += CostEstimate(calls=self.samples, prompt_tokens=one.prompt_tokens * self.samples,
                                      completion_tokens=one.completion_tokens * self.samples)
            else:
                total += CostEstimate(calls=1, prompt_tokens=one.prompt_tokens,
                                      completion_tokens=one.completion_tokens * self.samples)
        return total

    def config_key(self) -> str:
        """Model, endpoint, mode, logprob and sampling settings and prompt version, as JSON."""
        return self._config_json(
            "geval", self.protocol_version, mode=self.mode, top_logprobs=self.top_logprobs, samples=self.samples,
            sample_temperature=self.sample_temperature, temperature=self.temperature,
            max_context_chars=self.max_context_chars, extra_body=self._endpoint.extra_body,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, mode={self.mode!r})"

    # -- flow --------------------------------------------------------------------------------------

    def _finish(self, outcome: tuple[Judgement, BaseException | None]) -> Judgement:
        judgement, cause = outcome
        if judgement.error is not None and self.raise_on_error:
            raise JudgeError(f"{self.name}: {judgement.error}") from cause
        return judgement

    def _groups(self, request: JudgeRequest) -> list[_Group]:
        if self.mode == "single_call":
            return [(SCORE_NAMES, self.protocol.messages(request, max_context_chars=self.max_context_chars))]
        return [
            ((name,), self.protocol.messages(request, max_context_chars=self.max_context_chars, dimensions=(name,)))
            for name in SCORE_NAMES
        ]

    def _flow(self, request: JudgeRequest) -> Flow[tuple[Judgement, BaseException | None]]:
        run = _Run()
        scores: dict[str, _DimScore] = {}
        try:
            pending = self._groups(request)
            run.prompt_hash = template_hash([m for _, messages in pending for m in messages])
            if self._logprobs_supported is not False:
                results = yield [
                    self._endpoint.params(messages, temperature=self.temperature, logprobs=True,
                                          top_logprobs=self.top_logprobs)
                    for _, messages in pending
                ]
                pending = self._read_logprob_results(pending, results, scores, run)
            if pending:
                yield from self._sample(pending, scores, run)
        except Exception as exc:  # a bug here must not take the host down: report it as a failed judgement
            run.fail(f"{type(exc).__name__}: {exc}", exc)
        return self._judgement(scores, run), run.cause

    def _read_logprob_results(
        self, groups: list[_Group], results: list[Result], scores: dict[str, _DimScore], run: _Run
    ) -> list[_Group]:
        """Record the logprob scores; return the groups that need the sampling fallback."""
        fallback: list[_Group] = []
        for group, result in zip(groups, results):
            names = group[0]
            run.usage.record(result)
            outcome = result.outcome
            if isinstance(outcome, Exception):
                if self._endpoint.rejects(outcome, "logprobs"):
                    self._logprobs_supported = False
                    run.notes.append("the server rejected logprobs: sampling fallback")
                    fallback.append(group)
                else:
                    self._fail_group(names, self._endpoint.describe(outcome), run, scores, outcome)
                continue
            run.answered(outcome)
            choices = completion_choices(outcome)
            if not choices:
                self._fail_group(names, "JudgeError: the judge returned no choices", run, scores)
                continue
            text = choice_text(choices[0])
            run.outputs.append(text)
            tokens = _tokens(choices[0])
            if not tokens:
                self._logprobs_supported = False
                run.notes.append("the server returned no logprobs: sampling fallback")
                fallback.append(group)
                continue
            self._logprobs_supported = True
            read = _logprob_scores(tokens, names, run.notes)
            scores.update(read)
            self._note_reason(text, names, run)
            if not read:
                self._fail_group(names, "JudgeError: no readable 1-5 score in the judge output", run, scores)
        return fallback

    def _sample(self, groups: list[_Group], scores: dict[str, _DimScore], run: _Run) -> Flow[None]:
        want = self.samples
        texts: list[list[str]] = [[] for _ in groups]
        failures: list[str | None] = [None] * len(groups)
        if self._n_supported is not False:
            extra: dict[str, Any] = {"temperature": self.sample_temperature}
            if want > 1:
                extra["n"] = want
            results = yield [self._endpoint.params(messages, **extra) for _, messages in groups]
            self._collect(results, texts, failures, run)
            if want > 1 and any(failure is None for failure in failures):
                got = max(len(t) for t, f in zip(texts, failures) if f is None)
                self._n_supported = got >= want
                if got < want:
                    run.notes.append(f"the server returned {got} of n={want} choices: one request per sample")
        batch: list[tuple[int, dict[str, Any]]] = []
        for index, (_, messages) in enumerate(groups):
            if failures[index] is None:
                missing = want - len(texts[index])
                params = self._endpoint.params(messages, temperature=self.sample_temperature)
                batch += [(index, params)] * max(0, missing)
        if batch:
            results = yield [params for _, params in batch]
            for (index, _), result in zip(batch, results):
                sub_texts: list[list[str]] = [[]]
                sub_failures: list[str | None] = [None]
                self._collect([result], sub_texts, sub_failures, run)
                texts[index] += sub_texts[0]
                if not texts[index] and sub_failures[0] is not None:
                    failures[index] = sub_failures[0]
        for (names, _), group_texts, failure in zip(groups, texts, failures):
            if failure is not None and not group_texts:
                self._fail_group(names, failure, run, scores)
                continue
            self._score_samples(names, group_texts, scores, run)

    def _collect(
        self, results: list[Result], texts: list[list[str]], failures: list[str | None], run: _Run
    ) -> None:
        for index, result in enumerate(results):
            run.usage.record(result)
            if isinstance(result.outcome, Exception):
                failures[index] = self._endpoint.describe(result.outcome)
                if run.cause is None:
                    run.cause = result.outcome
                continue
            run.answered(result.outcome)
            choices = completion_choices(result.outcome)
            if not choices:
                failures[index] = "JudgeError: the judge returned no choices"
            texts[index] += [choice_text(choice) for choice in choices]

    def _score_samples(
        self, names: tuple[str, ...], texts: list[str], scores: dict[str, _DimScore], run: _Run
    ) -> None:
        if texts:
            run.outputs.append(texts[0])
            self._note_reason(texts[0], names, run)
        for name in names:
            values = [parsed[name] for text in texts if name in (parsed := _parsed_scores(text, names))]
            if len(values) < len(texts):
                run.notes.append(f"{name}: {len(texts) - len(values)} of {len(texts)} samples had no 1-5 score")
            if not values:
                scores[name] = _DimScore(error=f"no readable 1-5 score in {len(texts)} samples")
                run.fail(f"JudgeError: {name}: no readable 1-5 score in {len(texts)} samples")
                continue
            counts = {score: sum(round(v) == score for v in values) / len(values) for score in _SCORES}
            scores[name] = _DimScore("sampling", sum(values) / len(values), counts, samples=values)

    def _note_reason(self, text: str, names: tuple[str, ...], run: _Run) -> None:
        reason = _read_reason(text)
        if reason is not None:
            run.reasons.append(reason if len(names) > 1 else f"{names[0]}: {reason}")

    @staticmethod
    def _fail_group(
        names: Sequence[str], message: str, run: _Run, scores: dict[str, _DimScore],
        cause: BaseException | None = None,
    ) -> None:
        label = message if len(names) > 1 else f"{names[0]}: {message}"
        run.fail(label, cause)
        for name in names:
            scores.setdefault(name, _DimScore(error=message))

    def _judgement(self, scores: dict[str, _DimScore], run: _Run) -> Judgement:
        values = {
            name: _to_unit(s.expected) if (s := scores.get(name)) is not None and s.expected is not None else None
            for name in SCORE_NAMES
        }
        details: dict[str, Any] = {
            "mode": self.mode,
            "model": self.model,
            "response_model": run.response_model,
            "protocol": self.protocol.name,
            "protocol_version": self.protocol_version,
            "methods": {name: scores[name].method if name in scores else None for name in SCORE_NAMES},
            "distributions": {
                name: {str(k): p for k, p in dist.items()}
                if name in scores and (dist := scores[name].distribution) is not None else None
                for name in SCORE_NAMES
            },
            "expected": {name: scores[name].expected if name in scores else None for name in SCORE_NAMES},
            "variance": {name: scores[name].variance if name in scores else None for name in SCORE_NAMES},
            "logprobs_supported": self._logprobs_supported,
            "n_supported": self._n_supported,
            "response_format": self._endpoint.response_format_ok,
            "notes": run.notes[:_MAX_NOTES],
        }
        sampled = {name: s.samples for name, s in scores.items() if s.method == "sampling"}
        if sampled:
            details["samples"] = sampled
        tokens = {name: s.sampled_token for name, s in scores.items() if s.sampled_token is not None}
        if tokens:
            details["score_tokens"] = tokens
        has_score = any(v is not None for v in values.values())
        error = None
        if run.errors:
            error = "; ".join(run.errors)
            if len(error) > _MAX_REASON_CHARS:
                error = error[:_MAX_REASON_CHARS] + "…"
        elif not has_score:
            error = "JudgeError: no readable 1-5 score in the judge output"
        return Judgement(
            faithfulness=values["faithfulness"],
            context_relevance=values["context_relevance"],
            answer_relevance=values["answer_relevance"],
            reason=" ".join(run.reasons)[:_MAX_REASON_CHARS] or None,
            raw_output=truncate("\n".join(run.outputs), DEFAULT_MAX_REPLY_CHARS) if run.outputs else None,
            judge=self.name,
            latency_s=run.latency(),
            usage=run.usage.as_dict(),
            error=error,
            details=details,
            identity=JudgeIdentity(model=self.model, endpoint=endpoint_host(self.base_url),
                                   protocol=self.protocol.name, protocol_version=self.protocol_version,
                                   prompt_hash=run.prompt_hash,
                                   response_id=run.response_id, response_model=run.response_model),
        )
