"""Ensembles of judges: a jury of different judges, and the consensus of one judge run several times.

Both are [`RagJudge`][ragaudit.RagJudge]s, so the [`Auditor`][ragaudit.Auditor] and ``evaluate_pipeline`` use them
like any other judge. Both are None-aware: a juror (or run) that failed is left out of every score
and counted in ``details``; one that gave no score for a dimension is left out of that dimension.
A score is None only when no juror gave one. ``usage`` is the sum over all jurors (or runs),
failed ones included, since they were paid for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ...errors import ConfigurationError
from ...records import SCORE_NAMES, Judgement, JudgeRequest
from ..base import BaseRagJudge, RagJudge
from ..cost import CostEstimate, estimate_request

__all__ = ["ConsensusJudge", "JuryJudge", "trimmed_mean"]

Aggregate = Literal["trimmed_mean", "median", "mean"]
ConfidenceLabel = Literal["high", "medium", "low"]

_MAX_REASON_CHARS = 4000
_MAX_ERROR_CHARS = 500
_CONFIDENCE_ORDER: tuple[ConfidenceLabel, ...] = ("low", "medium", "high")


def trimmed_mean(values: Sequence[float], trim: float) -> float:
    """The mean after cutting ``floor(trim * n)`` values from each end (as ``scipy.stats.trim_mean``)."""
    if not values:
        raise ConfigurationError("trimmed_mean needs at least one value")
    if not 0.0 <= trim < 0.5:
        raise ConfigurationError(f"trim must be in [0, 0.5), got {trim!r}")
    ordered = np.sort(np.asarray(values, dtype=float))
    cut = int(trim * len(ordered))
    return float(ordered[cut : len(ordered) - cut].mean())


def _check_judge(judge: object, what: str) -> None:
    if not isinstance(judge, RagJudge):
        raise ConfigurationError(f"{what} must be a RagJudge (derive it from BaseRagJudge), got {type(judge).__name__}")


def _failed(judge: RagJudge, exc: Exception) -> Judgement:
    message = f"{type(exc).__name__}: {exc}"
    return Judgement.failed(judge.name, message[:_MAX_ERROR_CHARS])


def _run_sync(judges: Sequence[RagJudge], request: JudgeRequest) -> list[Judgement]:
    out = []
    for judge in judges:
        try:
            out.append(judge.judge(request))
        except Exception as exc:  # a juror that raises (raise_on_error=True) counts as failed
            out.append(_failed(judge, exc))
    return out


async def _run_async(judges: Sequence[RagJudge], request: JudgeRequest) -> list[Judgement]:
    async def one(judge: RagJudge) -> Judgement:
        try:
            return await judge.ajudge(request)
        except Exception as exc:
            return _failed(judge, exc)

    return list(await asyncio.gather(*(one(judge) for judge in judges)))


def _sum_usage(judgements: Sequence[Judgement]) -> dict[str, int]:
    total: dict[str, int] = {}
    for judgement in judgements:
        for key, value in judgement.usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + int(value)
    return total


def _present(judgements: Sequence[Judgement], name: str) -> list[float]:
    """The *name* scores of the judgements that did not fail and gave one."""
    return [value for j in judgements if j.error is None and (value := getattr(j, name)) is not None]


def _juror_summary(judgement: Judgement) -> dict[str, Any]:
    return {
        "judge": judgement.judge,
        **judgement.scores(),
        "error": judgement.error,
        "latency_s": judgement.latency_s,
    }


def _all_failed_error(judgements: Sequence[Judgement], what: str) -> str:
    errors = "; ".join(f"{j.judge}: {j.error}" for j in judgements if j.error)
    message = f"all {len(judgements)} {what} failed: {errors}"
    return message[:_MAX_REASON_CHARS]


class JuryJudge(BaseRagJudge):
    """A jury of judges: each dimension's score aggregated over the jurors that gave one.

    ``aggregate`` is ``"trimmed_mean"`` (default: ``floor(trim * n)`` scores cut from each end
    before the mean, so with ``trim=0.2`` one outlier in five is ignored), ``"median"`` or
    ``"mean"``. [`ajudge`][ragaudit.JuryJudge.ajudge] asks all jurors concurrently; [`judge`][ragaudit.JuryJudge.judge]
    asks them in turn.

    ``details`` holds ``jurors`` (each juror's scores and error), ``failed`` (how many jurors
    failed) and, per dimension in ``per_dimension``: ``n`` (scores used), ``missing`` (jurors left
    out: failed or gave None), ``spread`` (max - min), ``stdev`` (population), ``agreement``
    (``spread <= agreement_threshold``; None with fewer than two scores). ``agreement`` at the top
    level is True when every dimension with two scores or more agrees. The judgement has ``error``
    set only when no juror gave any score.
    """

    def __init__(
        self,
        judges: Sequence[RagJudge],
        *,
        aggregate: Aggregate = "trimmed_mean",
        trim: float = 0.2,
        agreement_threshold: float = 0.2,
        name: str | None = None,
    ) -> None:
        if isinstance(judges, (str, bytes)) or not isinstance(judges, Sequence) or not judges:
            raise ConfigurationError("JuryJudge needs a non-empty sequence of judges")
        for index, judge in enumerate(judges):
            _check_judge(judge, f"juror {index}")
        if aggregate not in ("trimmed_mean", "median", "mean"):
            raise ConfigurationError(f"aggregate must be 'trimmed_mean', 'median' or 'mean', got {aggregate!r}")
        if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0.0 <= trim < 0.5:
            raise ConfigurationError(f"trim must be a number in [0, 0.5), got {trim!r}")
        if (isinstance(agreement_threshold, bool) or not isinstance(agreement_threshold, (int, float))
                or not 0.0 <= agreement_threshold <= 1.0):
            raise ConfigurationError(f"agreement_threshold must be in [0, 1], got {agreement_threshold!r}")
        self.judges: tuple[RagJudge, ...] = tuple(judges)
        self.aggregate: Aggregate = aggregate
        self.trim = float(trim)
        self.agreement_threshold = float(agreement_threshold)
        self.name = name if name is not None else "jury:" + "+".join(j.name for j in self.judges)

    def judge(self, request: JudgeRequest) -> Judgement:
        """Ask every juror in turn and aggregate."""
        started = time.perf_counter()
        return self._combine(_run_sync(self.judges, request), started)

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Ask every juror concurrently and aggregate."""
        started = time.perf_counter()
        return self._combine(await _run_async(self.judges, request), started)

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float = 4.0, exact: bool = True
    ) -> CostEstimate:
        """The sum of every juror's estimate for *request* (see `cost`)."""
        total = CostEstimate()
        for judge in self.judges:
            total += estimate_request(judge, request, chars_per_token=chars_per_token, exact=exact)
        return total

    def config_key(self) -> str:
        """The aggregation settings and every juror's configuration, as JSON."""
        return json.dumps(
            {
                "judge": "jury",
                "aggregate": self.aggregate,
                "trim": self.trim,
                "jurors": [j.config_key() for j in self.judges],
            },
            sort_keys=True,
        )

    def close(self) -> None:
        """Close every juror."""
        for judge in self.judges:
            judge.close()

    def _reduce(self, values: list[float]) -> float:
        if self.aggregate == "mean":
            return float(np.mean(values))
        if self.aggregate == "median":
            return float(np.median(values))
        return trimmed_mean(values, self.trim)

    def _combine(self, verdicts: list[Judgement], started: float) -> Judgement:
        scores: dict[str, float | None] = {}
        per_dimension: dict[str, dict[str, Any]] = {}
        for name in SCORE_NAMES:
            values = _present(verdicts, name)
            spread = float(max(values) - min(values)) if values else None
            stdev = float(np.std(values)) if values else None
            per_dimension[name] = {
                "n": len(values),
                "missing": len(verdicts) - len(values),
                "spread": spread,
                "stdev": stdev,
                "agreement": spread <= self.agreement_threshold if spread is not None and len(values) > 1 else None,
            }
            scores[name] = self._reduce(values) if values else None
        failed = [j for j in verdicts if j.error is not None]
        flags = [d["agreement"] for d in per_dimension.values() if d["agreement"] is not None]
        details = {
            "aggregate": self.aggregate,
            "trim": self.trim,
            "agreement_threshold": self.agreement_threshold,
            "jurors": [_juror_summary(j) for j in verdicts],
            "failed": len(failed),
            "per_dimension": per_dimension,
            "agreement": all(flags) if flags else None,
        }
        reasons = [f"{j.judge}: {j.reason}" for j in verdicts if j.error is None and j.reason]
        error = None
        if all(v is None for v in scores.values()):
            error = _all_failed_error(verdicts, "jurors") if len(failed) == len(verdicts) else "no juror gave a score"
        return Judgement(
            faithfulness=scores["faithfulness"],
            context_relevance=scores["context_relevance"],
            answer_relevance=scores["answer_relevance"],
            reason=" | ".join(reasons)[:_MAX_REASON_CHARS] or None,
            judge=self.name,
            latency_s=time.perf_counter() - started,
            usage=_sum_usage(verdicts),
            error=error,
            details=details,
        )


