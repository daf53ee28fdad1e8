"""Cheap deterministic checks on every answer.

[`RuleJudge`][ragaudit.RuleJudge] checks what needs no model: length bounds, required and forbidden keywords or
patterns, JSON validity, a citation. [`TieredJudge`][ragaudit.TieredJudge] runs such a cheap judge on every answer
and a detailed (LLM) judge on a deterministic share of them: the "detailed judging on 10 %, cheap
checks on the other 90 %" setup. Give it to the Auditor with ``sample_rate=1.0``::

    judge = TieredJudge(RuleJudge(max_chars=1200, forbidden=("guarantee",), citation_required=True),
                        ChatRagJudge("gpt-4o-mini"), detailed_rate=0.1)
    auditor = Auditor(judge, sample_rate=1.0)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError
from ..records import SCORE_NAMES, Judgement, JudgeRequest
from .base import BaseRagJudge

__all__ = ["RuleJudge"]

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
      [`find_citations`][ragaudit.citations.find_citations] reads them; overlap alone does not count). When the
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
        """Same as [`judge`][ragaudit.RuleJudge.judge]: the checks take microseconds, so they run on the loop itself."""
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
