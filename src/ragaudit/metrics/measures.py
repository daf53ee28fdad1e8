"""The measures: one declared entry each -- names, meaning, formula, how it averages -- and name parsing.

Names follow ir_measures (``nDCG@10``, ``P@5``, ``RR@10``, ``AP``, ``Success@5``, ``Rprec``,
``Bpref``, ``infAP``, ``IPrec@0.1``) and also accept ragaudit's spellings (``precision@5``,
``mrr@10``, ``hit_rate@5``) and trec_eval's (``P_5``, ``P.5``, ``ndcg_cut_10``, ``map_cut.100``,
``recip_rank``, ``success_5``, ``set_P``, ``iprec_at_recall_0.10``, ``relstring.20``). Case does not
matter. Parameters are written as trec_eval writes them after a ``.``: NDCG gains
``ndcg.1=3,2=9,4=4.5`` (also ``ndcg@10.1=3,2=9``) and recall points ``11pt_avg.0.25,0.5,0.75``.
One name is one measure: trec_eval's lists of cut-offs (``P.5,10``) are refused, name each one.

Each entry's formula is written once, against `Ranked` -- what is known about the ranks of
the judged documents -- and serves both paths: [`evaluate`][ragaudit.metrics.evaluate] hands it every
query at once (numpy arrays, one value per query) and
[`score_ranking`][ragaudit.metrics.score_ranking] one query (plain Python numbers, microseconds). A formula
therefore uses only the arithmetic operators and ``Ranked``'s methods. Adding a measure is one
`MeasureEntry` in `ENTRIES` (and its tests).

How a measure averages over queries is part of its entry (``aggregate``): the arithmetic mean
(most), the sum (``num_ret``, ``num_rel``, ``num_rel_ret``, as trec_eval's summary line), the
geometric mean (``gm_map``: ``exp(mean(log(max(AP, 0.00001))))``), or not at all: ``relstring`` is
a string per query (trec_eval prints it per query only), so it is only available per query.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

import numpy as np

from ..errors import MetricError

__all__ = ["ENTRIES", "MEASURE_NAMES", "Measure", "MeasureEntry", "Ranked", "RelevantDocs", "parse_measure"]

Value = Any
"""A float (one query) or a numpy float array (one value per query)."""

MIN_GEO_MEAN = 0.00001
"""trec_eval's floor for a query's value before the logarithm of a geometric mean."""
INFAP_EPSILON = 0.00001
"""trec_eval's smoothing constant in infAP."""
ELEVEN_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class RelevantDocs(Protocol):
    """The relevant retrieved documents (of one query or of all), as `Ranked.judged_sum` hands them
    to a term. Every attribute holds one value per document; the query-level ones are repeated."""

    seen: Value  # relevant docs up to and including this one (1, 2, ...)
    rank: Value  # 0-based rank
    nonrel_above: Value  # judged non-relevant docs (0 <= label < level) ranked above it
    unjudged_above: Value  # docs with a negative label (in the pool, not judged) ranked above it
    num_rel: Value  # the query's relevant docs in the qrels
    num_nonrel: Value  # the query's judged non-relevant docs in the qrels


