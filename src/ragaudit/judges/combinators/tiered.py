"""A cheap judge on every answer and a detailed judge on a deterministic sample of them.

[`TieredJudge`][ragaudit.TieredJudge] is the "detailed judging on 10 %, cheap checks on the other 90 %" setup; give it
to the Auditor with ``sample_rate=1.0``::

    judge = TieredJudge(RuleJudge(max_chars=1200, forbidden=("guarantee",), citation_required=True),
                        ChatRagJudge("gpt-4o-mini"), detailed_rate=0.1)
    auditor = Auditor(judge, sample_rate=1.0)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..._sampling import sampled
from ...errors import ConfigurationError
from ...records import Judgement, JudgeRequest
from ..base import BaseRagJudge, RagJudge
from ..cost import CostEstimate, estimate_request

__all__ = ["DETAILED_SALT", "TieredJudge", "sample_key"]

DETAILED_SALT = "ragaudit.tiered.detailed"
"""The salt of the detailed-share decision, independent of the Auditor's ``sample_rate``."""


def sample_key(request: JudgeRequest) -> str:
    """The stable key a [`TieredJudge`][ragaudit.TieredJudge] samples by.

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

    *cheap* (typically a [`RuleJudge`][ragaudit.RuleJudge]) always runs. *detailed* (typically an LLM judge) runs
    when the request falls in the sample: [`ragaudit.auditor.sampled`][ragaudit.auditor.sampled] on `sample_key`, so
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
            if not isinstance(judge, RagJudge):
                raise ConfigurationError(f"{label} must be a RagJudge (derive it from BaseRagJudge), "
                                         f"got {type(judge).__name__}")
        if isinstance(detailed_rate, bool) or not isinstance(detailed_rate, (int, float)) \
                or not 0.0 <= float(detailed_rate) <= 1.0:
            raise ConfigurationError(f"detailed_rate must be in [0, 1], got {detailed_rate!r}")
        self.cheap = cheap
        self.detailed = detailed
        self.detailed_rate = float(detailed_rate)
        self.name = name if name is not None else f"tiered({cheap.name},{detailed.name})"

    def in_sample(self, request: JudgeRequest) -> bool:
        """Whether the detailed judge runs for *request*."""
        # Its own salt: the Auditor's sample_rate hashes the same turn id (see ragaudit._sampling).
        return sampled(sample_key(request), self.detailed_rate, salt=DETAILED_SALT)

    @property
    def blocking(self) -> bool:
        """True when either judge blocks a thread (then [`judge`][ragaudit.TieredJudge.judge] is the one to call)."""
        return self.cheap.blocking or self.detailed.blocking

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
            "detailed_judge": self.detailed.name,
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
            {"judge": "tiered", "cheap": self.cheap.config_key(), "detailed": self.detailed.config_key(),
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
            judge.close()

    def __repr__(self) -> str:
        return f"TieredJudge(cheap={self.cheap!r}, detailed={self.detailed!r}, detailed_rate={self.detailed_rate})"


def _add_usage(usages: Iterable[Mapping[str, int | None]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for usage in usages:
        for key, value in usage.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total
