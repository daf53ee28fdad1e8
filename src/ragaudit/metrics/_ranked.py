"""The two implementations of `Ranked` that every formula runs on.

`BatchRanked` holds every query of a run at once (numpy arrays built from the kernel's hits;
each method returns one value per query). `OneRanked` holds one ranked list (plain Python,
for one RAG turn: a few microseconds, no numpy call). `restrict` applies trec_eval's -M and
-J to the kernel's hits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._kernel import Hits, Judged, rank_in_group

__all__ = ["NONPOOL", "BatchRanked", "OneRanked", "restrict"]

_INF = float("inf")

NONPOOL = -(1 << 62)
"""The label `OneRanked` gives a retrieved doc missing from the qrels (outside the pool)."""


def _relstring_char(label: int) -> str:
    """trec_eval's relstring character for a judged label (a negative one: in the pool, unjudged)."""
    if label > 9:
        return ">"
    return str(label) if label >= 0 else "."


@dataclass(frozen=True, slots=True)
class _Docs:
    """`RelevantDocs`: arrays (batch) or numbers (one doc)."""

    seen: Any
    rank: Any
    nonrel_above: Any
    unjudged_above: Any
    num_rel: Any
    num_nonrel: Any


def restrict(hits: Hits, retrieved: np.ndarray, max_docs: int | None, judged_only: bool) -> tuple[Hits, np.ndarray]:
    """trec_eval's -M (only the top *max_docs* of each ranking count) then -J (only judged docs --
    labels >= 0 -- count, ranked among themselves in their order; needs every label's hits)."""
    if max_docs is not None:
        keep = hits.rank < max_docs
        hits = Hits(hits.q[keep], hits.rank[keep], hits.label[keep])
        retrieved = np.minimum(retrieved, max_docs)
    if judged_only:
        keep = hits.label >= 0
        q = hits.q[keep]
        hits = Hits(q, rank_in_group(q), hits.label[keep])  # hits are sorted by (query, rank)
        retrieved = np.bincount(q, minlength=len(retrieved))
    return hits, retrieved


class BatchRanked:
    """Every evaluated query at once; values are float arrays indexed by query."""

    def __init__(self, hits: Hits, retrieved: np.ndarray, judged: Judged, level: int) -> None:
        self._n = len(retrieved)
        self._hits = hits
        self._judged = judged
        self._level = level
        self.retrieved = retrieved.astype(np.float64)
        self.num_rel = judged.num_rel.astype(np.float64)
        self.num_nonrel = judged.num_nonrel.astype(np.float64)
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

    def found_within(self, limit: Any) -> np.ndarray:
        limits = np.broadcast_to(np.asarray(limit, dtype=np.float64), (self._n,))
        return self._sum(self._rq[self._rr < limits[self._rq]])

    def first_rank(self) -> np.ndarray:
        first = np.full(self._n, _INF)
        is_first = self._seen == 1.0
        first[self._rq[is_first]] = self._rr[is_first]
        return first

    def relevant_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> np.ndarray:
        keep = slice(None) if k is None else self._rr < k
        return self._sum(self._rq[keep], term(self._seen[keep], self._rr[keep]))

    def relevant_max(self, min_seen: Any, term: Callable[[Any, Any], Any]) -> np.ndarray:
        values = np.asarray(term(self._seen, self._rr), dtype=np.float64)
        counts = self.found(None).astype(np.int64)
        starts = np.cumsum(counts) - counts
        low = np.broadcast_to(np.asarray(min_seen, dtype=np.float64), (self._n,)).astype(np.int64)
        out = np.zeros(self._n)
        some = np.flatnonzero((low >= 1) & (low <= counts))
        if len(some):
            # One reduceat over [start + low - 1, start + count) per query: the pairs interleaved,
            # a zero appended so every bound is a valid index; the odd results are the gaps.
            bounds = np.stack([starts[some] + low[some] - 1, starts[some] + counts[some]], axis=1).ravel()
            out[some] = np.maximum.reduceat(np.append(values, 0.0), bounds)[::2]
        return out

    def judged_sum(self, term: Callable[[Any], Any]) -> np.ndarray:
        hits, level = self._hits, self._level
        assert self._judged.every_label, "judged_sum needs the ranks of every judged doc"
        start = np.arange(len(hits.q)) - rank_in_group(hits.q)

        def above(mask: np.ndarray) -> np.ndarray:
            before = np.cumsum(mask) - mask  # how many of the query's earlier hits are *mask*
            return (before - before[start])[relevant]

        relevant = hits.label >= level
        q = hits.q[relevant]
        docs = _Docs(
            seen=self._seen,
            rank=hits.rank[relevant].astype(np.float64),
            nonrel_above=above((hits.label >= 0) & (hits.label < level)).astype(np.float64),
            unjudged_above=above(hits.label < 0).astype(np.float64),
            num_rel=self.num_rel[q],
            num_nonrel=self.num_nonrel[q],
        )
        return self._sum(q, np.asarray(term(docs), dtype=np.float64))

    def labelled_sum(self, k: int | None, term: Callable[[Any, Any], Any], min_label: int = 1) -> np.ndarray:
        hits = self._hits
        keep: Any = slice(None) if k is None else hits.rank < k
        if self._judged.every_label or min_label < 1:
            assert self._judged.every_label or min_label >= 1
            labelled = hits.label >= min_label
            keep = labelled if k is None else keep & labelled
        return self._sum(hits.q[keep], term(hits.label[keep], hits.rank[keep]))

    def ideal_sum(
        self, k: int | None, term: Callable[[Any, Any], Any], gains: Sequence[tuple[int, float]] | None = None
    ) -> np.ndarray:
        judged = self._judged
        if gains is None:
            keep = slice(None) if k is None else judged.ideal_rank < k
            return self._sum(judged.ideal_q[keep], term(judged.ideal_label[keep], judged.ideal_rank[keep]))
        q, value = judged.ideal_q, judged.ideal_label.astype(np.float64)
        for level, gain in gains:
            value[judged.ideal_label == level] = gain
        zero_gain = dict(gains).get(0, 0.0)
        if zero_gain > 0:
            zeros = np.repeat(np.arange(self._n), judged.num_zero)
            q, value = np.concatenate([q, zeros]), np.concatenate([value, np.full(len(zeros), zero_gain)])
        positive = value > 0
        q, value = q[positive], value[positive]
        order = np.lexsort((-value, q))
        q, value = q[order], value[order]
        rank = rank_in_group(q)
        keep = slice(None) if k is None else rank < k
        return self._sum(q[keep], term(value[keep], rank[keep]))

    def relstring(self, k: int) -> np.ndarray:
        hits = self._hits
        assert self._judged.every_label, "relstring needs the ranks of every judged doc"
        lengths = np.minimum(self.retrieved.astype(np.int64), k)
        cells = np.full((self._n, max(k, 1)), ord("-"), dtype=np.uint8)
        top = hits.rank < k
        label = hits.label[top]
        char = np.where(label > 9, ord(">"), np.where(label >= 0, ord("0") + np.minimum(label, 9), ord(".")))
        cells[hits.q[top], hits.rank[top]] = char
        out = np.empty(self._n, dtype=object)
        out[:] = [bytes(row[:n]).decode("ascii") for row, n in zip(cells, lengths.tolist())]
        return out

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
    def minimum(a: Any, b: Any) -> np.ndarray:
        return np.minimum(a, b)

    @staticmethod
    def floor(x: Any) -> np.ndarray:
        return np.floor(x)

    @staticmethod
    def log2(x: Any) -> Any:
        return np.log2(x)