class Ranked(Protocol):
    """The ranks of a query's judged documents (or of many queries' at once), as a formula sees them.

    ``k`` is a cut-off (the top k ranks) or None (the whole ranking). Ranks are 0-based. A doc is
    *relevant* when its label is >= the relevance level; *labelled* when its label is >= 1;
    *judged non-relevant* when 0 <= label < level; a negative label means "in the pool, not judged"
    (trec_eval's reading, used by bpref and infAP); a doc missing from the qrels is outside the pool.
    """

    @property
    def retrieved(self) -> Value:
        """Number of documents retrieved (after duplicates are dropped, -M and -J applied)."""

    @property
    def num_rel(self) -> Value:
        """Number of relevant documents in the qrels, retrieved or not."""

    @property
    def num_nonrel(self) -> Value:
        """Number of judged non-relevant documents (0 <= label < level) in the qrels."""

    def found(self, k: int | None) -> Value:
        """Number of relevant documents retrieved within the top k."""

    def found_within(self, limit: Value) -> Value:
        """Number of relevant documents retrieved within the top *limit* ranks (one limit per query)."""

    def first_rank(self) -> Value:
        """0-based rank of the first relevant document retrieved; infinity when there is none."""

    def relevant_sum(self, k: int | None, term: Callable[[Value, Value], Value]) -> Value:
        """Sum of ``term(seen, rank)`` over the relevant documents within the top k, where *seen*
        counts the relevant documents up to and including this one (1, 2, ...)."""

    def relevant_max(self, min_seen: Value, term: Callable[[Value, Value], Value]) -> Value:
        """Maximum of ``term(seen, rank)`` over the relevant documents whose *seen* is >= *min_seen*
        (one bound per query); 0 where there is none."""

    def judged_sum(self, term: Callable[[RelevantDocs], Value]) -> Value:
        """Sum of ``term(docs)`` over the relevant retrieved documents (see `RelevantDocs`)."""

    def labelled_sum(self, k: int | None, term: Callable[[Value, Value], Value], min_label: int = 1) -> Value:
        """Sum of ``term(label, rank)`` over the retrieved docs labelled >= *min_label* within the top k."""

    def ideal_sum(
        self, k: int | None, term: Callable[[Value, Value], Value], gains: Sequence[tuple[int, float]] | None = None
    ) -> Value:
        """The ideal ranking's ``term`` sum. Without *gains*: ``term(label, rank)`` over every label
        >= 1 of the qrels, highest first. With *gains* (level -> gain; other levels gain their own
        value): ``term(gain, rank)`` over every judged doc whose gain is > 0, highest gain first."""

    def relstring(self, k: int) -> Value:
        """trec_eval's relstring of the top k: a character per retrieved doc (one string per query)."""

    def safe_div(self, num: Value, den: Value) -> Value:
        """``num / den``, and 0 where ``den`` is 0."""

    def where(self, cond: Value, yes: Value, no: Value) -> Value:
        """``yes`` where *cond* holds, else ``no``."""

    def minimum(self, a: Value, b: Value) -> Value:
        """The smaller of *a* and *b*."""

    def floor(self, x: Value) -> Value:
        """The largest integer <= *x* (as a float)."""

    def log2(self, x: Value) -> Value:
        """Base-2 logarithm."""


Formula = Callable[[Ranked, "Measure"], Value]
Aggregate = Literal["mean", "sum", "geometric", "none"]


@dataclass(frozen=True, slots=True)
class MeasureEntry:
    """One measure: canonical name, accepted aliases, what it means, its formula and how it averages.

    ``cutoff``: whether a cut-off ``@K`` is optional, required or refused; ``cutoff_type`` is int
    (a rank K >= 1) or float (a recall level in [0, 1]). ``params``: what a ``.`` suffix carries
    (NDCG gains, recall points). ``kind``: ``"float"``, ``"count"`` (an integer, printed as one) or
    ``"string"``. ``every_label``: the formula needs the ranks of judged docs with labels <= 0 too.
    """

    name: str
    aliases: tuple[str, ...]
    meaning: str
    formula: Formula
    cutoff: Literal["optional", "required", "none"] = "optional"
    cutoff_type: type = int
    aggregate: Aggregate = "mean"
    kind: Literal["float", "count", "string"] = "float"
    params: Literal["none", "gains", "points"] = "none"
    every_label: bool = False


def _precision(r: Ranked, m: Measure) -> Value:
    k = m.rank_cutoff
    return r.safe_div(r.found(None), r.retrieved) if k is None else r.found(k) / k


def _recall(r: Ranked, m: Measure) -> Value:
    return r.safe_div(r.found(m.rank_cutoff), r.num_rel)


def _f1(r: Ranked, m: Measure) -> Value:
    p, rec = _precision(r, m), _recall(r, m)
    return r.safe_div(2.0 * p * rec, p + rec)


def _hit_rate(r: Ranked, m: Measure) -> Value:
    return r.where(r.found(m.rank_cutoff) > 0, 1.0, 0.0)


def _reciprocal_rank(r: Ranked, m: Measure) -> Value:
    first, k = r.first_rank(), m.rank_cutoff
    return r.where(first < (float("inf") if k is None else k), 1.0 / (first + 1.0), 0.0)


def _average_precision(r: Ranked, m: Measure) -> Value:
    return r.safe_div(r.relevant_sum(m.rank_cutoff, lambda seen, rank: seen / (rank + 1.0)), r.num_rel)


def _r_precision(r: Ranked, m: Measure) -> Value:
    return r.safe_div(r.found_within(r.num_rel), r.num_rel)


def _set_map(r: Ranked, m: Measure) -> Value:
    found = r.found(None)
    return r.safe_div(found * found, r.retrieved * r.num_rel)


