"""The two implementations of :class:`~ragaudit.metrics.measures.Ranked` that every formula runs on.

:class:`BatchRanked` holds every query of a run at once (numpy arrays built from the kernel's hits;
each method returns one value per query). :class:`OneRanked` holds one ranked list (plain Python,
for one RAG turn: a few microseconds, no numpy call).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ._kernel import Hits, Judged, rank_in_group

__all__ = ["BatchRanked", "OneRanked"]

_INF = float("inf")


class BatchRanked:
    """Every evaluated query at once; values are float arrays indexed by query."""

    def __init__(self, hits: Hits, retrieved: np.ndarray, judged: Judged, level: int) -> None:
        self._n = len(retrieved)
        self._hits = hits
        self._judged = judged
        self.retrieved = retrieved.astype(np.float64)
        self.num_rel = judged.num_rel.astype(np.float64)
        relevant = hits.label >= level
        self._rq, self._rr = hits.q[relevant], hits.rank[relevant]
        self._seen = (rank_in_group(self._rq) + 1).astype(np.float64)
        self._found: dict[int | None, np.ndarray] = {}

    def _sum(self, q: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(q, weights=weights, minlength=self._n).astype(np.float64, copy=False)

    def found(self, k: int | None) -> np.ndarray:
        if k not in self._found:  # P, recall and F1 at one cut-off share it
            self._found[k] = self._sum(self._rq if k is None else self._rq[self._rr < k])
        return self._found[k]

    def first_rank(self) -> np.ndarray:
        first = np.full(self._n, _INF)
        is_first = self._seen == 1.0
        first[self._rq[is_first]] = self._rr[is_first]
        return first

    def relevant_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> np.ndarray:
        keep = slice(None) if k is None else self._rr < k
        return self._sum(self._rq[keep], term(self._seen[keep], self._rr[keep]))

    def labelled_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> np.ndarray:
        hits = self._hits
        keep = slice(None) if k is None else hits.rank < k
        return self._sum(hits.q[keep], term(hits.label[keep], hits.rank[keep]))

    def ideal_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> np.ndarray:
        judged = self._judged
        keep = slice(None) if k is None else judged.ideal_rank < k
        return self._sum(judged.ideal_q[keep], term(judged.ideal_label[keep], judged.ideal_rank[keep]))

    @staticmethod
    def safe_div(num: Any, den: Any) -> np.ndarray:
        num, den = np.broadcast_arrays(np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64))
        out = np.zeros(num.shape, dtype=np.float64)
        np.divide(num, den, out=out, where=den > 0)
        return out

    @staticmethod
    def where(cond: Any, yes: Any, no: Any) -> np.ndarray:
        return np.where(cond, yes, no).astype(np.float64, copy=False)

    @staticmethod
    def log2(x: Any) -> Any:
        return np.log2(x)


class OneRanked:
    """One ranked list: *labels* per retrieved position (0 for unjudged docs), best first."""

    __slots__ = ("_ideal", "_labels", "_level", "num_rel", "retrieved")

    def __init__(self, labels: list[int], ideal: list[int], num_rel: int, level: int) -> None:
        self._labels = labels
        self._ideal = ideal
        self._level = level
        self.num_rel = num_rel
        self.retrieved = len(labels)

    def found(self, k: int | None) -> int:
        level = self._level
        return sum(1 for label in self._labels[:k] if label >= level)

    def first_rank(self) -> float:
        level = self._level
        return next((float(i) for i, label in enumerate(self._labels) if label >= level), _INF)

    def relevant_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> float:
        total, seen, level = 0.0, 0, self._level
        for rank, label in enumerate(self._labels[:k]):
            if label >= level:
                seen += 1
                total += term(float(seen), rank)
        return total

    def labelled_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> float:
        return sum((term(label, rank) for rank, label in enumerate(self._labels[:k]) if label >= 1), 0.0)

    def ideal_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> float:
        return sum((term(label, rank) for rank, label in enumerate(self._ideal[:k])), 0.0)

    @staticmethod
    def safe_div(num: float, den: float) -> float:
        return num / den if den > 0 else 0.0

    @staticmethod
    def where(cond: bool, yes: float, no: float) -> float:
        return yes if cond else no

    @staticmethod
    def log2(x: float) -> float:
        return math.log2(x)
