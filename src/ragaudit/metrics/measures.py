"""Metric names: parsing ``"ndcg@10"``, ``"recall@5"``, ``"map"`` ... into :class:`Measure` values.

Names follow ir_measures (``nDCG@10``, ``P@5``, ``RR@10``, ``AP``, ``Success@5``) and also accept
ragaudit's spellings (``precision@5``, ``mrr@10``, ``hit_rate@5``) and trec_eval's (``P_5``,
``ndcg_cut_10``, ``map_cut_100``, ``recip_rank``, ``success_5``). Case does not matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..errors import MetricError

__all__ = ["MEASURE_NAMES", "Measure", "parse_measure"]

MEASURE_NAMES: tuple[str, ...] = ("P", "recall", "f1", "hit_rate", "mrr", "map", "ndcg", "ndcg_burges")
"""Canonical metric names. Each takes an optional cut-off ``@K``:

- ``P@K`` precision: relevant docs in the top K / K (K, not the number retrieved). ``P`` without a
  cut-off divides by the number retrieved (trec_eval ``set_P``).
- ``recall@K``: relevant docs in the top K / all relevant docs in the qrels (``set_recall`` without K).
- ``f1@K``: harmonic mean of ``P@K`` and ``recall@K``, 0 when both are 0 (``set_F`` without K).
- ``hit_rate@K`` (``success@K``): 1 when a relevant doc is in the top K, else 0.
- ``mrr@K`` (``recip_rank``, ``RR``): 1/rank of the first relevant doc when it is within K, else 0.
- ``map@K`` (``AP``): average precision over the top K, divided by *all* relevant docs.
- ``ndcg@K``: DCG with the raw label as gain and a log2(rank + 1) discount over the ideal DCG.
- ``ndcg_burges@K``: the same with the exponential gain 2^label - 1.
"""

_ALIASES: dict[str, str] = {
    "p": "P",
    "precision": "P",
    "prec": "P",
    "r": "recall",
    "recall": "recall",
    "f1": "f1",
    "f": "f1",
    "hit_rate": "hit_rate",
    "hitrate": "hit_rate",
    "hit": "hit_rate",
    "hits": "hit_rate",
    "success": "hit_rate",
    "mrr": "mrr",
    "rr": "mrr",
    "recip_rank": "mrr",
    "reciprocal_rank": "mrr",
    "map": "map",
    "ap": "map",
    "ndcg": "ndcg",
    "ndcg_burges": "ndcg_burges",
}

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
        if self.name not in MEASURE_NAMES:
            raise MetricError(f"unknown metric {self.name!r}; valid metrics: {', '.join(MEASURE_NAMES)}")
        if self.cutoff is not None and (
            isinstance(self.cutoff, bool) or not isinstance(self.cutoff, int) or self.cutoff < 1
        ):
            raise MetricError(f"metric {self.name!r}: cut-off must be a positive integer, got {self.cutoff!r}")

    def __str__(self) -> str:
        return self.name if self.cutoff is None else f"{self.name}@{self.cutoff}"


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
