"""The optional C speedups (``ragaudit.metrics._speedups``, issue 31) against the pure path.

Runs given as Python objects -- (qid, docid, score) rows, lists and numpy object arrays of ids,
pandas object columns -- are read by the speedups in one pass (query ids into runs, doc ids
straight into their hashes, the ids themselves left in the caller's objects). Every case here is
evaluated twice in one process, with the speedups and with ``_fast.speedups = None``, and the two
must give the same per-query values, the same errors and the same duplicate handling; and what
the speedups decline (non-ASCII ids, a NUL, ids that are not strings, numpy scores, bad rows)
must reach the pure path, which reads or names it.

CI requires the extension to be built (``RAGAUDIT_REQUIRE_SPEEDUPS=1`` in ``.ci/run``): a build
that silently fell back to the pure wheel would otherwise pass every test here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import _docids, _fast, _groups, _inputs, _tables

MEASURES = ["ndcg@10", "recall@10", "mrr", "map@100", "P@5", "bpref", "num_ret"]
built = pytest.mark.skipif(_fast.speedups is None, reason="the C speedups are not built in this install")

Rows = list[tuple[str, str, float]]


def test_the_speedups_are_built_where_required() -> None:
    if os.environ.get("RAGAUDIT_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("RAGAUDIT_REQUIRE_SPEEDUPS is not set (CI sets it)")
    assert _fast.speedups is not None, "ragaudit.metrics._speedups did not build: is a C compiler installed?"


@pytest.fixture
def pure(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``pure(call, *args, **kwargs)``: the call made with the speedups turned off."""

    def run(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with monkeypatch.context() as m:
            m.setattr(_fast, "speedups", None)
            return call(*args, **kwargs)

    return run


Qrels = dict[str, dict[str, int]]


def _case(seed: int, rows: int = 30_000, order: str = "contiguous", width: int = 32) -> tuple[Rows, Qrels]:
    """Tie-heavy ASCII rows (what the speedups take): queries of 1-120 docs, doc ids of 1 to *width*
    characters, some queries without qrels, qrels docs not retrieved; *order*: "contiguous",
    "spread" (rows shuffled), or "split" (a query's rows in two places)."""
    rng = np.random.default_rng(seed)
    out: Rows = []
    qrels: dict[str, dict[str, int]] = {}
    q = 0
    while len(out) < rows:
        qid = f"query-{q:05d}"
        depth = int(rng.integers(1, 120))
        picked = rng.choice(5_000, depth, replace=False)
        docs = [(f"d{int(x)}-" + "x" * int(x % width))[: max(1, int(x % width))] for x in picked]
        docs = list(dict.fromkeys(docs))  # a query's doc ids distinct
        scores = np.round(rng.random(len(docs)), 1).tolist()
        out += list(zip([qid] * len(docs), docs, scores))
        if q % 7 != 3:
            judged = rng.choice(len(docs), min(len(docs), 4), replace=False)
            qrels[qid] = {docs[int(j)]: int(rng.integers(0, 4)) for j in judged}
            qrels[qid][f"never-retrieved-{q}"] = 2
        q += 1
    if order == "spread":
        out = [out[i] for i in rng.permutation(len(out)).tolist()]
    elif order == "split":
        out = out[len(out) // 3 :] + out[: len(out) // 3]
        first = out[0][0]
        out.append((first, "late-doc", 0.5))  # the first query again at the very end
    return out, qrels


def _columns(rows: Rows) -> tuple[list[str], list[str], list[float]]:
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def _forms(rows: Rows) -> Iterator[tuple[str, Callable[..., Any]]]:
    q, d, s = _columns(rows)
    qa, da = np.array(q, dtype=object), np.array(d, dtype=object)
    yield "rows", lambda qrels, **kw: metrics.evaluate(rows, qrels, MEASURES, per_query=True, **kw)
    yield "rows as lists", lambda qrels, **kw: metrics.evaluate([list(r) for r in rows], qrels, MEASURES,
                                                                per_query=True, **kw)
    yield "lists", lambda qrels, **kw: metrics.evaluate_columns(q, d, s, qrels, MEASURES, per_query=True, **kw)
    yield "tuples", lambda qrels, **kw: metrics.evaluate_columns(tuple(q), tuple(d), s, qrels, MEASURES,
                                                                 per_query=True, **kw)
    yield "object arrays", lambda qrels, **kw: metrics.evaluate_columns(qa, da, np.array(s), qrels, MEASURES,
                                                                        per_query=True, **kw)
    # A strided view: every other row of arrays twice as long.
    q2, d2 = np.repeat(qa, 2), np.repeat(da, 2)
    yield "strided object arrays", lambda qrels, **kw: metrics.evaluate_columns(
        q2[::2], d2[::2], np.array(s), qrels, MEASURES, per_query=True, **kw)
    qu, du = np.array(q), np.array(d)  # numpy U arrays
    yield "numpy U", lambda qrels, **kw: metrics.evaluate_columns(qu, du, np.array(s), qrels, MEASURES,
                                                                  per_query=True, **kw)
    yield "strided numpy U", lambda qrels, **kw: metrics.evaluate_columns(
        np.repeat(qu, 2)[::2], np.repeat(du, 2)[::2], np.array(s), qrels, MEASURES, per_query=True, **kw)
    yield "rank-only lists", lambda qrels, **kw: metrics.evaluate_columns(q, d, None, qrels, MEASURES,
                                                                          per_query=True, **kw)
    pframe = None
    try:
        import polars as pl
    except ImportError:
        pass
    else:
        try:
            pframe = pl.DataFrame({"qid": q, "docid": d, "score": s})
        except (TypeError, OverflowError, pl.exceptions.PolarsError):
            pframe = None  # ids of mixed types: Polars refuses them itself
    if pframe is not None:
        yield "Polars", lambda qrels, **kw: metrics.evaluate(pframe, qrels, MEASURES, per_query=True, **kw)
        # Several chunks, and a slice (an offset into the views).
        chunked = pl.concat([pframe[: len(q) // 2], pframe[len(q) // 2 :]], rechunk=False)
        yield "Polars chunked", lambda qrels, **kw: metrics.evaluate(chunked, qrels, MEASURES, per_query=True, **kw)
        sliced = pl.concat([pframe[:1], pframe])[1:]
        yield "Polars sliced", lambda qrels, **kw: metrics.evaluate(sliced, qrels, MEASURES, per_query=True, **kw)
    try:
        import pandas as pd
    except ImportError:
        return
    frame = pd.DataFrame({"qid": pd.Series(q, dtype=object), "docid": pd.Series(d, dtype=object), "score": s})
    yield "pandas object", lambda qrels, **kw: metrics.evaluate(frame, qrels, MEASURES, per_query=True, **kw)
    try:
        import pyarrow as pa
    except ImportError:
        return
    # Arrow strings: spread ids are grouped from their offsets (string and large_string, chunks, an
    # offset into the buffers). Ids of other types: pandas and pyarrow refuse them themselves.
    try:
        strings = pd.DataFrame({"qid": pd.Series(q, dtype="string[pyarrow]"), "docid": d, "score": s})
        half = len(q) // 2
        table = pa.table({"qid": pa.chunked_array([q[:half], q[half:]], pa.large_string()), "docid": d, "score": s})
        sliced_table = pa.table({"qid": pa.array(["x", *q])[1:], "docid": d, "score": s})
    except (TypeError, ValueError, pa.ArrowException):
        return
    yield "pandas string[pyarrow]", lambda qrels, **kw: metrics.evaluate(strings, qrels, MEASURES, per_query=True,
                                                                         **kw)
    yield "pyarrow chunked large_string", lambda qrels, **kw: metrics.evaluate(table, qrels, MEASURES,
                                                                               per_query=True, **kw)
    yield "pyarrow sliced", lambda qrels, **kw: metrics.evaluate(sliced_table, qrels, MEASURES, per_query=True, **kw)


@built
@pytest.mark.parametrize("order", ["contiguous", "spread", "split"])
@pytest.mark.parametrize("ties", ["pytrec_eval", "trec_eval"])
def test_every_object_form_equals_the_pure_path(order: str, ties: str, pure: Callable[..., Any]) -> None:
    rows, qrels = _case(seed={"contiguous": 1, "spread": 2, "split": 3}[order], order=order)
    dicts = metrics.evaluate({q: dict(docs) for q, docs in _grouped(rows).items()}, qrels, MEASURES,
                             per_query=True, ties=ties)
    for name, evaluate in _forms(rows):
        got = evaluate(qrels, ties=ties)
        assert got == pure(evaluate, qrels, ties=ties), name
        if not name.startswith("rank-only"):
            assert got == dicts, name


def _grouped(rows: Rows) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for q, d, s in rows:
        out.setdefault(q, []).append((d, s))
    return out


@built
def test_the_speedups_read_what_they_say(pure: Callable[..., Any]) -> None:
    """The speedups' own outputs: doc-id hashes equal the pure hash of the same ids as bytes, query
    ids come as their runs (numpy 'U' and 'S' alike), and each function takes the forms it says."""
    rows, _ = _case(seed=4, rows=5_000, width=600)
    native = _fast.speedups
    assert native is not None
    q, d, _ = _columns(rows)
    short = [x for x in d if len(x) <= 512]
    want = pure(_docids.hash_fixed, np.array([x.encode() for x in short]))
    # 'S' rows, any bytes (the NUL padding adds nothing), hashed in C as numpy hashes them.
    for encoded in (np.array([x.encode() for x in short]), np.array([x.encode() for x in short], dtype="S9"),
                    np.array(["\u00e9a".encode(), b"a\x00b", b"", b"x" * 100])):
        assert np.array_equal(_docids.hash_fixed(encoded), pure(_docids.hash_fixed, encoded))
    assert native.hash_rows(np.zeros(2, dtype="S513"), 513, _docids.WEIGHTS) is None  # over 512 bytes
    as_array = np.array(short, dtype=object)
    for values in (short, tuple(short), as_array, np.repeat(as_array, 2)[::2]):
        got = _docids.string_hashes(values)
        assert got is not None and got.dtype == np.uint64 and np.array_equal(got, want)
    for width in (None, "U7", "U600"):  # ids cut to 7 units (shorter than a word), or padded far out
        u = np.array(short, dtype=width)
        u_hashes = _docids._ucs4_hashes(u)
        want_u = pure(_docids.hash_fixed, np.array([x.encode() for x in u.tolist()]))
        assert (u_hashes is None) is (width == "U600") and (u_hashes is None or np.array_equal(u_hashes, want_u))
    for runs in (_tables.object_runs(q), _tables.array_runs(np.array(q)), _tables.array_runs(np.array(q, "S"))):
        assert isinstance(runs, _tables.QidRuns) and runs.qids == list(dict.fromkeys(q))
        assert int(runs.lengths.sum()) == len(q)
    pl = pytest.importorskip("polars")
    series = pl.Series(short)
    kept = _docids.hashed_docids(series)
    assert isinstance(kept, _docids.HashedDocIds) and kept.views is not None  # read in place
    assert kept.hashes is not None and np.array_equal(kept.hashes, want)
    assert kept.at(np.array([5, 1])).tolist() == [short[5].encode(), short[1].encode()] and kept.text(2) == short[2]
    # Arrow strings (pyarrow, pandas' Arrow-backed strings): hashed through their offsets, in place;
    # gathered by Arrow's take. Chunks, a slice, 64-bit offsets alike; nulls and non-ASCII declined.
    pa = pytest.importorskip("pyarrow")
    for arrow in (pa.array(short), pa.array(short, pa.large_string()), pa.chunked_array([short[:9], short[9:]]),
                  pa.array(["skip", *short])[1:]):
        held = _docids.hashed_docids(arrow)
        assert isinstance(held, _docids.HashedDocIds) and held.chunks is not None
        assert np.array_equal(held.column_hashes(), want)
        assert held.at(np.array([5, 1])).tolist() == [short[5].encode(), short[1].encode()] and held.text(2) == short[2]
        assert held.take(np.array([4, 0])).at(1) == short[0].encode()
    assert _docids.hashed_docids(pa.array(["a", None, "b"])) is None
    assert _docids.hashed_docids(pa.array(["a", "\u00e9", "b"])) is None
    pd = pytest.importorskip("pandas")
    held = _docids.hashed_docids(pd.Series(short, dtype="string[pyarrow]"))
    assert held is not None and held.chunks is not None and np.array_equal(held.column_hashes(), want)
    chunks = _groups.arrow_chunks(pa.chunked_array([short[:9], short[9:]]))
    assert chunks is not None
    with pytest.raises(IndexError):
        native.gather_offsets(chunks, np.array([len(short)], dtype=np.intp))
    bad = [(np.array([0, 2, 99], dtype=np.int32), b"d1", 0, 2, False)]  # an offset past the data
    assert native.gather_offsets(bad, np.array([1], dtype=np.intp)) is None
    assert native.hash_offsets(bad, _docids.WEIGHTS) is None
    polars_runs = _tables._polars_runs(pl.Series(q), "qids", 1 << 14)
    assert polars_runs is not None and polars_runs.qids == list(dict.fromkeys(q))
    assert np.array_equal(polars_runs.lengths, runs.lengths)
    fast_rows = [r for r in rows if len(r[1]) <= 512]
    read = _inputs._native_rows(fast_rows)
    assert read is not None
    qids, docids, scores = read
    assert isinstance(qids, _tables.QidRuns) and isinstance(docids, _docids.HashedDocIds)
    assert np.array_equal(scores, [r[2] for r in fast_rows])
    assert np.array_equal(docids.row_hashes(), pure(_docids.hash_fixed, np.array([r[1].encode() for r in fast_rows])))
    assert docids.text(3) == fast_rows[3][1]
    assert docids.at(np.array([3, 0])).tolist() == [fast_rows[3][1].encode(), fast_rows[0][1].encode()]
    # Empty inputs, and inputs of no form the speedups know.
    assert native.hash_strings([], _docids.WEIGHTS) == bytearray()
    assert native.hash_strings(np.array([1.5, 2.5]), _docids.WEIGHTS) is None
    assert native.hash_strings(iter(short), _docids.WEIGHTS) is None
    assert native.string_runs({"a": 1}) is None
    with pytest.raises(ValueError, match="weights"):
        native.hash_strings(short, b"short")


@built
@pytest.mark.parametrize(
    "bad",
    [
        ("doc id not ASCII", lambda q, d, s: (q, "dóc-1", s)),
        ("doc id with a NUL", lambda q, d, s: (q, "doc\x00x", s)),
        ("doc id of 600 characters", lambda q, d, s: (q, "d" * 600, s)),
        ("integer doc id", lambda q, d, s: (q, 123, s)),
        ("a str subclass", lambda q, d, s: (q, type("Id", (str,), {})(d + "-sub"), s)),
        ("integer query id", lambda q, d, s: (7, d, s)),
        ("numpy score", lambda q, d, s: (q, d, np.float32(s))),
        ("bool score", lambda q, d, s: (q, d, True)),
        ("integer score", lambda q, d, s: (q, d, 3)),
        ("huge integer score", lambda q, d, s: (q, d, 10**400)),
    ],
    ids=lambda bad: bad[0] if isinstance(bad, tuple) else str(bad),
)
def test_what_the_speedups_decline_reaches_the_pure_path(bad: Any, pure: Callable[..., Any]) -> None:
    """One odd row near the end: the speedups read every row before it, then decline (or, for an
    int score, take it); the answer, or the error, is the pure path's."""
    rows, qrels = _case(seed=5, rows=20_000)
    at = len(rows) - 5
    odd = [*rows[:at], bad[1](*rows[at]), *rows[at + 1 :]]
    for name, evaluate in _forms(odd):
        if name not in ("rows", "rows as lists") and "score" in bad[0]:
            continue  # scores of columns are one numpy array either way
        try:
            want: Any = pure(evaluate, qrels)
        except (MetricError, OverflowError) as exc:
            with pytest.raises(type(exc), match=_escaped(str(exc))):
                evaluate(qrels)
        else:
            assert evaluate(qrels) == want, name


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


@built
def test_duplicates_are_named_or_the_best_kept_as_by_the_pure_path(pure: Callable[..., Any]) -> None:
    rows, qrels = _case(seed=6)
    q, d, s = next(row for row in rows[200:] if row[0] in qrels)  # an evaluated query
    twice = [*rows[:5000], (q, d, s - 1.0), *rows[5000:]]
    twice_spread = [twice[i] for i in np.random.default_rng(6).permutation(len(twice)).tolist()]
    for run in (twice, twice_spread):
        for name, evaluate in _forms(run):
            if name.startswith("rank-only"):
                continue  # rank-only: each row's rank is its position, a repeat just drops
            with pytest.raises(MetricError, match=f"query '{q}': doc id '{d}' appears more than once"):
                evaluate(qrels)
            assert evaluate(qrels, on_duplicate="max") == pure(evaluate, qrels, on_duplicate="max"), name


@built
def test_a_nan_score_and_a_missing_query_are_named(pure: Callable[..., Any]) -> None:
    rows, qrels = _case(seed=7, rows=20_000)
    q, d, _ = rows[-3]
    with pytest.raises(MetricError, match=f"score for query '{q}', doc '{d}' is NaN"):
        metrics.evaluate([*rows[:-3], (q, d, float("nan")), *rows[-2:]], qrels, MEASURES)
    qs, ds, ss = _columns(rows)
    qs[-3] = None  # type: ignore[call-overload]
    with pytest.raises(MetricError, match="missing query id"):
        metrics.evaluate_columns(np.array(qs, dtype=object), np.array(ds, dtype=object), ss, qrels, MEASURES)


def _first_appearance(ids: list[Any]) -> tuple[list[int], list[int], list[int]]:
    """The pure reference of ``_speedups.group_*``: each row's code (codes in order of first
    appearance), the rows of each code, each code's first row."""
    code_of: dict[Any, int] = {}
    codes, sizes, firsts = [], [], []
    for i, value in enumerate(ids):
        code = code_of.setdefault(value, len(code_of))
        if code == len(sizes):
            sizes.append(0)
            firsts.append(i)
        sizes[code] += 1
        codes.append(code)
    return codes, sizes, firsts


def _as_lists(found: Any) -> tuple[list[int], list[int], list[int]]:
    codes, sizes, firsts = found
    return (np.frombuffer(codes, dtype=np.uint32).tolist(), np.frombuffer(sizes, dtype=np.int64).tolist(),
            np.frombuffer(firsts, dtype=np.int64).tolist())


@built
def test_spread_query_ids_are_grouped_exactly_from_every_source() -> None:
    """``group_strings`` / ``group_fixed`` / ``group_offsets`` / ``group_views`` code every row as
    the pure reference does: ids that share bytes but not their kind, NULs, empty and long ids, a
    table grown many times (every id new); and ``grouped_rows`` puts rows and columns in numpy's
    stable order."""
    native = _fast.speedups
    assert native is not None
    rng = np.random.default_rng(8)
    # "\u0161b" is stored as the 2-byte units 61 01 62 00: the bytes of the 1-byte string "a\x01b\x00".
    base = ["ab", "a\x00b\x00", "\u0161b", "a\x01b\x00", "ab\U0001f600", "", "a" * 700, "x\x00", "x"]
    base += [f"q{i}" for i in range(300)]
    ids = [base[i] for i in rng.integers(0, len(base), 20_000).tolist()]
    assert _as_lists(native.group_strings(ids)) == _first_appearance(ids)
    strided = np.repeat(np.array(ids, dtype=object), 2)[::2]
    assert _as_lists(native.group_strings(strided)) == _first_appearance(ids)
    rows = [(q, f"d{i}", 0.5) if i % 2 else [0.5, q] for i, q in enumerate(ids)]  # tuples and lists, read in place
    assert _as_lists(native.group_strings([(r[0],) if isinstance(r, tuple) else r[::-1] for r in rows], 0)) == \
        _first_appearance(ids)
    assert _as_lists(native.group_strings([r if isinstance(r, tuple) else r[::-1] for r in rows], 0)) == \
        _first_appearance(ids)
    distinct = [f"id-{i}" for i in rng.permutation(70_000).tolist()]  # every row a new code: the table grows
    assert _as_lists(native.group_strings(distinct)) == _first_appearance(distinct)
    ascii = [x for x in ids if x.isascii() and "\x00" not in x]
    for dtype in ("U", "S"):
        arr = np.array(ascii, dtype=dtype)
        assert _as_lists(native.group_fixed(arr, arr.itemsize)) == _first_appearance(arr.tolist())
    pa = pytest.importorskip("pyarrow")
    for arrow in (pa.array(ids), pa.array(ids, pa.large_string()), pa.chunked_array([ids[:7], ids[7:]]),
                  pa.array(["skip", *ids])[1:]):
        chunks = [(c.buffers()[1], c.buffers()[2] or b"", c.offset, len(c), pa.types.is_large_string(c.type))
                  for c in getattr(arrow, "chunks", [arrow])]
        assert _as_lists(native.group_offsets(chunks)) == _first_appearance(ids)
    pl = pytest.importorskip("polars")
    series = pl.Series(ids)  # views of 12 bytes or fewer inline, longer ones in the data buffers
    views = _tables.polars_views(series)
    assert views is not None
    assert _as_lists(native.group_views(*views)) == _first_appearance(ids)
    # grouped_rows: one scatter for few groups (309 here), the two-pass radix sort for many (70,000
    # ids each repeated, in first-appearance order, so a part of the codes holds whole groups);
    # both give numpy's stable order.
    many = [f"q{i}" for i in rng.integers(0, 70_000, 300_000).tolist()]
    for column in (ids, many, ids[:1], ["a", "b"] * 3):
        codes, sizes, _ = native.group_strings(column)
        scores, hashes = rng.random(len(column)), rng.integers(0, 2**63, len(column), dtype=np.uint64)
        moved = [np.empty(len(column), dtype=np.int64), np.empty_like(scores), np.empty_like(hashes)]
        assert native.grouped_rows(codes, sizes, [scores, hashes], moved) is None
        stable = np.argsort(np.frombuffer(codes, dtype=np.uint32), kind="stable")
        assert np.array_equal(moved[0], stable)
        assert np.array_equal(moved[1], scores[stable]) and np.array_equal(moved[2], hashes[stable])


@built
def test_the_grouping_declines_what_it_cannot_read_and_checks_its_arguments() -> None:
    native = _fast.speedups
    assert native is not None
    assert native.group_strings(["q1", "q2", 3]) is None  # not a str: the pure path names it
    assert native.group_strings(["q1", type("Id", (str,), {})("q2")]) is None
    assert native.group_strings({"q1": 1}) is None
    assert native.group_strings([("q1", "d"), ("q2",)], 1) is None  # a row too short
    assert native.group_strings([("q1", "d"), "q2d"], 0) is None  # not a tuple or list
    assert native.group_strings([("q1", "d"), (2, "d")], 0) is None  # not a str
    with pytest.raises(ValueError, match="field"):
        native.group_strings([("q1",)], -2)
    offsets = np.array([0, 2, 4, 99], dtype=np.int32)  # the last id past its data
    assert native.group_offsets([(offsets, b"q1q2", 0, 3, False)]) is None
    with pytest.raises(ValueError, match="offsets"):
        native.group_offsets([(offsets, b"q1q2", 2, 3, False)])
    view = np.zeros(4, dtype=np.int32)
    view[:] = [20, 0, 0, 0]  # 20 bytes in data buffer 0, which holds none
    assert native.group_views(view.tobytes(), 0, 1, [b""]) is None
    codes, sizes, _ = native.group_strings(["a", "b", "a"])
    rows = [np.empty(3, dtype=np.int64)]
    with pytest.raises(ValueError, match="add up"):
        native.grouped_rows(codes, np.array([1, 1], dtype=np.int64), [], rows)
    with pytest.raises(ValueError, match="below"):
        native.grouped_rows(np.array([0, 5, 0], dtype=np.uint32), sizes, [], rows)
    with pytest.raises(ValueError, match="8-byte"):
        native.grouped_rows(codes, sizes, [np.zeros(3, dtype=np.float32)], rows * 2)
    with pytest.raises(ValueError, match="one output more"):
        native.grouped_rows(codes, sizes, [np.zeros(3)], rows)
    with pytest.raises(ValueError, match="output must hold"):
        native.grouped_rows(codes, sizes, [], [np.empty(2, dtype=np.int64)])
    with pytest.raises(BufferError):
        native.grouped_rows(codes, sizes, [], [b"\0" * 24])  # not writable
    # Without the speedups (or for columns of other widths) QidGroups orders rows alike, by numpy.
    groups = _groups.string_groups(["b", "a", "b", "c", "a"])
    assert groups is not None and groups.qids == ["b", "a", "c"] and groups.lengths.tolist() == [2, 2, 1]
    narrow = np.array([1.5, 2.5, 3.5, 4.5, 5.5], dtype=np.float32)
    assert [x.tolist() for x in groups.grouped([narrow])] == [[0, 2, 1, 4, 3], [1.5, 3.5, 2.5, 5.5, 4.5]]


@built
def test_the_scores_of_nested_dicts_are_read_in_order_or_declined(pure: Callable[..., Any]) -> None:
    """``dict_scores`` gives what ``np.fromiter`` over the dicts' values gives -- across dicts of 0
    to 120 items, past its read-ahead ring, on a run built from spread rows (its score objects
    spread through the heap) -- and declines what the pure path reads or names."""
    from itertools import chain

    native = _fast.speedups
    assert native is not None
    rows, qrels = _case(seed=6, rows=20_000, order="spread")
    run: dict[str, dict[str, Any]] = {}
    for q, d, s in rows:
        run.setdefault(q, {})[d] = s
    dicts = [{}, *run.values(), {}, {"one": 2**60 + 1}]  # an int beyond 2**53: rounded as float() rounds
    n = sum(map(len, dicts))
    want = np.fromiter(chain.from_iterable(d.values() for d in dicts), dtype=np.float64, count=n)
    got = native.dict_scores(dicts, n)
    assert got is not None and np.array_equal(np.frombuffer(got, dtype=np.float64), want)
    for short in ([{"a": 1.5}], [{"a": 1.5, "b": 0.5}, {"c": 2.0}]):  # fewer items than the ring holds
        assert np.frombuffer(native.dict_scores(short, 3 if len(short) > 1 else 1)).tolist() == list(
            chain.from_iterable(d.values() for d in short))
    assert native.dict_scores([], 0) == bytearray() and native.dict_scores([{}], 0) == bytearray()
    from collections import OrderedDict

    for odd in (True, np.float64(0.5), 10**400, "0.5", None):
        assert native.dict_scores([{"a": 1.0}, {"b": odd}], 2) is None, odd
    assert native.dict_scores([{"a": 1.0}, OrderedDict(b=2.0)], 2) is None  # not an exact dict
    assert native.dict_scores([{"a": 1.0}, {"b": 2.0}], 1) is None  # more items than n
    assert native.dict_scores([{"a": 1.0}, {"b": 2.0}], 3) is None  # fewer
    with pytest.raises(ValueError, match="n must be"):
        native.dict_scores([{}], -1)
    with pytest.raises(TypeError):
        native.dict_scores(({"a": 1.0},), 1)
    # End to end: a run of dicts with the speedups equals the pure path, and so do the declined scores.
    assert metrics.evaluate(run, qrels, MEASURES, per_query=True) == pure(
        metrics.evaluate, run, qrels, MEASURES, per_query=True)
    last = next(reversed(run))
    for odd in (np.float32(0.25), True, 3, 10**400, "high"):
        bad = {**run, last: {**run[last], "odd-doc": odd}}
        try:
            expected: Any = pure(metrics.evaluate, bad, qrels, MEASURES, per_query=True)
        except (MetricError, OverflowError) as exc:
            with pytest.raises(type(exc), match=_escaped(str(exc))):
                metrics.evaluate(bad, qrels, MEASURES, per_query=True)
        else:
            assert metrics.evaluate(bad, qrels, MEASURES, per_query=True) == expected, odd


@built
def test_the_ranking_kernel_gives_every_candidate_and_checks_every_index() -> None:
    """``rank_columns`` by hand: hashes chosen to collide, so that what it returns is candidates
    -- equal hashes in one query, rows whose hash is a labelled doc's, rows tied with those --
    never a verdict (the ids are compared in Python); and each index it follows is checked first."""
    native = _fast.speedups
    assert native is not None

    def i64(*values: int) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    offsets = i64(0, 4, 4, 7)  # query 0: rows 0-3; query 1: none; query 2: rows 4-6
    hashes = np.array([7, 9, 7, 5, 9, 9, 3], dtype=np.uint64)
    scores = np.array([0.5, 0.9, 0.5, 0.5, 0.1, 0.2, 0.3], dtype=np.float32)
    entry_hash = np.array([7, 9, 4, 3], dtype=np.uint64)  # labelled docs; entry 2 is retrieved nowhere
    first, count, order = i64(0, 2, 2), i64(2, 0, 2), i64(0, 2, 1, 3)  # q0: entries 0, 2; q2: 1, 3
    out = [np.frombuffer(c, dtype=np.int64).tolist() for c in
           native.rank_columns(offsets, hashes, scores, first, count, order, entry_hash)]
    hit_q, hit_row, hit_entry, greater, tie_hit, tie_row, dup_a, dup_b = out
    hits = sorted(zip(hit_q, hit_row, hit_entry, greater))
    # Entry 0 (hash 7) at rows 0 and 2 of query 0, one row above each; entry 1 (hash 9) at rows 4
    # and 5 of query 2 (not row 1: another query); entry 3 at row 6, first.
    assert hits == [(0, 0, 0, 1), (0, 2, 0, 1), (2, 4, 1, 2), (2, 5, 1, 1), (2, 6, 3, 0)]
    ties = sorted((hit_row[h], r) for h, r in zip(tie_hit, tie_row))  # rows 0, 2 and 3 score 0.5
    assert ties == [(0, 2), (0, 3), (2, 0), (2, 3)]
    assert sorted(zip(dup_a, dup_b)) == [(0, 2), (4, 5)]
    rank_only = native.rank_columns(offsets, hashes, None, first, count, order, entry_hash)
    assert sorted(np.frombuffer(rank_only[3], dtype=np.int64).tolist()) == [0, 0, 1, 2, 2]  # positions
    assert np.frombuffer(rank_only[4], dtype=np.int64).size == 0  # no scores, no ties
    args = [offsets, hashes, scores, first, count, order, entry_hash]
    for at, bad, message in [
        (0, i64(0, 4, 4, 8), "from 0 to the number of rows"),
        (0, i64(0, 5, 4, 7), "must not decrease"),
        (0, np.zeros(0, dtype=np.int64), "offsets has the wrong length"),
        (1, hashes[:6], "one a row"),  # fewer hashes than scores
        (2, scores.astype(np.float16), "float32 or float64"),
        (2, scores[:6], "float32 or float64"),
        (3, i64(0, 2), "first has the wrong length"),
        (4, i64(2, 0, 3), "within order"),
        (3, i64(-1, 2, 2), "within order"),
        (5, i64(0, 2, 9, 3), "out of range"),
        (6, np.zeros(3, dtype=np.int32), "entry_hash has the wrong length"),
    ]:
        with pytest.raises(ValueError, match=message):
            native.rank_columns(*args[:at], bad, *args[at + 1:])
    assert np.frombuffer(native.empty(24), dtype=np.int64).size == 3 and len(native.empty(0)) == 0
    with pytest.raises(ValueError, match="nbytes"):
        native.empty(-1)
