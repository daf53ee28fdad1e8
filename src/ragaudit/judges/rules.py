"""Cheap deterministic checks on every answer, and a judge that adds a detailed judge on a sample.

:class:`RuleJudge` checks what needs no model: length bounds, required and forbidden keywords or
patterns, JSON validity, a citation. :class:`TieredJudge` runs such a cheap judge on every answer
and a detailed (LLM) judge on a deterministic share of them: the "detailed judging on 10 %, cheap
checks on the other 90 %" setup. Give it to the Auditor with ``sample_rate=1.0``::

    judge = TieredJudge(RuleJudge(max_chars=1200, forbidden=("guarantee",), citation_required=True),
                        ChatRagJudge("gpt-4o-mini"), detailed_rate=0.1)
    auditor = Auditor(judge, sample_rate=1.0)
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._sampling import sampled
from ..errors import ConfigurationError
from ..records import SCORE_NAMES, Judgement, JudgeRequest
from .base import BaseRagJudge, RagJudge
from .cost import CostEstimate, estimate_request

__all__ = ["RuleJudge", "TieredJudge", "sample_key"]

_BARE_CITATION_RE = re.compile(r"\[\s*\d{1,4}(?:\s*[,\-–]\s*\d{1,4})*\s*\]|\(\s*sources?\s*:[^)]+\)", re.IGNORECASE)
_MAX_DETAIL_CHARS = 120


class RuleJudge(BaseRagJudge):
    """Deterministic checks on the answer, each a named pass/fail; no model, no network, microseconds.

    Checks (each only when configured; ``name`` of the check in brackets):

    - ``min_chars`` / ``max_chars`` [``min_chars``, ``max_chars``]: the answer's length, leading and
      trailing whitespace not counted;
    - ``required`` / ``forbidden`` [``required:<word>``, ``forbidden:<word>``]: keywords or phrases,
      matched case-insensitively anywhere in the answer (use a regex for word boundaries);
    - ``required_regex`` / ``forbidden_regex`` [``required_regex:<pattern>``, ...]: patterns (strings,
      compiled here, or compiled ``re.Pattern`` objects) searched in the answer;
    - ``json_valid`` [``json_valid``]: the answer parses as JSON;
    - ``citation_required`` [``citation_required``]: the answer cites a retrieved document by an
      explicit marker (``[1]``, ``[doc-id]``, ``(source: file.pdf)``, a source name, as
      :func:`~ragaudit.citations.find_citations` reads them; overlap alone does not count). When the
      request carries no documents, a bracketed number or a ``(source: ...)`` note counts.

    ``details["rules"]`` maps each check's name to ``{"passed": bool, "detail": str}``,
    ``details["passed"]`` is True when all passed and ``details["failed"]`` lists the failed names;
    the reason says which failed and why.

    Rule checks are not semantic judgements, so by default they claim none of the three standard
    scores (all stay None). With ``maps_to`` set to one of them, that score is 1.0 when every check
    passed and 0.0 otherwise. Raises ConfigurationError for no checks, bad bounds, empty or
    duplicate keywords, or a regex that does not compile (naming it).
    """

    calls_per_judgement = 0

    def __init__(
        self,
        *,
        min_chars: int | None = None,
        max_chars: int | None = None,
        required: Iterable[str] = (),
        forbidden: Iterable[str] = (),
        required_regex: Iterable[str | re.Pattern[str]] = (),
        forbidden_regex: Iterable[str | re.Pattern[str]] = (),
        json_valid: bool = False,
        citation_required: bool = False,
        maps_to: str | None = None,
        name: str = "rules",
    ) -> None:
        for label, bound in (("min_chars", min_chars), ("max_chars", max_chars)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                raise ConfigurationError(f"{label} must be an int >= 0 or None, got {bound!r}")
        if min_chars is not None and max_chars is not None and min_chars > max_chars:
            raise ConfigurationError(f"min_chars ({min_chars}) is greater than max_chars ({max_chars})")
        if not isinstance(json_valid, bool) or not isinstance(citation_required, bool):
            raise ConfigurationError("json_valid and citation_required must be True or False")
        if maps_to is not None and maps_to not in SCORE_NAMES:
            raise ConfigurationError(f"maps_to must be one of {', '.join(SCORE_NAMES)} or None, got {maps_to!r}")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.required = _keywords("required", required)
        self.forbidden = _keywords("forbidden", forbidden)
        self.required_regex = _patterns("required_regex", required_regex)
        self.forbidden_regex = _patterns("forbidden_regex", forbidden_regex)
        self.json_valid = json_valid
        self.citation_required = citation_required
        self.maps_to = maps_to
        if not self.checks:
            raise ConfigurationError("RuleJudge has no checks: configure at least one")

    def judge(self, request: JudgeRequest) -> Judgement:
        """Run every check on *request* (pure CPU, never raises for any answer)."""
        started = time.perf_counter()
        results = self._check(request)
        failed = [name for name, result in results.items() if not result["passed"]]
        if failed:
            reason = f"{len(failed)} of {len(results)} rule checks failed: " + "; ".join(
                f"{name} ({results[name]['detail']})" for name in failed
            )
        else:
            reason = f"all {len(results)} rule checks passed"
        verdict = 0.0 if failed else 1.0
        return Judgement(
            faithfulness=verdict if self.maps_to == "faithfulness" else None,
            context_relevance=verdict if self.maps_to == "context_relevance" else None,
            answer_relevance=verdict if self.maps_to == "answer_relevance" else None,
            reason=reason,
            judge=self.name,
            latency_s=time.perf_counter() - started,
            usage={"calls": 0},
            details={"rules": results, "passed": not failed, "failed": failed},
        )

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Same as :meth:`judge`: the checks take microseconds, so they run on the loop itself."""
        return self.judge(request)

    def config_key(self) -> str:
        """Every check's configuration, as JSON."""
        return json.dumps(
            {
                "judge": "rules",
                "min_chars": self.min_chars,
                "max_chars": self.max_chars,
                "required": self.required,
                "forbidden": self.forbidden,
                "required_regex": [(p.pattern, p.flags) for p in self.required_regex],
                "forbidden_regex": [(p.pattern, p.flags) for p in self.forbidden_regex],
                "json_valid": self.json_valid,
                "citation_required": self.citation_required,
                "maps_to": self.maps_to,
            },
            sort_keys=True,
        )

    def _check(self, request: JudgeRequest) -> dict[str, dict[str, Any]]:
        answer = request.answer
        results: dict[str, dict[str, Any]] = {}

        def record(name: str, passed: bool, detail: str) -> None:
            results[name] = {"passed": passed, "detail": detail}

        length = len(answer.strip())
        if self.min_chars is not None:
            record("min_chars", length >= self.min_chars, f"{length} chars, at least {self.min_chars} needed")
        if self.max_chars is not None:
            record("max_chars", length <= self.max_chars, f"{length} chars, at most {self.max_chars} allowed")
        folded = answer.casefold() if self.required or self.forbidden else ""
        for word in self.required:
            found = word.casefold() in folded
            record(f"required:{word}", found, "present" if found else "missing")
        for word in self.forbidden:
            found = word.casefold() in folded
            record(f"forbidden:{word}", not found, "present" if found else "absent")
        for pattern in self.required_regex:
            match = pattern.search(answer)
            record(f"required_regex:{pattern.pattern}", match is not None,
                   _match_detail(match) if match is not None else "no match")
        for pattern in self.forbidden_regex:
            match = pattern.search(answer)
            record(f"forbidden_regex:{pattern.pattern}", match is None,
                   _match_detail(match) if match is not None else "no match")
        if self.json_valid:
            try:
                json.loads(answer)
                record("json_valid", True, "valid JSON")
            except ValueError as exc:
                record("json_valid", False, f"not JSON: {str(exc)[:_MAX_DETAIL_CHARS]}")
        if self.citation_required:
            record("citation_required", *self._citation(request))
        return results

    @staticmethod
    def _citation(request: JudgeRequest) -> tuple[bool, str]:
        if not request.documents:
            match = _BARE_CITATION_RE.search(request.answer)
            if match is None:
                return False, "no citation marker (and no documents in the request to resolve one)"
            return True, f"marker {match.group(0)[:_MAX_DETAIL_CHARS]!r} (documents unknown)"
        from ..citations import find_citations

        cited = [c for c in find_citations(request.answer, request.documents) if c.method == "marker"]
        if not cited:
            return False, "cites no retrieved document"
        return True, "cites " + ", ".join(f"[{c.rank}] {c.doc_id}" for c in cited)

    @property
    def checks(self) -> tuple[str, ...]:
        """The names of the configured checks, in the order they run."""
        names = [n for n, bound in (("min_chars", self.min_chars), ("max_chars", self.max_chars)) if bound is not None]
        names += [f"required:{w}" for w in self.required] + [f"forbidden:{w}" for w in self.forbidden]
        names += [f"required_regex:{p.pattern}" for p in self.required_regex]
        names += [f"forbidden_regex:{p.pattern}" for p in self.forbidden_regex]
        names += [n for n, on in (("json_valid", self.json_valid), ("citation_required", self.citation_required)) if on]
        return tuple(names)

    def __repr__(self) -> str:
        return f"RuleJudge(name={self.name!r}, checks={list(self.checks)!r})"