def _bpref(r: Ranked, m: Measure) -> Value:
    def term(d: RelevantDocs) -> Value:
        # 1 - (non-relevant above, at most R) / (judged non-relevant, at most R); 1 when none is above.
        lost = r.safe_div(r.minimum(d.nonrel_above, d.num_rel), r.minimum(d.num_nonrel, d.num_rel))
        return r.where(d.nonrel_above > 0, 1.0 - lost, 1.0)

    return r.safe_div(r.judged_sum(term), r.num_rel)


def _inferred_ap(r: Ranked, m: Measure) -> Value:
    def term(d: RelevantDocs) -> Value:
        j, rel_above = d.rank * 1.0, d.seen - 1.0
        above = rel_above + d.nonrel_above + d.unjudged_above
        # trec_eval's expression, in its order of operations (so the doubles agree to the last bit).
        value = 1.0 / (j + 1.0) + (j / (j + 1.0)) * r.safe_div(above, j) * (
            (rel_above + INFAP_EPSILON) / (rel_above + d.nonrel_above + 2 * INFAP_EPSILON)
        )
        return r.where(j == 0.0, 1.0, value)

    return r.safe_div(r.judged_sum(term), r.num_rel)


def _interpolated_precision(r: Ranked, point: float) -> Value:
    # trec_eval 10 turns the recall point into a number of relevant docs with lround (v9 added 0.9
    # and truncated); the interpolated precision there is the best precision at or after it.
    x = point * r.num_rel
    whole = r.floor(x)
    cut = whole + r.where(x - whole >= 0.5, 1.0, 0.0)
    return r.relevant_max(r.where(cut < 1.0, 1.0, cut), lambda seen, rank: seen / (rank + 1.0))


def _iprec_at_recall(r: Ranked, m: Measure) -> Value:
    assert m.cutoff is not None
    return _interpolated_precision(r, float(m.cutoff))


def _eleven_point_average(r: Ranked, m: Measure) -> Value:
    points = m.points or ELEVEN_POINTS
    total: Value = 0.0
    for point in reversed(points):  # trec_eval adds them from the last point down
        total = total + _interpolated_precision(r, point)
    return total / len(points)


def _ndcg_with(gain: Callable[[Value], Value] | None) -> Formula:
    def ndcg(r: Ranked, m: Measure) -> Value:
        k, table = m.rank_cutoff, m.gains
        if table is None:
            assert gain is not None

            def term(label: Value, rank: Value) -> Value:
                return gain(label) / r.log2(rank + 2.0)

            return r.safe_div(r.labelled_sum(k, term), r.ideal_sum(k, term))

        def custom(label: Value) -> Value:
            out = label * 1.0
            for level, value in table:
                out = r.where(label == level, value, out)
            return out

        def discounted(label: Value, rank: Value) -> Value:
            return custom(label) / r.log2(rank + 2.0)

        def ideal_term(value: Value, rank: Value) -> Value:
            return value / r.log2(rank + 2.0)

        min_label = 0 if any(level == 0 for level, _ in table) else 1
        return r.safe_div(r.labelled_sum(k, discounted, min_label), r.ideal_sum(k, ideal_term, table))

    return ndcg


def _relstring(r: Ranked, m: Measure) -> Value:
    return r.relstring(10 if m.cutoff is None else int(m.cutoff))


def _count_entry(name: str, meaning: str, what: Callable[[Ranked], Value]) -> MeasureEntry:
    """A count per query (a float holding an integer), summed over queries as trec_eval sums it."""
    return MeasureEntry(name, (name,), f"{meaning}; summed over queries", lambda r, m: what(r) * 1.0,
                        cutoff="none", aggregate="sum", kind="count")


