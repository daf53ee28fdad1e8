"""A run given as ``(qid, docid, score)`` rows (issue 31): a list, a tuple or an iterator of them.

Rows are read by pyarrow step by step when it is installed and the run is large, else by a pass per
column; both give what the nested-dict path gives, and both name the first bad row. The steps are
made small here so that queries, and doc ids of different widths, straddle them.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import _fast, _inputs, _tables

MEASURES = ["ndcg@10", "recall@10", "mrr", "map@100", "P@5", "bpref", "num_ret"]


Rows = list[tuple[str, str, float]]


def _case(seed: int, spread: bool, rows: int = 20_000) -> tuple[Rows, dict[str, dict[str, int]]]:
    """Tie-heavy rows of queries of 1-80 docs, ids of 2-40 characters (some non-ASCII, the widest
    ones only late in the run), some queries without qrels; queries contiguous or spread."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, str, float]] = []
    qrels: dict[str, dict[str, int]] = {}
    q = 0
    while len(out) < rows:
        qid = f"q{q}" if q % 5 else f"query-ü-{q}"
        depth = int(rng.integers(1, 80))
        wide = "x" * (20 if len(out) > rows // 2 else 0)
        docs = [f"d{int(x)}{wide}" if x % 4 else f"doc-é-{int(x)}" for x in rng.choice(3_000, depth, replace=False)]
        scores = np.round(rng.random(depth), 1).tolist()
        out += list(zip([qid] * depth, docs, scores))
        if q % 9 != 4:
            judged = rng.choice(depth, min(depth, 5), replace=False)
            qrels[qid] = {docs[int(j)]: int(rng.integers(0, 4)) for j in judged}
        q += 1
    if spread:
        out = [out[i] for i in rng.permutation(len(out)).tolist()]
    return out, qrels


def _nested(rows: list[tuple[str, str, float]]) -> dict[str, dict[str, float]]:
    nested: dict[str, dict[str, float]] = {}
    for q, d, s in rows:
        nested.setdefault(q, {})[d] = s
    return nested


@pytest.fixture(params=[True, False], ids=["pyarrow", "no pyarrow"])
def arrow(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param:
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    monkeypatch.setattr(_inputs, "_ROWS_STEP", 1_000)  # many steps: queries and id widths straddle them
    # The paths without the C speedups (tests/test_metrics_speedups.py compares those with them).
    monkeypatch.setattr(_fast, "speedups", None)
    return bool(request.param)


@pytest.mark.parametrize("spread", [False, True], ids=["contiguous", "spread"])
def test_rows_of_every_container_equal_the_dict_path(arrow: bool, spread: bool) -> None:
    rows, qrels = _case(seed=3 if spread else 4, spread=spread)
    want = metrics.evaluate(_nested(rows), qrels, MEASURES, per_query=True, ties="pytrec_eval")
    qids, docids, _ = _inputs.columns_of_rows(rows)
    # The fast path gives fixed-width doc ids and the query ids' runs (contiguous) or Arrow strings
    # (spread); the generic one, lists.
    assert isinstance(qids, list) is not arrow and isinstance(docids, np.ndarray) is arrow
    assert isinstance(qids, _inputs.QidRuns) is (arrow and not spread)
    for form in (rows, tuple(rows), iter(rows), (row for row in rows), map(tuple, rows), [list(r) for r in rows]):
        assert metrics.evaluate(form, qrels, MEASURES, per_query=True, ties="pytrec_eval") == want


def test_small_runs_and_numpy_values_take_the_generic_path(arrow: bool) -> None:
    rows = [("q1", "d1", np.float32(0.5)), ("q1", "d2", 1), ("q2", "d1", np.float64(0.25)), ("q1", "d3", True)]
    qrels = {"q1": {"d2": 1, "d3": 2}, "q2": {"d1": 1}}
    as_floats = [(q, d, float(s)) for q, d, s in rows]
    want = metrics.evaluate(_nested(as_floats), qrels, MEASURES, per_query=True)
    assert metrics.evaluate(rows, qrels, MEASURES, per_query=True) == want
    assert metrics.evaluate(iter(rows), qrels, MEASURES, per_query=True) == want
    # Integer ids are compared as their decimal strings, as in every other form.
    numbered = [(1, 10, 0.5), (1, 11, 0.7), (2, 10, 0.1)]
    assert metrics.evaluate(numbered, {"1": {"10": 1}, "2": {"10": 1}}, ["map"]) == {"map": 0.75}


@pytest.mark.parametrize("big", [False, True], ids=["few rows", "many rows"])
def test_bad_rows_are_named(arrow: bool, big: bool) -> None:
    rows, qrels = _case(seed=5, spread=False, rows=30_000 if big else 40)
    at = len(rows) - 7  # in the last step: every step before it converted fine

    def with_row(row: Any) -> list[Any]:
        return [*rows[:at], row, *rows[at + 1 :]]

    q, d, _ = rows[at]
    for row in ((q, d), (q, d, 0.5, "extra"), f"{q} {d} 0.5", None, {"qid": q}):
        with pytest.raises(MetricError, match=rf"run rows must be \(qid, docid, score\) tuples; row {at} is "):
            metrics.evaluate(with_row(row), qrels, ["map"])
    with pytest.raises(MetricError, match=rf"score of row {at} \('{q}', '{d}'\) is missing"):
        metrics.evaluate(with_row((q, d, None)), qrels, ["map"])
    for score in ("0.5", b"1", [0.5]):
        with pytest.raises(MetricError, match=rf"score of row {at} \('{q}', '{d}'\) must be a number, got "):
            metrics.evaluate(with_row((q, d, score)), qrels, ["map"])
    with pytest.raises(MetricError, match=rf"score for query '{q}', doc '{d}' is NaN"):
        metrics.evaluate(with_row((q, d, float("nan"))), qrels, ["map"])
    with pytest.raises(MetricError, match=f"doc id at row {at} is missing"):
        metrics.evaluate(with_row((q, None, 0.5)), qrels, ["map"])
    with pytest.raises(MetricError, match="missing query id"):
        metrics.evaluate(with_row((None, d, 0.5)), qrels, ["map"])
    with pytest.raises(MetricError, match="the run is empty: no row"):
        metrics.evaluate(iter([]), qrels, ["map"])


def test_duplicate_rows_are_refused_or_the_best_kept(arrow: bool) -> None:
    rows, qrels = _case(seed=6, spread=True)
    q, d, s = rows[100]
    twice = [*rows[:3000], (q, d, s - 1.0), *rows[3000:]]  # the same doc again, lower: in another step
    with pytest.raises(MetricError, match=f"query '{q}': doc id '{d}' appears more than once"):
        metrics.evaluate(twice, qrels, MEASURES)
    want = metrics.evaluate(rows, qrels, MEASURES, per_query=True)
    assert metrics.evaluate(twice, qrels, MEASURES, per_query=True, on_duplicate="max") == want
    assert metrics.evaluate([*rows, rows[5]], qrels, MEASURES, per_query=True, on_duplicate="max") == want


def test_queries_found_in_runs_until_they_are_not(arrow: bool) -> None:
    """Rows in runs of queries for some steps, then spread; and runs in which a query comes twice
    (two runs concatenated): both grouped as if the rows were contiguous."""
    rows, qrels = _case(seed=7, spread=False)
    half = len(rows) // 2
    rng = np.random.default_rng(7)
    late_spread = rows[:half] + [rows[half + int(i)] for i in rng.permutation(len(rows) - half).tolist()]
    want = metrics.evaluate(_nested(rows), qrels, MEASURES, per_query=True)
    for form in (late_spread, rows[half:] + rows[:half]):
        got = metrics.evaluate(form, qrels, MEASURES, per_query=True)
        assert got == want and set(got) == set(want)
    # A query whose rows come in two places, and the qrels' queries in another order.
    split = rows[:half] + [(q, d + "-again", s) for q, d, s in rows[:50]] + rows[half:]
    twice = _nested(split)
    assert metrics.evaluate(split, qrels, MEASURES, per_query=True) == metrics.evaluate(
        twice, qrels, MEASURES, per_query=True
    )
    qids, _, _ = _inputs.columns_of_rows(split)
    assert not isinstance(qids, _inputs.QidRuns)


@pytest.mark.parametrize("sample", [64, 1 << 14])
def test_spread_runs_are_told_from_their_first_rows_alike(monkeypatch: pytest.MonkeyPatch, sample: int) -> None:
    """Query ids whose first rows are spread are grouped without a search for contiguous blocks;
    a run that is spread only at its start, or only after it, is grouped all the same."""
    monkeypatch.setattr(_inputs, "_SPREAD_SAMPLE", sample)
    rows, qrels = _case(seed=8, spread=False, rows=40_000)
    rng = np.random.default_rng(8)
    cut = 3 * sample

    def shuffled(part: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
        return [part[int(i)] for i in rng.permutation(len(part)).tolist()]

    want = metrics.evaluate(_nested(rows), qrels, MEASURES, per_query=True)
    for form in (shuffled(rows), shuffled(rows[:cut]) + rows[cut:], rows[:cut] + shuffled(rows[cut:])):
        q, d, s = (np.array(col) for col in zip(*form))
        for qids in (q, q.astype(object), *_arrow_and_polars(q.tolist())):
            got = metrics.evaluate_columns(qids, d, s, qrels, MEASURES, per_query=True)
            assert got == want, type(qids)


def test_arrow_and_polars_ids_changing_at_their_first_rows_are_not_searched_for_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Query ids that change at most of the first sampled rows are grouped by their codes: runs are
    not looked for over the whole column (a wasted pass when the ids are spread), even where the
    whole would have made runs; the results stay the same."""
    pa = pytest.importorskip("pyarrow")
    pc = pytest.importorskip("pyarrow.compute")
    pl = pytest.importorskip("polars")
    # The pure path's sample rule (the C speedups give up within their one pass instead).
    monkeypatch.setattr(_fast, "speedups", None)
    rows, qrels = _case(seed=9, spread=False, rows=40_000)
    # 64 queries of one row first, then the contiguous rows: runs over the whole, none in the head.
    form = [(f"single-{i}", f"doc-{i}", 1.0) for i in range(64)] + rows
    q = [row[0] for row in form]
    for sample, runs in ((64, False), (1 << 14, True)):
        assert (_tables._arrow_runs(pc, pa.array(q, pa.string()), sample) is not None) is runs
        assert (_tables._polars_runs(pl.Series(q), "qids", sample) is not None) is runs
    monkeypatch.setattr(_inputs, "_SPREAD_SAMPLE", 64)
    want = metrics.evaluate(_nested(form), qrels, MEASURES, per_query=True)
    _, d, s = (np.array(col) for col in zip(*form))
    for qids in _arrow_and_polars(q):
        assert metrics.evaluate_columns(qids, d, s, qrels, MEASURES, per_query=True) == want, type(qids)


def _arrow_and_polars(qids: list[str]) -> list[Any]:
    """*qids* as a pyarrow array, a chunked one, a Polars Series and a pandas ``string[pyarrow]`` one."""
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    pd = pytest.importorskip("pandas")
    half = len(qids) // 2
    return [pa.array(qids, pa.string()), pa.chunked_array([qids[:half], qids[half:]], pa.string()),
            pl.Series(qids), pd.Series(qids, dtype="string[pyarrow]")]