def _keywords(label: str, words: Iterable[str]) -> list[str]:
    if isinstance(words, str):
        raise ConfigurationError(f"{label} must be a list of strings, not one string ({words!r})")
    out: list[str] = []
    for word in words:
        if not isinstance(word, str) or not word.strip():
            raise ConfigurationError(f"{label} keywords must be non-empty strings, got {word!r}")
        if word.casefold() in (w.casefold() for w in out):
            raise ConfigurationError(f"{label} keyword {word!r} is given twice")
        out.append(word)
    return out


def _patterns(label: str, patterns: Iterable[str | re.Pattern[str]]) -> list[re.Pattern[str]]:
    if isinstance(patterns, (str, re.Pattern)):
        raise ConfigurationError(f"{label} must be a list of patterns, not one pattern ({patterns!r})")
    out: list[re.Pattern[str]] = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            compiled = pattern
        elif isinstance(pattern, str) and pattern:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ConfigurationError(f"{label} pattern {pattern!r} does not compile: {exc}") from exc
        else:
            raise ConfigurationError(f"{label} patterns must be non-empty strings or re.Pattern, got {pattern!r}")
        if not isinstance(compiled.pattern, str):
            raise ConfigurationError(f"{label} pattern {compiled.pattern!r} must be a text (str) pattern")
        if any(p.pattern == compiled.pattern for p in out):
            raise ConfigurationError(f"{label} pattern {compiled.pattern!r} is given twice")
        out.append(compiled)
    return out