ENTRIES: dict[str, MeasureEntry] = {
    entry.name: entry
    for entry in (
        MeasureEntry(
            "P",
            ("p", "precision", "prec", "set_p"),
            "precision: relevant docs in the top K / K (K, not the number retrieved); without a cut-off, "
            "relevant docs retrieved / docs retrieved (trec_eval set_P)",
            _precision,
        ),
        MeasureEntry(
            "recall",
            ("r", "recall", "set_recall"),
            "relevant docs in the top K / all relevant docs in the qrels (set_recall without K)",
            _recall,
        ),
        MeasureEntry(
            "f1",
            ("f1", "f", "set_f"),
            "harmonic mean of P@K and recall@K, 0 when both are 0 (set_F without K)",
            _f1,
        ),
        MeasureEntry(
            "hit_rate",
            ("hit_rate", "hitrate", "hit", "hits", "success"),
            "1 when a relevant doc is in the top K, else 0 (trec_eval success)",
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
            ("map", "ap", "map_cut"),
            "average precision over the top K, divided by all relevant docs (map, map_cut)",
            _average_precision,
        ),
        MeasureEntry(
            "gm_map",
            ("gm_map", "gm_ap"),
            "average precision per query, averaged geometrically: exp(mean(log(max(AP, 0.00001))))",
            _average_precision,
            aggregate="geometric",
        ),
        MeasureEntry(
            "Rprec",
            ("rprec", "r_prec", "r-prec"),
            "precision at rank R, R = the query's relevant docs in the qrels",
            _r_precision,
            cutoff="none",
        ),
        MeasureEntry(
            "bpref",
            ("bpref",),
            "binary preference: per relevant doc retrieved, 1 - (judged non-relevant docs above it, at most "
            "R) / min(judged non-relevant, R), summed, over R; unjudged docs are skipped",
            _bpref,
            cutoff="none",
            every_label=True,
        ),
        MeasureEntry(
            "infAP",
            ("infap",),
            "inferred AP (Yilmaz & Aslam): docs with a negative label are in the pool but not judged",
            _inferred_ap,
            cutoff="none",
            every_label=True,
        ),
        MeasureEntry(
            "iprec_at_recall",
            ("iprec_at_recall", "iprec"),
            "interpolated precision at the recall level L (0 <= L <= 1, required): the best precision at "
            "or after the lround(L * R)-th relevant doc",
            _iprec_at_recall,
            cutoff="required",
            cutoff_type=float,
        ),
        MeasureEntry(
            "11pt_avg",
            ("11pt_avg", "11-pt_avg"),
            "interpolated precision averaged over the recall points 0, 0.1, ..., 1 (or the points given: "
            "11pt_avg.0.25,0.5,0.75)",
            _eleven_point_average,
            cutoff="none",
            params="points",
        ),
        MeasureEntry(
            "set_map",
            ("set_map",),
            "unranked AP: relevant retrieved^2 / (retrieved * relevant)",
            _set_map,
            cutoff="none",
        ),
        _count_entry("num_ret", "documents retrieved (after -M and -J)", lambda r: r.retrieved),
        _count_entry("num_rel", "relevant documents in the qrels", lambda r: r.num_rel),
        _count_entry("num_rel_ret", "relevant documents retrieved", lambda r: r.found(None)),
        MeasureEntry(
            "relstring",
            ("relstring",),
            "the labels of the top K docs (default 10) as a string: the digit of a label 0-9, '>' above 9, "
            "'-' not in the qrels, '.' a negative label; per query only",
            _relstring,
            aggregate="none",
            kind="string",
            every_label=True,
        ),
        MeasureEntry(
            "ndcg",
            ("ndcg", "ndcg_cut"),
            "DCG with the raw label as gain (or the gains given: ndcg.1=3,2=9) and a log2(rank + 1) "
            "discount over the ideal DCG",
            _ndcg_with(lambda label: label * 1.0),
            params="gains",
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
"""Canonical metric names (see `ENTRIES` for each meaning and which take a cut-off ``@K``)."""

_ALIASES: dict[str, str] = {alias: entry.name for entry in ENTRIES.values() for alias in entry.aliases}

_TREC_FORM = re.compile(r"^(?P<name>[a-z_0-9-]+?)(?:_cut)?_(?P<k>-?\d+(?:\.\d*)?|\.\d+)$")

Gains = tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class Measure:
    """A parsed metric: canonical ``name`` (one of `MEASURE_NAMES`), a ``cutoff`` and parameters.

    ``cutoff=None`` means the whole ranking; for ``iprec_at_recall`` it is the recall level (a float
    in [0, 1]). ``gains`` (NDCG only): ``((level, gain), ...)`` or ``{level: gain}``, trec_eval's
    ``ndcg.1=3,2=9``; levels
    not listed gain their own value. ``points`` (``11pt_avg`` only): the recall points averaged.
    ``str(measure)`` gives the canonical spelling, e.g. ``"ndcg@10"``, ``"map"`` or ``"ndcg.1=3,2=9"``.
    """

    name: str
    cutoff: int | float | None = None
    gains: Gains | None = None
    points: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        entry = ENTRIES.get(self.name)
        if entry is None:
            raise MetricError(f"unknown metric {self.name!r}; valid metrics: {', '.join(MEASURE_NAMES)}")
        object.__setattr__(self, "cutoff", _check_cutoff(entry, self.cutoff))
        if self.gains is not None:
            if entry.params != "gains":
                raise MetricError(f"metric {self.name!r} takes no gains (only ndcg does)")
            object.__setattr__(self, "gains", _check_gains(self.name, self.gains))
        if self.points is not None:
            if entry.params != "points":
                raise MetricError(f"metric {self.name!r} takes no recall points (only 11pt_avg does)")
            object.__setattr__(self, "points", _check_points(self.name, self.points))

    def __str__(self) -> str:
        text = self.name
        if self.cutoff is not None:
            text += f"@{_short(self.cutoff)}" if isinstance(self.cutoff, float) else f"@{self.cutoff}"
        if self.gains is not None:
            text += "." + ",".join(f"{level}={_short(gain)}" for level, gain in self.gains)
        if self.points is not None:
            text += "." + ",".join(_short(point) for point in self.points)
        return text

    @property
    def entry(self) -> MeasureEntry:
        """This measure's declared entry."""
        return ENTRIES[self.name]

    @property
    def rank_cutoff(self) -> int | None:
        """The cut-off as a number of ranks (None: the whole ranking)."""
        return self.cutoff if isinstance(self.cutoff, int) else None

    def value(self, ranked: Ranked) -> Value:
        """This measure's value(s) for *ranked*: its entry's formula with these parameters."""
        return ENTRIES[self.name].formula(ranked, self)

    def aggregate(self, values: Sequence[float] | Any) -> float:
        """The summary of per-query *values* as trec_eval's ``all`` line gives it (mean, sum or
        geometric mean; 0.0 for no query). Raises [`MetricError`][ragaudit.MetricError] for a
        per-query-only measure (``relstring``)."""
        how = ENTRIES[self.name].aggregate
        if how == "none":
            raise MetricError(f"{self} is a string per query, with no summary; ask for it with per_query=True")
        arr = np.asarray(values, dtype=np.float64)
        if not len(arr):
            return 0.0
        if how == "sum":
            return float(arr.sum())
        if how == "geometric":
            return float(np.exp(np.log(np.maximum(arr, MIN_GEO_MEAN)).mean()))
        return float(arr.mean())


def _short(x: float) -> str:
    """The shortest spelling of *x* that reads back as *x* ("3", "4.5", "0.1")."""
    text = f"{x:g}"
    return text if float(text) == x else repr(x)


def _check_cutoff(entry: MeasureEntry, cutoff: object) -> int | float | None:
    if cutoff is None:
        if entry.cutoff == "required":
            raise MetricError(f"metric {entry.name!r} needs a recall level, e.g. '{entry.name}@0.1'")
        return None
    if entry.cutoff == "none":
        raise MetricError(f"metric {entry.name!r} takes no cut-off, got {cutoff!r}")
    if entry.cutoff_type is float:
        if isinstance(cutoff, bool) or not isinstance(cutoff, (int, float)) or not 0.0 <= cutoff <= 1.0:
            raise MetricError(f"metric {entry.name!r}: the recall level must be a number in [0, 1], got {cutoff!r}")
        return float(cutoff)
    if isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 1:
        raise MetricError(f"metric {entry.name!r}: cut-off must be a positive integer, got {cutoff!r}")
    return cutoff


def _check_gains(name: str, gains: Any) -> Gains:
    if isinstance(gains, Mapping):
        gains = tuple(gains.items())
    try:
        pairs = tuple((level, float(gain)) for level, gain in gains)
    except (TypeError, ValueError):
        raise MetricError(f"metric {name!r}: gains must be (level, gain) pairs, got {gains!r}") from None
    levels = [level for level, _ in pairs]
    for level, gain in pairs:
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            # trec_eval would give a negative level's gain to the docs outside the pool; refused.
            raise MetricError(f"metric {name!r}: a gain's level must be an integer >= 0, got {level!r}")
        if not math.isfinite(gain):
            raise MetricError(f"metric {name!r}: gain for level {level} must be finite, got {gain!r}")
    if len(set(levels)) != len(levels) or not pairs:
        raise MetricError(f"metric {name!r}: give each level's gain once, got {gains!r}")
    return pairs


def _check_points(name: str, points: Any) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in points)
    except (TypeError, ValueError):
        raise MetricError(f"metric {name!r}: recall points must be numbers, got {points!r}") from None
    if not values or not all(0.0 <= p <= 1.0 for p in values):
        raise MetricError(f"metric {name!r}: recall points must be numbers in [0, 1], got {points!r}")
    return values


def _unknown(text: str) -> MetricError:
    valid = ", ".join(MEASURE_NAMES)
    return MetricError(
        f"unknown metric {text!r}; valid metrics: {valid}, most with a cut-off @K "
        "(e.g. 'ndcg@10', 'recall@5', 'map', 'iprec_at_recall@0.1')"
    )


def _number(text: str, entry: MeasureEntry, whole: str) -> int | float:
    cleaned = text.strip()
    try:
        if entry.cutoff_type is float:
            return float(cleaned)
        return int(cleaned)
    except ValueError:
        if "," in cleaned:
            raise MetricError(
                f"metric {whole!r}: one cut-off per metric; name each one (e.g. 'P@5', 'P@10')"
            ) from None
        raise MetricError(f"metric {whole!r}: cut-off {text!r} is not an integer") from None


def _with_params(entry: MeasureEntry, cutoff: int | float | None, params: str | None, whole: str) -> Measure:
    if params is None:
        return Measure(entry.name, cutoff)
    if entry.params == "gains" and "=" in params:
        gains: list[tuple[int, float]] = []
        for part in params.split(","):
            level, eq, gain = part.partition("=")
            try:
                gains.append((int(level), float(gain)))
            except ValueError:
                raise MetricError(f"metric {whole!r}: gains are written 'level=gain,...', got {part!r}") from None
            if not eq:
                raise MetricError(f"metric {whole!r}: gains are written 'level=gain,...', got {part!r}")
        return Measure(entry.name, cutoff, gains=tuple(gains))
    if "=" in params:
        raise MetricError(f"metric {whole!r}: {entry.name} takes no parameters (gains are for ndcg)")
    if entry.params == "points":
        try:
            points = tuple(float(p) for p in params.split(","))
        except ValueError:
            raise MetricError(f"metric {whole!r}: recall points must be numbers, got {params!r}") from None
        return Measure(entry.name, cutoff, points=points)
    if cutoff is None and entry.cutoff != "none":
        return Measure(entry.name, _number(params, entry, whole))  # trec_eval's P.5, relstring.20
    raise MetricError(f"metric {whole!r}: {entry.name} takes no parameters")


@lru_cache(maxsize=512)
def _parse(text: str) -> Measure:
    lowered = text.strip().lower()
    if lowered in _ALIASES:
        return Measure(_ALIASES[lowered])
    match = _TREC_FORM.match(lowered)
    if match is not None and match.group("name") in _ALIASES:
        entry = ENTRIES[_ALIASES[match.group("name")]]
        return Measure(entry.name, _number(match.group("k"), entry, text))
    cutoff_text: str | None = None
    params: str | None = None
    if "@" in lowered:
        base, _, rest = lowered.partition("@")
        entry_name = _ALIASES.get(base.strip())
        if entry_name is None:
            raise _unknown(text)
        entry = ENTRIES[entry_name]
        cutoff_text = rest
        if entry.cutoff_type is int and "." in rest:
            cutoff_text, _, params = rest.partition(".")
    else:
        base, dot, params_text = lowered.partition(".")
        entry_name = _ALIASES.get(base.strip())
        if entry_name is None or not dot:
            raise _unknown(text)
        entry = ENTRIES[entry_name]
        params = params_text
    cutoff = None if cutoff_text is None else _number(cutoff_text, entry, text)
    if isinstance(cutoff, int) and not isinstance(cutoff, bool) and cutoff < 1 and entry.cutoff_type is int:
        raise MetricError(f"metric {text!r}: cut-off must be a positive integer, got {cutoff}")
    return _with_params(entry, cutoff, params, text)


def parse_measure(name: str | Measure) -> Measure:
    """Parse a metric name such as ``"ndcg@10"``, ``"P@5"``, ``"mrr@10"``, ``"map"``, ``"Rprec"``,
    ``"iprec_at_recall@0.1"`` or ``"ndcg.1=3,2=9"`` (see the module docstring for every spelling).

    A [`Measure`][ragaudit.metrics.Measure] is returned unchanged. Raises [`MetricError`][ragaudit.MetricError] for an
    unknown name (the message lists the valid ones), a cut-off that is not a positive integer (a
    recall level not in [0, 1]), a cut-off on a measure that takes none, and malformed parameters.
    """
    if isinstance(name, Measure):
        return name
    if not isinstance(name, str):
        raise MetricError(f"a metric name must be a string such as 'ndcg@10', got {name!r}")
    return _parse(name)
