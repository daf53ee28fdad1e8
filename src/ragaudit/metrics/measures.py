"""The measures: one declared entry each -- names, meaning and formula -- and name parsing.

Names follow ir_measures (``nDCG@10``, ``P@5``, ``RR@10``, ``AP``, ``Success@5``) and also accept
ragaudit's spellings (``precision@5``, ``mrr@10``, ``hit_rate@5``) and trec_eval's (``P_5``,
``ndcg_cut_10``, ``map_cut_100``, ``recip_rank``, ``success_5``). Case does not matter.

Each entry's formula is written once, against :class:`Ranked` -- what is known about the ranks of
the judged documents -- and serves both paths: :func:`~ragaudit.metrics.evaluate` hands it every
query at once (numpy arrays, one value per query) and
:func:`~ragaudit.metrics.score_ranking` one query (plain Python numbers, microseconds). A formula
therefore uses only the arithmetic operators and ``Ranked``'s methods. Adding a measure is one
:class:`MeasureEntry` in :data:`ENTRIES` (and its tests).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from ..errors import MetricError

__all__ = ["ENTRIES", "MEASURE_NAMES", "Measure", "MeasureEntry", "Ranked", "parse_measure"]

Value = Any
"""A float (one query) or a numpy float array (one value per query)."""


class Ranked(Protocol):
    """The ranks of a query's judged documents (or of many queries' at once), as a formula sees them.

    ``k`` is a cut-off (the top k ranks) or None (the whole ranking). Ranks are 0-based. A doc is
    *relevant* when its label is >= the relevance level; *labelled* when its label is >= 1.
    """

    @property
    def retrieved(self) -> Value:
        """Number of documents retrieved (after duplicates are dropped)."""

    @property
    def num_rel(self) -> Value:
        """Number of relevant documents in the qrels, retrieved or not."""

    def found(self, k: int | None) -> Value:
        """Number of relevant documents retrieved within the top k."""

    def first_rank(self) -> Value:
        """0-based rank of the first relevant document retrieved; infinity when there is none."""

    def relevant_sum(self, k: int | None, term: Callable[[Value, Value], Value]) -> Value:
        """Sum of ``term(seen, rank)`` over the relevant documents within the top k, where *seen*
        counts the relevant documents up to and including this one (1, 2, ...)."""

    def labelled_sum(self, k: int | None, term: Callable[[Value, Value], Value]) -> Value:
        """Sum of ``term(label, rank)`` over the labelled documents retrieved within the top k."""

    def ideal_sum(self, k: int | None, term: Callable[[Value, Value], Value]) -> Value:
        """``labelled_sum`` of the ideal ranking: every label >= 1 of the qrels, highest first."""

    def safe_div(self, num: Value, den: Value) -> Value:
        """``num / den``, and 0 where ``den`` is 0."""

    def where(self, cond: Value, yes: Value, no: Value) -> Value:
        """``yes`` where *cond* holds, else ``no``."""

    def log2(self, x: Value) -> Value:
        """Base-2 logarithm."""


Formula = Callable[[Ranked, "int | None"], Value]


@dataclass(frozen=True, slots=True)
class MeasureEntry:
    """One measure: canonical name, accepted aliases, what it means, and its formula."""

    name: str
    aliases: tuple[str, ...]
    meaning: str
    formula: Formula


def _precision(r: Ranked, k: int | None) -> Value:
    return r.safe_div(r.found(None), r.retrieved) if k is None else r.found(k) / k


def _recall(r: Ranked, k: int | None) -> Value:
    return r.safe_div(r.found(k), r.num_rel)


def _f1(r: Ranked, k: int | None) -> Value:
    p, rec = _precision(r, k), _recall(r, k)
    return r.safe_div(2.0 * p * rec, p + rec)


def _hit_rate(r: Ranked, k: int | None) -> Value:
    return r.where(r.found(k) > 0, 1.0, 0.0)


def _reciprocal_rank(r: Ranked, k: int | None) -> Value:
    first = r.first_rank()
    return r.where(first < (float("inf") if k is None else k), 1.0 / (first + 1.0), 0.0)


def _average_precision(r: Ranked, k: int | None) -> Value:
    return r.safe_div(r.relevant_sum(k, lambda seen, rank: seen / (rank + 1.0)), r.num_rel)


def _ndcg_with(gain: Callable[[Value], Value]) -> Formula:
    def ndcg(r: Ranked, k: int | None) -> Value:
        def term(label: Value, rank: Value) -> Value:
            return gain(label) / r.log2(rank + 2.0)

        return r.safe_div(r.labelled_sum(k, term), r.ideal_sum(k, term))

    return ndcg


ENTRIES: dict[str, MeasureEntry] = {
    entry.name: entry
    for entry in (
        MeasureEntry(
            "P",
            ("p", "precision", "prec"),
            "precision: relevant docs in the top K / K (K, not the number retrieved); without a cut-off, "
            "relevant docs retrieved / docs retrieved (trec_eval set_P)",
            _precision,
        ),
        MeasureEntry(
            "recall",
            ("r", "recall"),
            "relevant docs in the top K / all relevant docs in the qrels (set_recall without K)",
            _recall,
        ),
        MeasureEntry(
            "f1",
            ("f1", "f"),
            "harmonic mean of P@K and recall@K, 0 when both are 0 (set_F without K)",
            _f1,
        ),
        MeasureEntry(
            "hit_rate",
            ("hit_rate", "hitrate", "hit", "hits", "success"),
            "1 when a relevant doc is in the top K, else 0",
            _hit_rate,
        ),
        MeasureEntry(
            "mrr",
            ("mrr", "rr", "recip_rank", "reciprocal_rank"),
            "1/rank of the first relevant doc when it is within K, else 0 (recip_rank without K)",
            _reciprocal_rank,
        ),
        MeasureEntry(
            "map",
            ("map", "ap"),
            "average precision over the top K, divided by all relevant docs",
            _average_precision,
        ),
        MeasureEntry(
            "ndcg",
            ("ndcg",),
            "DCG with the raw label as gain and a log2(rank + 1) discount over the ideal DCG",
            _ndcg_with(lambda label: label * 1.0),
        ),
        MeasureEntry(
            "ndcg_burges",
            ("ndcg_burges",),
            "NDCG with the exponential gain 2^label - 1",
            _ndcg_with(lambda label: 2.0**label - 1.0),
        ),
    )
}

MEASURE_NAMES: tuple[str, ...] = tuple(ENTRIES)
"""Canonical metric names; each takes an optional cut-off ``@K`` (see :data:`ENTRIES` for each meaning)."""

_ALIASES: dict[str, str] = {alias: entry.name for entry in ENTRIES.values() for alias in entry.aliases}

_TREC_FORM = re.compile(r"^(?P<name>[a-z_0-9]+?)(?:_cut)?_(?P<k>-?\d+)$")


@dataclass(frozen=True, slots=True)
class Measure:
    """A parsed metric: canonical ``name`` (one of :data:`MEASURE_NAMES`) and an optional ``cutoff``.

    ``cutoff=None`` means the whole ranking. ``str(measure)`` gives the canonical spelling, e.g.
    ``"ndcg@10"`` or ``"map"``.
    """

    name: str
    cutoff: int | None = None

    def __post_init__(self) -> None:
        if self.name not in ENTRIES:
            raise MetricError(f"unknown metric {self.name!r}; valid metrics: {', '.join(MEASURE_NAMES)}")
        if self.cutoff is not None and (
            isinstance(self.cutoff, bool) or not isinstance(self.cutoff, int) or self.cutoff < 1
        ):
            raise MetricError(f"metric {self.name!r}: cut-off must be a positive integer, got {self.cutoff!r}")

    def __str__(self) -> str:
        return self.name if self.cutoff is None else f"{self.name}@{self.cutoff}"

    def value(self, ranked: Ranked) -> Value:
        """This measure's value(s) for *ranked*: its entry's formula at this cut-off."""
        return ENTRIES[self.name].formula(ranked, self.cutoff)


def _unknown(text: str) -> MetricError:
    valid = ", ".join(f"{name}[@K]" for name in MEASURE_NAMES)
    return MetricError(f"unknown metric {text!r}; valid metrics: {valid} (e.g. 'ndcg@10', 'recall@5', 'map')")


@lru_cache(maxsize=512)
def _parse(text: str) -> Measure:
    raw = text.strip()
    lowered = raw.lower()
    cutoff_text: str | None = None
    if "@" in lowered:
        base, _, cutoff_text = lowered.partition("@")
    elif lowered in _ALIASES:
        base = lowered
    else:
        match = _TREC_FORM.match(lowered)
        if match is None or match.group("name") not in _ALIASES:
            raise _unknown(text)
        base, cutoff_text = match.group("name"), match.group("k")
    canonical = _ALIASES.get(base.strip())
    if canonical is None:
        raise _unknown(text)
    if cutoff_text is None:
        return Measure(canonical)
    try:
        cutoff = int(cutoff_text.strip())
    except ValueError:
        raise MetricError(f"metric {text!r}: cut-off {cutoff_text!r} is not an integer") from None
    if cutoff < 1:
        raise MetricError(f"metric {text!r}: cut-off must be a positive integer, got {cutoff}")
    return Measure(canonical, cutoff)


def parse_measure(name: str | Measure) -> Measure:
    """Parse a metric name such as ``"ndcg@10"``, ``"P@5"``, ``"mrr@10"`` or ``"map"``.

    A :class:`Measure` is returned unchanged. Raises :class:`~ragaudit.errors.MetricError` for an
    unknown name (the message lists the valid ones) and for a cut-off that is not a positive integer.
    """
    if isinstance(name, Measure):
        return name
    if not isinstance(name, str):
        raise MetricError(f"a metric name must be a string such as 'ndcg@10', got {name!r}")
    return _parse(name)