class ConsensusJudge(BaseRagJudge):
    """One judge run *n* times on the same request; the score is the mean, with its variance.

    Useful with a judge that samples (temperature > 0): the variance over runs says how far one
    run's score can be trusted. Per dimension, ``details["per_dimension"]`` holds the ``scores``,
    ``mean``, ``variance`` (population, on [0, 1]) and a ``confidence`` label: ``"high"`` when the
    variance is at most ``confidence_thresholds[0]`` (0.01, a standard deviation of 0.1),
    ``"medium"`` up to ``confidence_thresholds[1]`` (0.04, sd 0.2), else ``"low"`` (also ``"low"``
    when fewer than two runs gave a score). ``details["confidence"]`` is the lowest label over the
    dimensions. [`ajudge`][ragaudit.ConsensusJudge.ajudge] runs concurrently, [`judge`][ragaudit.ConsensusJudge.judge]
    in turn. A deterministic judge (temperature 0, or one behind a cache) gives *n* identical runs: variance 0 says
    nothing then.
    """

    def __init__(
        self,
        judge: RagJudge,
        n: int = 3,
        *,
        confidence_thresholds: tuple[float, float] = (0.01, 0.04),
        name: str | None = None,
    ) -> None:
        _check_judge(judge, "judge")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigurationError(f"n must be an int >= 2, got {n!r}")
        if (
            not isinstance(confidence_thresholds, tuple)
            or len(confidence_thresholds) != 2
            or not 0.0 <= confidence_thresholds[0] <= confidence_thresholds[1]
        ):
            raise ConfigurationError(
                f"confidence_thresholds must be (high, medium) with 0 <= high <= medium, got {confidence_thresholds!r}"
            )
        self.inner = judge
        self.n = n
        self.confidence_thresholds = (float(confidence_thresholds[0]), float(confidence_thresholds[1]))
        self.name = name if name is not None else f"consensus:{judge.name}x{n}"

    def judge(self, request: JudgeRequest) -> Judgement:
        """Run the judge *n* times in turn and combine."""
        started = time.perf_counter()
        return self._combine(_run_sync([self.inner] * self.n, request), started)

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Run the judge *n* times concurrently and combine."""
        started = time.perf_counter()
        return self._combine(await _run_async([self.inner] * self.n, request), started)

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float = 4.0, exact: bool = True
    ) -> CostEstimate:
        """*n* times the inner judge's estimate for *request* (see `cost`)."""
        one = estimate_request(self.inner, request, chars_per_token=chars_per_token, exact=exact)
        return CostEstimate(calls=one.calls * self.n, prompt_tokens=one.prompt_tokens * self.n,
                            completion_tokens=one.completion_tokens * self.n, assumptions=one.assumptions)

    def config_key(self) -> str:
        """The number of runs and the inner judge's configuration, as JSON."""
        return json.dumps({"judge": "consensus", "n": self.n, "inner": self.inner.config_key()}, sort_keys=True)

    def close(self) -> None:
        """Close the inner judge."""
        self.inner.close()

    def _label(self, variance: float | None, count: int) -> ConfidenceLabel:
        if variance is None or count < 2:
            return "low"
        if variance <= self.confidence_thresholds[0]:
            return "high"
        if variance <= self.confidence_thresholds[1]:
            return "medium"
        return "low"

    def _combine(self, runs: list[Judgement], started: float) -> Judgement:
        scores: dict[str, float | None] = {}
        per_dimension: dict[str, dict[str, Any]] = {}
        labels: list[ConfidenceLabel] = []
        for name in SCORE_NAMES:
            values = _present(runs, name)
            mean = float(np.mean(values)) if values else None
            variance = float(np.var(values)) if values else None
            label = self._label(variance, len(values))
            per_dimension[name] = {
                "scores": values,
                "mean": mean,
                "variance": variance,
                "stdev": float(np.sqrt(variance)) if variance is not None else None,
                "confidence": label if values else None,
            }
            if values:
                labels.append(label)
            scores[name] = mean
        failed = [r for r in runs if r.error is not None]
        details = {
            "runs": self.n,
            "failed": len(failed),
            "errors": [r.error for r in failed],
            "per_dimension": per_dimension,
            "confidence": min(labels, key=_CONFIDENCE_ORDER.index) if labels else None,
        }
        ok = [r for r in runs if r.error is None]
        error = None
        if all(v is None for v in scores.values()):
            error = _all_failed_error(runs, "runs") if not ok else "no run gave a score"
        return Judgement(
            faithfulness=scores["faithfulness"],
            context_relevance=scores["context_relevance"],
            answer_relevance=scores["answer_relevance"],
            reason=next((r.reason for r in ok if r.reason), None),
            raw_output=next((r.raw_output for r in ok if r.raw_output), None),
            judge=self.name,
            latency_s=time.perf_counter() - started,
            usage=_sum_usage(runs),
            error=error,
            details=details,
        )