def _match_detail(match: re.Match[str]) -> str:
    return f"matched {match.group(0)[:_MAX_DETAIL_CHARS]!r} at {match.start()}"


def sample_key(request: JudgeRequest) -> str:
    """The stable key a :class:`TieredJudge` samples by.

    ``request.metadata["turn_id"]`` when present, else a hash of the question and the answer, so
    the same answer is always in or out of the sample, across processes and reruns.
    """
    turn_id = request.metadata.get("turn_id") if request.metadata else None
    if isinstance(turn_id, str) and turn_id:
        return turn_id
    digest = hashlib.sha256(f"{request.query}\x00{request.answer}".encode("utf-8", "replace"))
    return digest.hexdigest()[:32]


class TieredJudge(BaseRagJudge):
    """A cheap judge on every answer, a detailed one on a deterministic share of them.

    *cheap* (typically a :class:`RuleJudge`) always runs. *detailed* (typically an LLM judge) runs
    when the request falls in the sample: :func:`ragaudit.auditor.sampled` on :func:`sample_key`, so
    about *detailed_rate* of distinct answers, and always the same ones.

    The judgement's scores, reason and raw output are the detailed judge's when it ran and the
    cheap judge's otherwise. ``details`` always holds the cheap judge's details (so
    ``details["rules"]`` and ``details["passed"]`` of a RuleJudge are there on every answer), plus
    ``tiers`` (``["cheap"]`` or ``["cheap", "detailed"]``), ``cheap_judge``, ``detailed_judge`` and,
    when it ran, ``detailed`` (the detailed judge's details). ``error`` carries either judge's error,
    prefixed ``cheap:`` or ``detailed:``; ``usage`` and ``latency_s`` add up both.
    """

    def __init__(self, cheap: RagJudge, detailed: RagJudge, detailed_rate: float = 0.1, *,
                 name: str | None = None) -> None:
        for label, judge in (("cheap", cheap), ("detailed", detailed)):
            if not (callable(getattr(judge, "judge", None)) and callable(getattr(judge, "ajudge", None))):
                raise ConfigurationError(f"{label} must be a RagJudge (judge/ajudge), got {type(judge).__name__}")
        if isinstance(detailed_rate, bool) or not isinstance(detailed_rate, (int, float)) \
                or not 0.0 <= float(detailed_rate) <= 1.0:
            raise ConfigurationError(f"detailed_rate must be in [0, 1], got {detailed_rate!r}")
        self.cheap = cheap
        self.detailed = detailed
        self.detailed_rate = float(detailed_rate)
        self.name = name if name is not None else f"tiered({_name(cheap)},{_name(detailed)})"

    def in_sample(self, request: JudgeRequest) -> bool:
        """Whether the detailed judge runs for *request*."""
        return sampled(sample_key(request), self.detailed_rate)

    @property
    def blocking(self) -> bool:
        """True when either judge blocks a thread (then :meth:`judge` is the one to call)."""
        return bool(getattr(self.cheap, "blocking", False) or getattr(self.detailed, "blocking", False))

    def judge(self, request: JudgeRequest) -> Judgement:
        """Run the cheap judge, then the detailed one when sampled (each through its sync API)."""
        cheap = self.cheap.judge(request)
        detailed = self.detailed.judge(request) if self.in_sample(request) else None
        return self._merge(cheap, detailed)

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Run the cheap judge, then the detailed one when sampled (each through its async API)."""
        cheap = await self.cheap.ajudge(request)
        detailed = await self.detailed.ajudge(request) if self.in_sample(request) else None
        return self._merge(cheap, detailed)

    def _merge(self, cheap: Judgement, detailed: Judgement | None) -> Judgement:
        lead = detailed if detailed is not None else cheap
        details: dict[str, Any] = {
            **cheap.details,
            "tiers": ["cheap", "detailed"] if detailed is not None else ["cheap"],
            "cheap_judge": cheap.judge,
            "detailed_judge": _name(self.detailed),
        }
        errors = [f"cheap: {cheap.error}"] if cheap.error else []
        if detailed is not None:
            details["detailed"] = dict(detailed.details)
            if detailed.error:
                errors.append(f"detailed: {detailed.error}")
        parts = [cheap] if detailed is None else [cheap, detailed]
        latencies = [j.latency_s for j in parts if j.latency_s is not None]
        return Judgement(
            faithfulness=lead.faithfulness,
            context_relevance=lead.context_relevance,
            answer_relevance=lead.answer_relevance,
            reason=lead.reason,
            raw_output=lead.raw_output,
            judge=self.name,
            latency_s=sum(latencies) if latencies else None,
            usage=_add_usage(j.usage for j in parts),
            error="; ".join(errors) or None,
            details=details,
        )

    def config_key(self) -> str:
        """Both judges' configuration keys and the rate, as JSON."""
        return json.dumps(
            {"judge": "tiered", "cheap": _config_key(self.cheap), "detailed": _config_key(self.detailed),
             "detailed_rate": self.detailed_rate},
            sort_keys=True,
        )

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float, exact: bool = True
    ) -> CostEstimate:
        """The cheap judge's cost, plus the detailed judge's when *request* is in the sample."""
        cost = estimate_request(self.cheap, request, chars_per_token=chars_per_token, exact=exact)
        if self.in_sample(request):
            cost += estimate_request(self.detailed, request, chars_per_token=chars_per_token, exact=exact)
        return cost

    def close(self) -> None:
        """Close both judges."""
        for judge in (self.cheap, self.detailed):
            close = getattr(judge, "close", None)
            if callable(close):
                close()

    def __repr__(self) -> str:
        return f"TieredJudge(cheap={self.cheap!r}, detailed={self.detailed!r}, detailed_rate={self.detailed_rate})"


def _name(judge: Any) -> str:
    return str(getattr(judge, "name", type(judge).__name__))


def _config_key(judge: Any) -> str:
    config_key = getattr(judge, "config_key", None)
    return str(config_key()) if callable(config_key) else _name(judge)


def _add_usage(usages: Iterable[Mapping[str, int | None]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for usage in usages:
        for key, value in usage.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total