class OneRanked:
    """One ranked list: *labels* per retrieved position (`NONPOOL` for a doc missing from the
    qrels), best first; *judged* holds every label of the query's qrels."""

    __slots__ = ("_ideal", "_labels", "_level", "_zeros", "num_nonrel", "num_rel", "retrieved")

    def __init__(self, labels: list[int], judged: Sequence[int], level: int) -> None:
        self._labels = labels
        self._level = level
        self._ideal = sorted((label for label in judged if label >= 1), reverse=True)
        self._zeros = sum(1 for label in judged if label == 0)
        self.num_rel = sum(1 for label in judged if label >= level)
        self.num_nonrel = sum(1 for label in judged if 0 <= label < level)
        self.retrieved = len(labels)

    def found(self, k: int | None) -> int:
        level = self._level
        return sum(1 for label in self._labels[:k] if label >= level)

    def found_within(self, limit: float) -> int:
        return self.found(int(limit))

    def first_rank(self) -> float:
        level = self._level
        return next((float(i) for i, label in enumerate(self._labels) if label >= level), _INF)

    def _relevant(self) -> list[tuple[float, int]]:
        level = self._level
        ranks = [rank for rank, label in enumerate(self._labels) if label >= level]
        return [(float(seen), rank) for seen, rank in enumerate(ranks, 1)]

    def relevant_sum(self, k: int | None, term: Callable[[Any, Any], Any]) -> float:
        return sum((term(seen, rank) for seen, rank in self._relevant() if k is None or rank < k), 0.0)

    def relevant_max(self, min_seen: float, term: Callable[[Any, Any], Any]) -> float:
        return max((term(seen, rank) for seen, rank in self._relevant() if seen >= min_seen), default=0.0)

    def judged_sum(self, term: Callable[[Any], Any]) -> float:
        total, seen, nonrel, unjudged, level = 0.0, 0, 0, 0, self._level
        for rank, label in enumerate(self._labels):
            if label == NONPOOL:
                continue
            if label < 0:
                unjudged += 1
            elif label < level:
                nonrel += 1
            else:
                seen += 1
                total += term(_Docs(float(seen), float(rank), float(nonrel), float(unjudged),
                                    float(self.num_rel), float(self.num_nonrel)))
        return total

    def labelled_sum(self, k: int | None, term: Callable[[Any, Any], Any], min_label: int = 1) -> float:
        return sum(
            (term(label, rank) for rank, label in enumerate(self._labels[:k]) if label >= min_label), 0.0
        )

    def ideal_sum(
        self, k: int | None, term: Callable[[Any, Any], Any], gains: Sequence[tuple[int, float]] | None = None
    ) -> float:
        if gains is None:
            return sum((term(label, rank) for rank, label in enumerate(self._ideal[:k])), 0.0)
        table = dict(gains)
        values = [table.get(label, float(label)) for label in self._ideal]
        values += [table.get(0, 0.0)] * self._zeros
        ordered = sorted((value for value in values if value > 0), reverse=True)
        return sum((term(value, rank) for rank, value in enumerate(ordered[:k])), 0.0)

    def relstring(self, k: int) -> str:
        return "".join("-" if label == NONPOOL else _relstring_char(label) for label in self._labels[:k])

    @staticmethod
    def safe_div(num: float, den: float) -> float:
        return num / den if den > 0 else 0.0

    @staticmethod
    def where(cond: bool, yes: float, no: float) -> float:
        return yes if cond else no

    @staticmethod
    def minimum(a: float, b: float) -> float:
        return min(a, b)

    @staticmethod
    def floor(x: float) -> float:
        return float(math.floor(x))

    @staticmethod
    def log2(x: float) -> float:
        return math.log2(x)
