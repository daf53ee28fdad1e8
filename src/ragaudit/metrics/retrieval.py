"""Retrieval metrics with trec_eval semantics: precision, recall, F1, hit rate, MRR, MAP, NDCG, R-precision,
bpref, infAP, interpolated precision and the rest of `MEASURE_NAMES`.

Every function here computes what ``trec_eval`` 10 computes (its own test suite is among ours):

- **Ranking.** Documents are ordered by score, descending; equal scores are ordered by doc id
  compared as strings, **descending** (so ``"d9"`` ranks above ``"d10"``). The order of the input
  is ignored. **Ties** (``ties=``): ``"trec_eval"`` (the default) compares scores as doubles, as
  trec_eval has since 10.0 (its ``sim`` is a ``double``); ``"pytrec_eval"`` compares them as 32-bit
  floats, as pytrec_eval and trec_eval <= 9.0.8 do, so scores that differ only beyond ~7
  significant digits tie there (and doc ids decide): 1.00000002 vs 1.00000001 is a tie for
  pytrec_eval, not for trec_eval 10.
- **Rank-only runs** (no scores): ``{qid: [docid, ...]}`` lists, columns with ``scores=None`` (each
  query's rows best first) or a table with a ``rank`` column and no score column (rank ascending;
  equal ranks ordered by doc id descending, as trec_eval would order ``score = -rank``).
- **Relevance.** A doc missing from the qrels, or with a label <= 0, is non-relevant. A doc is
  relevant when its label >= ``relevance_level`` (default 1, must be >= 1; trec_eval ``-l``).
  Negative labels count neither in the number of relevant docs nor in the ideal DCG; bpref and
  infAP read them as trec_eval does: in the pool but not judged.
- **Divisors.** ``P@K`` divides by K even when fewer than K docs were retrieved; ``recall@K`` and
  ``map@K`` divide by all relevant docs of the query in the qrels; a query with no relevant doc
  scores 0 on every metric.
- **NDCG.** Gain is the raw label (``ndcg``), ``2**label - 1`` (``ndcg_burges``) or the gains given
  (``ndcg.1=3,2=9``, trec_eval's syntax: levels not listed gain their own value, level 0 may gain)
  for labels > 0, whatever ``relevance_level`` is (as trec_eval); discount ``log2(rank + 1)``; the
  ideal DCG is built from all judged docs of the query, highest gain first, cut at K; NDCG is 0
  when the ideal DCG is 0. (trec_eval orders custom gains by their integer difference, so two
  gains less than 1 apart may come in either order in its ideal ranking; we order them exactly.)
- **MRR@K.** trec_eval's ``recip_rank`` has no cut-off: ``mrr@K`` is 1/rank of the first relevant
  doc when it is within the top K, else 0 (``mrr`` alone is ``recip_rank``).
- **Interpolated precision.** ``iprec_at_recall@L`` and ``11pt_avg`` turn the recall level into a
  number of relevant docs with ``lround(L * R)``, as trec_eval 10 does (trec_eval <= 9 and
  pytrec_eval add 0.9 and truncate, so their values differ where the two roundings do). A query
  that retrieved nothing scores 0 there, as on every measure (trec_eval divides 0 by 0).
- **Queries.** Run and qrels are paired by query id only, never by position; ids are compared as
  strings (``str()`` of numbers). Queries in the run but not in the qrels are ignored, as
  trec_eval ignores them (their rows are not validated either). A query in the qrels with no
  judgement at all is treated as absent from the qrels.
- **Which queries are averaged** (``all_queries``). ``False`` (the default) averages over the
  queries present in both the run and the qrels, as trec_eval does without ``-c`` and as
  ``pytrec_eval`` does, so numbers compare with published ones. ``True`` is trec_eval ``-c``:
  qrels queries the run does not contain are scored as an empty ranking (0 on every metric;
  ``num_rel`` still counts their relevant docs) and appear in per-query results; use it when a
  missing answer is a failure (a RAG system that returned nothing for a question).
- **-M and -J.** ``max_docs_per_query=N`` is trec_eval ``-M N``: only the top N docs of each ranking
  count. ``judged_docs_only=True`` is ``-J``: docs without a judgement (missing from the qrels, or
  with a negative label) are removed from each ranking before anything is computed. -M applies
  first. ``-n`` (no summary) is ``per_query=True``.
- **Summaries.** Means over queries, except the counts (``num_ret``, ``num_rel``,
  ``num_rel_ret``: sums) and ``gm_map`` (the geometric mean); ``relstring`` (a string per query)
  has none and needs ``per_query=True``. (With ``-c`` and ``-l`` above 1, trec_eval's ``num_rel``
  summary counts every label > 0; ours is the sum of the per-query values.)
- **Duplicates.** trec_eval refuses a run that lists a doc twice for one query; so do we
  ([`MetricError`][ragaudit.MetricError]), unless ``on_duplicate="max"``, which keeps the
  occurrence with the highest score. (With -M, trec_eval only looks for duplicates in the top N;
  we look in the whole run.)

Layout: `_tables` and `_inputs` turn every input into query-grouped arrays,
`_docids` hashes doc ids, `_kernel` finds where each judged document ranks (ties
included, no sort of the run), and `measures` holds one formula per measure, run by
`_ranked` on all queries at once or on one ranked list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, overload

import numpy as np

from ..errors import MetricError
from ._inputs import (
    PreparedQrels,
    PreparedRun,
    as_label,
    check_level,
    check_on_duplicate,
    columns_of_rows,
    duplicate_message,
    prepare_columns,
    prepare_dict_run,
    prepare_qrels,
)
from ._kernel import Ties, check_ties, judged_of, rank_judged
from ._ranked import NONPOOL, BatchRanked, OneRanked, restrict
from ._tables import (
    DOCID_NAMES,
    QID_NAMES,
    RANK_NAMES,
    SCORE_NAMES,
    find_column,
    is_table,
    qid_text,
    table_column,
)
from .measures import Measure, parse_measure

__all__ = [
    "OnDuplicate",
    "Run",
    "Ties",
    "evaluate",
    "evaluate_columns",
    "score_ranking",
]

OnDuplicate = Literal["error", "max"]
MeasureSpec: TypeAlias = str | Measure
Qrels = Mapping[Any, Mapping[Any, Any]]


@dataclass(frozen=True, slots=True, eq=False)
class Run:
    """A run held in three aligned 1-D numpy arrays: query id, doc id and score per row.

    What [`read_run`][ragaudit.metrics.read_run] returns; accepted by [`evaluate`][ragaudit.metrics.evaluate]. Rows may
    come in any order and a query's rows need not be contiguous. Duplicates are kept as read, so
    [`evaluate`][ragaudit.metrics.evaluate] can refuse them as trec_eval does. Ids may be strings (``U``, objects) or
    UTF-8 byte strings (``S``, as [`read_run`][ragaudit.metrics.read_run] gives a TREC file's).
    """

    qids: np.ndarray
    docids: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        for name in ("qids", "docids", "scores"):
            value = np.asarray(getattr(self, name))
            if value.ndim != 1:
                raise MetricError(f"Run.{name} must be one-dimensional, got shape {value.shape}")
            object.__setattr__(self, name, value)
        if not len(self.qids) == len(self.docids) == len(self.scores):
            raise MetricError(
                f"Run columns differ in length: {len(self.qids)} qids, {len(self.docids)} docids, "
                f"{len(self.scores)} scores"
            )

    def __len__(self) -> int:
        return len(self.qids)

    def to_dict(self, on_duplicate: OnDuplicate = "error") -> dict[str, dict[str, float]]:
        """The run as ``{qid: {docid: score}}``; a duplicate doc raises unless ``on_duplicate="max"``."""
        check_on_duplicate(on_duplicate)
        out: dict[str, dict[str, float]] = {}
        for raw_qid, docid, score in zip(self.qids.tolist(), self.docids.tolist(), self.scores.tolist()):
            qid = qid_text(raw_qid)
            docs = out.setdefault(qid, {})
            key = qid_text(docid)
            if key in docs:
                if on_duplicate == "error":
                    raise MetricError(duplicate_message(qid, key))
                docs[key] = max(docs[key], float(score))
            else:
                docs[key] = float(score)
        return out


def _parse_measures(measures: MeasureSpec | Iterable[MeasureSpec]) -> list[tuple[str, Measure]]:
    items = [measures] if isinstance(measures, (str, Measure)) else list(measures)
    if not items:
        raise MetricError("no metric requested; pass names such as ['ndcg@10', 'recall@5', 'map']")
    parsed: dict[str, Measure] = {}
    for item in items:
        measure = parse_measure(item)
        parsed.setdefault(item if isinstance(item, str) else str(measure), measure)
    return list(parsed.items())


def _table_scores(table: Any) -> Any:
    """A table's score column; for a rank-only table, its rank column negated (rank 1 scores -1)."""
    scores = find_column(table, SCORE_NAMES)
    if scores is not None:
        return scores
    ranks = find_column(table, RANK_NAMES)
    if ranks is None:
        return table_column(table, SCORE_NAMES + RANK_NAMES, "score (or rank)")  # raises, listing the columns
    try:
        return -np.asarray(ranks.to_numpy() if hasattr(ranks, "to_numpy") else ranks, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MetricError(f"run: ranks must be numbers ({exc})") from exc


@dataclass(frozen=True, slots=True)
class _Options:
    """How to evaluate: trec_eval's -l, -c, -M and -J, the tie mode and what to do with duplicates."""

    level: int
    all_queries: bool
    on_duplicate: str
    ties: str
    max_docs: int | None
    judged_docs_only: bool


def _options(
    relevance_level: Any,
    all_queries: bool,
    on_duplicate: str,
    ties: str,
    max_docs_per_query: Any,
    judged_docs_only: bool,
) -> _Options:
    check_on_duplicate(on_duplicate)
    check_ties(ties)
    if max_docs_per_query is not None and (
        isinstance(max_docs_per_query, bool) or not isinstance(max_docs_per_query, (int, np.integer))
        or max_docs_per_query < 1
    ):
        raise MetricError(f"max_docs_per_query must be a positive integer (trec_eval -M), got {max_docs_per_query!r}")
    return _Options(
        level=check_level(relevance_level),
        all_queries=bool(all_queries),
        on_duplicate=on_duplicate,
        ties=ties,
        max_docs=None if max_docs_per_query is None else int(max_docs_per_query),
        judged_docs_only=bool(judged_docs_only),
    )


def _values(run: PreparedRun, qrels: PreparedQrels, measures: list[Measure], opts: _Options) -> dict[Measure, Any]:
    """Every measure's values, one per query of *run*."""
    every_label = opts.judged_docs_only or any(
        m.entry.every_label or any(level == 0 for level, _ in m.gains or ()) for m in measures
    )
    judged = judged_of(run, qrels, opts.level, every_label)
    hits, retrieved = rank_judged(run, judged, opts.on_duplicate, opts.ties)
    hits, retrieved = restrict(hits, retrieved, opts.max_docs, opts.judged_docs_only)
    ranked = BatchRanked(hits, retrieved, judged, opts.level)
    return {m: m.value(ranked) for m in measures}


def _finish(
    run: PreparedRun,
    qrels: PreparedQrels,
    keys: list[tuple[str, Measure]],
    opts: _Options,
    per_query: bool,
    n_run_queries: int,
) -> dict[str, float] | dict[str, dict[str, Any]]:
    if not opts.all_queries and not run.qids:
        example_run = "no query" if n_run_queries == 0 else f"{n_run_queries} queries"
        raise MetricError(
            f"no query of the run ({example_run}) is in the qrels ({len(qrels.qids)} queries, e.g. "
            f"{qrels.qids[0]!r}); queries are paired by id, compared as strings"
        )
    if not per_query:
        for key, m in keys:
            if m.entry.aggregate == "none":
                raise MetricError(f"{key!r} is a string per query, with no summary; pass per_query=True for it")
    measures = list(dict.fromkeys(m for _, m in keys))
    values = _values(run, qrels, measures, opts)
    qids = list(run.qids)
    if opts.all_queries:
        present = set(qids)
        missing = [q for q in qrels.qids if q not in present]
        if missing:
            # trec_eval -c scores a missing query as an empty ranking (num_rel still counts).
            empty = PreparedRun(missing, np.zeros(len(missing) + 1, dtype=np.int64), np.zeros(0), None,
                                [{} for _ in missing])
            extra = _values(empty, qrels, measures, opts)
            qids += missing
            values = {m: np.concatenate([v, extra[m]]) for m, v in values.items()}
    if per_query:
        columns = [(key, values[m].tolist()) for key, m in keys]
        return {qid: {key: col[i] for key, col in columns} for i, qid in enumerate(qids)}
    return {key: m.aggregate(values[m]) for key, m in keys}


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Sequence[tuple[Any, Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[False] = False,
    relevance_level: int = 1,
    *,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Sequence[tuple[Any, Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[True],
    relevance_level: int = 1,
    *,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, dict[str, Any]]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Sequence[tuple[Any, Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool,
    relevance_level: int = 1,
    *,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float] | dict[str, dict[str, Any]]: ...


def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Sequence[tuple[Any, Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool = False,
    relevance_level: int = 1,
    *,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float] | dict[str, dict[str, Any]]:
    """Score a run against qrels with trec_eval semantics (see the module docstring for the rules).

    *run* is ``{qid: {docid: score}}``, rank-only ``{qid: [docid, ...]}`` (best first), a list
    (or tuple, or iterator) of ``(qid, docid, score)`` rows, a [`Run`][ragaudit.metrics.Run], or a pandas, Polars or
    pyarrow table with ``qid``, ``docid`` and ``score`` (or, rank-only, ``rank``) columns; *qrels* is
    ``{qid: {docid: label}}`` (integer labels, graded allowed) or a table with ``qid``, ``docid``
    and ``relevance`` columns. Numpy integers and floats are accepted anywhere. *measures* are
    names such as ``"ndcg@10"``, ``"recall@5"``, ``"mrr@10"``, ``"map"``, ``"Rprec"``, ``"bpref"``
    (see `MEASURE_NAMES`).

    Returns ``{measure: summary}`` (the mean; a sum for the counts, the geometric mean for
    ``gm_map``), or ``{qid: {measure: value}}`` with ``per_query=True`` (floats; ``relstring``'s
    are strings); keys are the measure names as given. trec_eval's options, keyword-only:
    ``relevance_level`` (``-l``), ``all_queries=True`` (``-c``: qrels queries missing from the run
    count as empty rankings), ``max_docs_per_query`` (``-M``), ``judged_docs_only`` (``-J``);
    ``ties="trec_eval"`` (doubles, trec_eval >= 10.0) or ``"pytrec_eval"`` (32-bit floats, as
    pytrec_eval and trec_eval <= 9.0.8). Raises [`MetricError`][ragaudit.MetricError] for an unknown metric, a bad
    cut-off or option, a NaN score, an empty run or qrels, no query in common (unless
    ``all_queries``), a summary of ``relstring``, or a duplicate doc in a query (unless
    ``on_duplicate="max"``).
    """
    opts = _options(relevance_level, all_queries, on_duplicate, ties, max_docs_per_query, judged_docs_only)
    keys = _parse_measures(measures)
    if isinstance(run, Run) or is_table(run):
        if isinstance(run, Run):
            qids, docids, scores = run.qids, run.docids, run.scores
        else:
            qids, docids = table_column(run, QID_NAMES, "query id"), table_column(run, DOCID_NAMES, "doc id")
            scores = _table_scores(run)
        return _evaluate_prepared_columns(qids, docids, scores, qrels, keys, opts, per_query)
    if isinstance(run, (list, tuple, Iterator)):  # rows: a list, a tuple or a generator of them
        return _evaluate_prepared_columns(*columns_of_rows(run), qrels, keys, opts, per_query)
    if not isinstance(run, Mapping):
        raise MetricError(
            f"run must be a mapping {{qid: {{docid: score}}}} (or {{qid: [docid, ...]}}), a list of (qid, docid, "
            f"score) rows, a Run or a table, got {type(run).__name__}"
        )
    prepared_qrels = prepare_qrels(qrels)
    prepared_run, n_run_queries = prepare_dict_run(run, prepared_qrels, opts.on_duplicate)
    return _finish(prepared_run, prepared_qrels, keys, opts, per_query, n_run_queries)


def _evaluate_prepared_columns(
    qids: Any, docids: Any, scores: Any, qrels: Any, keys: list[tuple[str, Measure]], opts: _Options, per_query: bool
) -> dict[str, float] | dict[str, dict[str, Any]]:
    prepared_qrels = prepare_qrels(qrels)
    prepared_run, n_run_queries = prepare_columns(qids, docids, scores, prepared_qrels)
    return _finish(prepared_run, prepared_qrels, keys, opts, per_query, n_run_queries)


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: Literal[False] = False,
    relevance_level: int = 1,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float]: ...


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: Literal[True],
    relevance_level: int = 1,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, dict[str, Any]]: ...


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: bool,
    relevance_level: int = 1,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float] | dict[str, dict[str, Any]]: ...


def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: bool = False,
    relevance_level: int = 1,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
) -> dict[str, float] | dict[str, dict[str, Any]]:
    """[`evaluate`][ragaudit.metrics.evaluate] for a run given as three aligned columns: query id, doc id and score per
    row.

    The columns may be numpy arrays, lists, pandas Series or pyarrow arrays. ``scores=None`` makes a
    rank-only run: each query's rows are taken in the order given, best first. This is the fast path
    for large runs: with numpy string arrays (dtype ``U``) it never builds Python objects per row.
    Integer ids are compared as their decimal strings. Rows may come in any order; a query's rows
    are found by id, whether contiguous or not. Same rules, options and errors as
    [`evaluate`][ragaudit.metrics.evaluate].
    """
    opts = _options(relevance_level, all_queries, on_duplicate, ties, max_docs_per_query, judged_docs_only)
    keys = _parse_measures(measures)
    return _evaluate_prepared_columns(qids, docids, scores, qrels, keys, opts, per_query)


def score_ranking(
    ranked_ids: Sequence[str],
    qrels: Mapping[str, int],
    measures: MeasureSpec | Iterable[MeasureSpec],
    relevance_level: int = 1,
) -> dict[str, Any]:
    """Metrics for one ranked list that is already in order (first id = rank 1); cheap, pure Python.

    Meant for one RAG turn (a handful of retrieved documents) whose ground truth is known: *qrels*
    maps doc id -> label (``{id: 1}`` for binary relevance). A repeated id keeps its first rank.
    Same definitions -- the same formulas -- as [`evaluate`][ragaudit.metrics.evaluate]; an empty ranking scores 0 on
    every metric (``num_rel`` still counts the relevant docs). Values are floats (``relstring``'s a
    string). Raises
    [`MetricError`][ragaudit.MetricError] for an unknown metric or a non-integer label.
    """
    keys = _parse_measures(measures)
    level = check_level(relevance_level)
    judged = {str(doc): as_label(label, "<turn>", str(doc)) for doc, label in qrels.items()}
    seen: set[str] = set()
    labels: list[int] = []
    for doc in ranked_ids:
        key = doc if type(doc) is str else str(doc)
        if key not in seen:
            seen.add(key)
            labels.append(judged.get(key, NONPOOL))
    ranked = OneRanked(labels, list(judged.values()), level)
    return {key: _plain(m.value(ranked)) for key, m in keys}


def _plain(value: Any) -> Any:
    return value if isinstance(value, str) else float(value)
