"""Retrieval metrics with trec_eval semantics: precision, recall, F1, hit rate, MRR, MAP, NDCG.

Every function here computes what ``trec_eval`` (and so ``pytrec_eval``) computes:

- **Ranking.** Documents are ordered by score, descending; equal scores are ordered by doc id
  compared as strings, **descending** (so ``"d9"`` ranks above ``"d10"``). The order of the input
  is ignored. Scores are compared as 32-bit floats, because trec_eval stores them so: scores that
  differ only beyond ~7 significant digits tie (and doc ids decide).
- **Rank-only runs** (no scores): ``{qid: [docid, ...]}`` lists, columns with ``scores=None`` (each
  query's rows best first) or a table with a ``rank`` column and no score column (rank ascending;
  equal ranks ordered by doc id descending, as trec_eval would order ``score = -rank``).
- **Relevance.** A doc missing from the qrels, or with a label <= 0, is non-relevant. A doc is
  relevant when its label >= ``relevance_level`` (default 1, must be >= 1). Negative labels count
  neither in the number of relevant docs nor in the ideal DCG.
- **Divisors.** ``P@K`` divides by K even when fewer than K docs were retrieved; ``recall@K`` and
  ``map@K`` divide by all relevant docs of the query in the qrels; a query with no relevant doc
  scores 0 on every metric.
- **NDCG.** Gain is the raw label (``ndcg``) or ``2**label - 1`` (``ndcg_burges``) for labels > 0,
  whatever ``relevance_level`` is (as trec_eval); discount ``log2(rank + 1)``; the ideal DCG is
  built from all labels >= 1 of the query, cut at K; NDCG is 0 when the ideal DCG is 0.
- **MRR@K.** trec_eval's ``recip_rank`` has no cut-off: ``mrr@K`` is 1/rank of the first relevant
  doc when it is within the top K, else 0 (``mrr`` alone is ``recip_rank``).
- **Queries.** Run and qrels are paired by query id only, never by position; ids are compared as
  strings (``str()`` of numbers). Queries in the run but not in the qrels are ignored, as
  trec_eval ignores them (their rows are not validated either). A query in the qrels with no
  judgement at all is treated as absent from the qrels.
- **Averaging** (``judged_only``). ``True`` (the default) averages over the queries present in
  both the run and the qrels, as trec_eval does without ``-c`` and as ``pytrec_eval`` does, so
  numbers compare with published ones. ``False`` is trec_eval ``-c``: qrels queries the run does
  not contain count as 0 in the means and appear with 0.0 in per-query results; use it when a
  missing answer is a failure (a RAG system that returned nothing for a question).
- **Duplicates.** trec_eval refuses a run that lists a doc twice for one query; so do we
  (:class:`~ragaudit.errors.MetricError`), unless ``on_duplicate="max"``, which keeps the
  occurrence with the highest score.

Layout: :mod:`._tables` and :mod:`._inputs` turn every input into query-grouped arrays,
:mod:`._docids` hashes doc ids, :mod:`._kernel` finds where each judged document ranks (ties
included, no sort of the run), and :mod:`.measures` holds one formula per measure, run by
:mod:`._ranked` on all queries at once or on one ranked list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
    duplicate_message,
    prepare_columns,
    prepare_dict_run,
    prepare_qrels,
)
from ._kernel import judged_of, rank_judged
from ._ranked import BatchRanked, OneRanked
from ._tables import DOCID_NAMES, QID_NAMES, RANK_NAMES, SCORE_NAMES, find_column, is_table, table_column
from .measures import Measure, parse_measure

__all__ = [
    "OnDuplicate",
    "Run",
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

    What :func:`~ragaudit.metrics.read_run` returns; accepted by :func:`evaluate`. Rows may come in
    any order and a query's rows need not be contiguous. Duplicates are kept as read, so
    :func:`evaluate` can refuse them as trec_eval does.
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
        for qid, docid, score in zip(self.qids.tolist(), self.docids.tolist(), self.scores.tolist()):
            docs = out.setdefault(str(qid), {})
            key = str(docid)
            if key in docs:
                if on_duplicate == "error":
                    raise MetricError(duplicate_message(str(qid), key))
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


def _finish(
    run: PreparedRun,
    qrels: PreparedQrels,
    keys: list[tuple[str, Measure]],
    level: int,
    on_duplicate: str,
    per_query: bool,
    judged_only: bool,
    n_run_queries: int,
) -> dict[str, float] | dict[str, dict[str, float]]:
    if judged_only and not run.qids:
        example_run = "no query" if n_run_queries == 0 else f"{n_run_queries} queries"
        raise MetricError(
            f"no query of the run ({example_run}) is in the qrels ({len(qrels.qids)} queries, e.g. "
            f"{qrels.qids[0]!r}); queries are paired by id, compared as strings"
        )
    judged = judged_of(run, qrels, level)
    hits, retrieved = rank_judged(run, judged, on_duplicate)
    ranked = BatchRanked(hits, retrieved, judged, level)
    values = {m: m.value(ranked) for m in dict.fromkeys(m for _, m in keys)}
    qids = list(run.qids)
    if not judged_only:
        present = set(qids)
        missing = [q for q in qrels.qids if q not in present]
        if missing:
            qids += missing
            values = {m: np.concatenate([v, np.zeros(len(missing))]) for m, v in values.items()}
    if per_query:
        columns = [(key, values[m].tolist()) for key, m in keys]
        return {qid: {key: col[i] for key, col in columns} for i, qid in enumerate(qids)}
    return {key: float(values[m].mean()) if len(qids) else 0.0 for key, m in keys}


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[False] = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[True],
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, dict[str, float]]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]: ...


def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Mapping[Any, Sequence[Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]:
    """Score a run against qrels with trec_eval semantics (see the module docstring for the rules).

    *run* is ``{qid: {docid: score}}``, rank-only ``{qid: [docid, ...]}`` (best first), a
    :class:`Run`, or a pandas DataFrame / pyarrow Table with ``qid``, ``docid`` and ``score`` (or,
    rank-only, ``rank``) columns; *qrels* is ``{qid: {docid: label}}`` (integer labels,
    graded allowed) or a table with ``qid``, ``docid`` and ``relevance`` columns. Numpy integers and
    floats are accepted anywhere. *measures* are names such as ``"ndcg@10"``, ``"recall@5"``,
    ``"mrr@10"``, ``"map"`` (see :data:`~ragaudit.metrics.MEASURE_NAMES`).

    Returns ``{measure: mean}``, or ``{qid: {measure: value}}`` with ``per_query=True``; keys are the
    measure names as given. ``judged_only=True`` averages over queries in both run and qrels
    (trec_eval and pytrec_eval); ``False`` also counts qrels queries missing from the run as 0.
    Raises :class:`~ragaudit.errors.MetricError` for an unknown metric, a bad cut-off, a NaN score,
    an empty run or qrels, no query in common (with ``judged_only=True``), or a duplicate doc in a
    query (unless ``on_duplicate="max"``).
    """
    check_on_duplicate(on_duplicate)
    keys = _parse_measures(measures)
    level = check_level(relevance_level)
    if isinstance(run, Run):
        return evaluate_columns(
            run.qids,
            run.docids,
            run.scores,
            qrels,
            measures,
            per_query=per_query,
            relevance_level=relevance_level,
            judged_only=judged_only,
            on_duplicate=on_duplicate,
        )
    if is_table(run):
        return evaluate_columns(
            table_column(run, QID_NAMES, "query id"),
            table_column(run, DOCID_NAMES, "doc id"),
            _table_scores(run),
            qrels,
            measures,
            per_query=per_query,
            relevance_level=relevance_level,
            judged_only=judged_only,
            on_duplicate=on_duplicate,
        )
    if not isinstance(run, Mapping):
        raise MetricError(
            f"run must be a mapping {{qid: {{docid: score}}}} (or {{qid: [docid, ...]}}), a Run or a table, "
            f"got {type(run).__name__}"
        )
    prepared_qrels = prepare_qrels(qrels)
    prepared_run, n_run_queries = prepare_dict_run(run, prepared_qrels, on_duplicate)
    return _finish(prepared_run, prepared_qrels, keys, level, on_duplicate, per_query, judged_only, n_run_queries)


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
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
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
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, dict[str, float]]: ...


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
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]: ...


def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: bool = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]:
    """:func:`evaluate` for a run given as three aligned columns: query id, doc id and score per row.

    The columns may be numpy arrays, lists, pandas Series or pyarrow arrays. ``scores=None`` makes a
    rank-only run: each query's rows are taken in the order given, best first. This is the fast path
    for large runs: with numpy string arrays (dtype ``U``) it never builds Python objects per row.
    Integer ids are compared as their decimal strings. Rows may come in any order; a query's rows
    are found by id, whether contiguous or not. Same rules, options and errors as :func:`evaluate`.
    """
    check_on_duplicate(on_duplicate)
    keys = _parse_measures(measures)
    level = check_level(relevance_level)
    prepared_qrels = prepare_qrels(qrels)
    prepared_run, n_run_queries = prepare_columns(qids, docids, scores, prepared_qrels)
    return _finish(prepared_run, prepared_qrels, keys, level, on_duplicate, per_query, judged_only, n_run_queries)


def score_ranking(
    ranked_ids: Sequence[str],
    qrels: Mapping[str, int],
    measures: MeasureSpec | Iterable[MeasureSpec],
    relevance_level: int = 1,
) -> dict[str, float]:
    """Metrics for one ranked list that is already in order (first id = rank 1); cheap, pure Python.

    Meant for one RAG turn (a handful of retrieved documents) whose ground truth is known: *qrels*
    maps doc id -> label (``{id: 1}`` for binary relevance). A repeated id keeps its first rank.
    Same definitions -- the same formulas -- as :func:`evaluate`; an empty ranking scores 0 on
    every metric. Raises :class:`~ragaudit.errors.MetricError` for an unknown metric or a
    non-integer label.
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
            labels.append(judged.get(key, 0))
    ideal = sorted((label for label in judged.values() if label >= 1), reverse=True)
    num_rel = sum(1 for label in judged.values() if label >= level)
    ranked = OneRanked(labels, ideal, num_rel, level)
    return {key: float(m.value(ranked)) for key, m in keys}
