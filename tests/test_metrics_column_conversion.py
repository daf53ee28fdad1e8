"""The column conversions of issue 31's input forms give exactly what the plain numpy path gives.

Python-string columns (numpy object arrays, pandas object columns, lists): query ids found in runs
by comparing neighbours (no conversion), doc ids converted by pyarrow chunk by chunk into one
fixed-width array -- checked below and above the size where pyarrow takes over, with chunks of
growing widths, non-ASCII and empty ids, and values that are not strings (which must still give
the clear error naming the row). Every case is compared with the same run as numpy ``U`` columns
(itself checked against pytrec_eval in test_metrics_input_forms.py).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import _tables

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

MEASURES = ["ndcg@10", "recall@10", "mrr", "map@100", "P@5", "num_ret"]


def _run(rows: int, seed: int, spread: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """~*rows* rows, tie-heavy; ids of 0 to 40 characters, some non-ASCII, some empty; doc ids
    grow longer through the run (so later chunks are wider than the first)."""
    rng = np.random.default_rng(seed)
    qids: list[str] = []
    docids: list[str] = []
    qrels: dict[str, dict[str, int]] = {}
    q = 0
    while len(qids) < rows:
        qid = "" if q == 5 else (f"q{q}" if q % 7 else f"query-é-{q:05d}-{'x' * (q % 11)}")
        depth = int(rng.integers(1, 60))
        grow = "z" * (len(qids) * 30 // max(rows, 1))
        pool = [("" if x == 0 else f"d{x}{grow}") if x % 4 else f"doc-ü-{x:07d}" for x in
                rng.choice(3_000, size=depth, replace=False).tolist()]
        qids += [qid] * depth
        docids += pool
        qrels[qid] = {pool[int(j)]: int(rng.integers(0, 3)) for j in rng.choice(depth, size=min(depth, 4))}
        q += 1
    scores = rng.integers(0, 5, len(qids)).astype(float)
    order = rng.permutation(len(qids)) if spread else np.arange(len(qids))
    return np.array(qids)[order], np.array(docids)[order], scores[order], qrels


def _evaluate(q: Any, d: Any, s: Any, qrels: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return metrics.evaluate_columns(q, d, s, qrels, MEASURES, per_query=True, ties="pytrec_eval")


@pytest.mark.parametrize("rows", [3_000, 40_000], ids=["below pyarrow's threshold", "above it"])
@pytest.mark.parametrize("spread", [False, True], ids=["contiguous", "spread"])
def test_python_string_columns_equal_the_numpy_path(monkeypatch: pytest.MonkeyPatch, rows: int, spread: bool) -> None:
    monkeypatch.setattr(_tables, "_CHUNK_ROWS", 4_096)  # many chunks, of growing widths
    q, d, s, qrels = _run(rows, seed=rows + spread, spread=spread)
    assert (rows >= _tables._ARROW_MIN_ROWS) == (len(q) >= _tables._ARROW_MIN_ROWS)
    want = _evaluate(q, d, s, qrels)
    forms = {
        "numpy object": (q.astype(object), d.astype(object), s),
        "lists": (q.tolist(), d.tolist(), s.tolist()),
        "pandas object": (pd.Series(q.tolist(), dtype=object), pd.Series(d.tolist(), dtype=object), s),
    }
    for label, (qs, ds, ss) in forms.items():
        assert _evaluate(qs, ds, ss, qrels) == want, label
    frame = pd.DataFrame({"qid": pd.Series(q.tolist(), dtype=object), "docid": pd.Series(d.tolist(), dtype=object),
                          "score": s})
    assert metrics.evaluate(frame, qrels, MEASURES, per_query=True, ties="pytrec_eval") == want


def test_doc_ids_convert_chunk_by_chunk_into_one_fixed_width_array(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tables, "_CHUNK_ROWS", 1_000)
    ids = [f"d{i}" + "w" * (i // 2_000) for i in range(20_000)] + ["", "ü-non-ascii", "x" * 50]
    fixed = _tables.fixed_strings(np.array(ids, dtype=object), "docids")
    assert fixed is not None and fixed.dtype == np.dtype("S50")
    assert fixed.tolist() == [i.encode("utf-8") for i in ids]
    assert _tables.fixed_strings(ids[:100], "docids") is None  # short: the generic path is cheaper
    assert _tables.fixed_strings(np.array(ids), "docids") is None  # not Python strings


@pytest.mark.parametrize("bad_row", [10, 19_999])
def test_doc_ids_that_are_not_strings_still_get_the_row_named(monkeypatch: pytest.MonkeyPatch, bad_row: int) -> None:
    monkeypatch.setattr(_tables, "_CHUNK_ROWS", 4_096)  # row 19,999 is in a later chunk than the first
    q, d, s, qrels = _run(20_000, seed=3)
    for bad, message in ((None, "is missing"), (float("nan"), "is missing"), (b"bytes", None), (7, None)):
        docs = d.astype(object)
        docs[bad_row] = bad
        if message is None:  # bytes and integers are read as the strings they spell
            want_docs = d.copy().astype(object)
            want_docs[bad_row] = "bytes" if isinstance(bad, bytes) else str(bad)
            assert _evaluate(q, docs, s, qrels) == _evaluate(q, want_docs.astype(str), s, qrels)
        else:
            with pytest.raises(MetricError, match=f"doc id at row {bad_row} {message}"):
                _evaluate(q, docs, s, qrels)


def test_query_id_runs_are_found_without_converting_the_ids() -> None:
    values = np.array(["a", "a", "b", "b", "b", "c", "c", "c", "c", *[""] * 31], dtype=object)
    runs = _tables.object_runs(values)
    assert runs is not None and runs.qids == ["a", "b", "c", ""] and runs.lengths.tolist() == [2, 3, 4, 31]
    from_list = _tables.object_runs(list(values))
    assert from_list is not None and from_list.qids == runs.qids and from_list.lengths.tolist() == [2, 3, 4, 31]
    spread = values.copy()
    spread[0], spread[-1] = spread[-1], spread[0]
    assert _tables.object_runs(spread) is None  # "" starts two runs: the rows are grouped by id instead
    for bad in (None, float("nan"), 5, b"a"):
        mixed = values.copy()
        mixed[:2] = bad
        assert _tables.object_runs(mixed) is None  # not all strings: the generic path reads them
    assert _tables.object_runs(np.array([np.zeros(2)] * 10 + [np.ones(2)] * 10, dtype=object)) is None
    assert _tables.object_runs(np.array(["a", "b"] * 20, dtype=object)) is None  # runs of 1 row


@pytest.mark.parametrize("rows", [2_000, 30_000])
def test_query_ids_that_are_not_all_strings(rows: int) -> None:
    q, d, s, qrels = _run(rows, seed=7)
    missing = q.astype(object)
    missing[len(q) // 2] = None
    with pytest.raises(MetricError, match="missing query id"):
        _evaluate(missing, d, s, qrels)
    missing[len(q) // 2] = float("nan")
    with pytest.raises(MetricError, match="missing query id"):
        _evaluate(missing, d, s, qrels)
    # Integers and their decimal strings are the same query ids (ids compare as strings).
    numbered = {str(i): docs for i, docs in enumerate(qrels.values())}
    codes = {qid: i for i, qid in enumerate(qrels)}
    as_ints = np.array([codes[x] for x in q.tolist()], dtype=object)
    as_text = as_ints.astype(str)
    half = as_ints.copy()
    half[: len(q) // 2] = as_text[: len(q) // 2]
    want = _evaluate(as_text, d, s, numbered)
    assert _evaluate(as_ints, d, s, numbered) == want
    assert _evaluate(half, d, s, numbered) == want


def test_polars_columns_equal_the_numpy_path() -> None:
    pl = pytest.importorskip("polars")
    q, d, s, qrels = _run(30_000, seed=11)
    want = _evaluate(q, d, s, qrels)
    ql, dl = q.tolist(), d.tolist()
    frames = {
        "strings": pl.DataFrame({"qid": ql, "docid": dl, "score": s}),
        "categorical": pl.DataFrame({"qid": pl.Series(ql, dtype=pl.Categorical),
                                     "docid": pl.Series(dl, dtype=pl.Categorical), "score": s}),
        # Two chunks: the Series' rle and Arrow export see both.
        "chunked": pl.concat([pl.DataFrame({"qid": ql[:777], "docid": dl[:777], "score": s[:777]}),
                              pl.DataFrame({"qid": ql[777:], "docid": dl[777:], "score": s[777:]})], rechunk=False),
    }
    for label, frame in frames.items():
        assert metrics.evaluate(frame, qrels, MEASURES, per_query=True, ties="pytrec_eval") == want, label
    runs = _tables.coded_ids(frames["strings"]["qid"], "qids", 1 << 14)
    assert isinstance(runs, _tables.QidRuns) and runs.qids == list(dict.fromkeys(ql))
    # A query whose rows come in two runs, and rows spread out: grouped by id, not as runs.
    for order in (np.r_[np.arange(100, len(q)), np.arange(100)], np.random.default_rng(1).permutation(len(q))):
        frame = pl.DataFrame({"qid": q[order].tolist(), "docid": d[order].tolist(), "score": s[order]})
        assert _tables.coded_ids(frame["qid"], "qids", 1 << 14) is not None
        assert metrics.evaluate(frame, qrels, MEASURES, per_query=True, ties="pytrec_eval") == _evaluate(
            q[order], d[order], s[order], qrels)


def test_polars_and_arrow_missing_ids_are_named() -> None:
    pl = pytest.importorskip("polars")
    q, d, s, qrels = _run(20_000, seed=12)
    with_null = [None if i == 50 else x for i, x in enumerate(q.tolist())]
    with pytest.raises(MetricError, match="qids has 1 missing values"):
        metrics.evaluate(pl.DataFrame({"qid": with_null, "docid": d.tolist(), "score": s}), qrels, MEASURES)
    with pytest.raises(MetricError, match="docids has 1 missing values"):
        metrics.evaluate(pl.DataFrame({"qid": q.tolist(), "docid": with_null, "score": s}), qrels, MEASURES)


def test_arrow_string_views_and_chunks_equal_the_numpy_path() -> None:
    q, d, s, qrels = _run(20_000, seed=13)
    want = _evaluate(q, d, s, qrels)
    kinds = [pa.string(), pa.large_string()] + ([pa.string_view()] if hasattr(pa, "string_view") else [])
    for kind in kinds:
        qa, da = pa.array(q.tolist(), kind), pa.array(d.tolist(), kind)
        assert _evaluate(qa, da, s, qrels) == want, kind
        split = [0, 1, 4_000, 4_001, len(q)]  # chunks of 1 row, 3,999 rows and the rest
        chunked = [pa.chunked_array([x[a:b] for a, b in pairwise(split)]) for x in (qa, da)]
        assert _evaluate(*chunked, s, qrels) == want, kind


@pytest.mark.parametrize(
    "texts",
    [
        ["d1", "doc-22", "", "x" * 40],  # mixed widths, an empty id
        ["abcdefgh12"] * 5,  # one width
        ["a", ""],
        [""],
        [],
        ["ü-non-ascii", "d1"],  # UTF-8 bytes, wider than the characters
        ["a\x00b", "c"],  # a NUL inside an id
    ],
)
def test_qrels_doc_ids_encode_as_the_run_ids_are_stored(texts: list[str]) -> None:
    from ragaudit.metrics._docids import DocIds

    encoded = DocIds(np.array([b"any"])).encode(texts)
    assert encoded.dtype.kind == "S" and encoded.flags.writeable
    assert encoded.tolist() == [t.encode("utf-8") for t in texts]
    assert DocIds(np.array(["any"])).encode(texts).tolist() == texts  # 'U' ids: the texts themselves


def test_polars_doc_ids_are_read_in_place_and_give_the_numpy_values() -> None:
    pl = pytest.importorskip("polars")
    from ragaudit.metrics._docids import SeriesDocIds
    from ragaudit.metrics._inputs import prepare_columns, prepare_qrels

    q, d, s, qrels = _run(20_000, seed=14)
    d = d.astype(object)
    d[::97] = "a\x00b"  # a NUL inside an id is kept (numpy drops trailing NULs only)
    qrels[q[0]]["a\x00b"] = 2
    series = pl.Series(d.tolist())
    prepared, _ = prepare_columns(pl.Series(q.tolist()), series, s, prepare_qrels(qrels))
    assert isinstance(prepared.docs, SeriesDocIds)
    assert len(prepared.docs) == len(q) and prepared.docs.text(3) == d[3]
    want = _evaluate(q, d.astype(str), s, qrels)
    frame = pl.DataFrame({"qid": q.tolist(), "docid": series, "score": s})
    assert metrics.evaluate(frame, qrels, MEASURES, per_query=True, ties="pytrec_eval") == want
    # Queries not in the qrels dropped (the ids' rows move), and rank-only runs: the same as numpy.
    fewer = {k: v for i, (k, v) in enumerate(qrels.items()) if i % 3}
    assert _evaluate(frame["qid"], frame["docid"], s, fewer) == _evaluate(q, d.astype(str), s, fewer)
    ranked = metrics.evaluate_columns(frame["qid"], frame["docid"], None, qrels, MEASURES, per_query=True)
    assert ranked == metrics.evaluate_columns(q, d.astype(str), None, qrels, MEASURES, per_query=True)


def test_polars_doc_ids_judged_against_ids_ending_in_a_nul_take_the_array_path() -> None:
    pl = pytest.importorskip("polars")
    from ragaudit.metrics._docids import SeriesDocIds
    from ragaudit.metrics._inputs import prepare_columns, prepare_qrels

    q, d, s, qrels = _run(20_000, seed=15)
    d = d.astype(object)
    d[5] = "nul-ended\x00"
    qrels[q[5]]["nul-ended\x00"] = 3
    prepared, _ = prepare_columns(pl.Series(q.tolist()), pl.Series(d.tolist()), s, prepare_qrels(qrels))
    assert not isinstance(prepared.docs, SeriesDocIds)
    frame = pl.DataFrame({"qid": q.tolist(), "docid": d.tolist(), "score": s})
    # As every byte-string path reads it (numpy, Arrow, TREC files): the trailing NUL is padding.
    assert metrics.evaluate(frame, qrels, MEASURES, per_query=True, ties="pytrec_eval") == _evaluate(
        q, d.astype(object), s, qrels)
