"""Every input form of a run (issue 31) gives what the nested-dict path and pytrec_eval give.

The forms: nested dicts, lists and tuples of ``(qid, docid, score)`` rows, numpy ``U`` and object
columns, pandas object / ``str`` (pandas 3's default) / ``string[pyarrow]`` / ``ArrowDtype``
columns, a pyarrow Table, a Polars DataFrame and Polars Series, and TREC run files (the CSV-reader
path for single-spaced files, the numpy splitter for any other spacing, with and without pyarrow,
and the line reader for what neither takes). Cases are big enough (>= 16,384 rows) that the
Python-string columns go through their pyarrow conversion, and cover tie-heavy scores, rows
spread through the run, queries missing from the qrels and from the run, duplicates, NaN scores,
ids of mixed widths and non-ASCII ids. Scores compared as pytrec_eval compares them
(``ties="pytrec_eval"``, 32-bit floats) wherever pytrec_eval is the reference.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import _runfile, _tables

pytrec_eval = pytest.importorskip("pytrec_eval")
pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

MEASURES = ["ndcg@10", "recall@10", "mrr", "map@100", "P@5", "bpref", "Rprec", "num_ret"]
TREC_NAMES = {"ndcg_cut_10", "recall_10", "recip_rank", "map_cut_100", "P_5", "bpref", "Rprec", "num_ret"}
ROWS = 24_000  # above _tables._ARROW_MIN_ROWS: Python strings take the pyarrow conversion


def _case(seed: int, spread: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, dict[str, int]]]:
    """A tie-heavy run of ~ROWS rows: ids of 1 to 40 characters (some non-ASCII), every tenth query
    without qrels, some qrels queries without rows; rows shuffled within each query, or spread."""
    rng = np.random.default_rng(seed)
    qids, docids, scores, qrels = [], [], [], {}
    q = 0
    while len(qids) < ROWS:
        qid = f"q{q}" if q % 7 else f"query-é-{q:06d}-{'x' * (q % 13)}"
        depth = int(rng.integers(1, 120))
        pool = [f"d{int(x)}" if x % 3 else f"doc-ü-{int(x):09d}{'y' * int(x % 17)}" for x in
                rng.choice(5_000, size=depth + 10, replace=False)]
        level = rng.integers(0, 4, depth).astype(float) if q % 2 else np.round(rng.random(depth), 2)
        qids += [qid] * depth
        docids += pool[:depth]
        scores += level.tolist()
        if q % 10 != 3:
            judged = rng.choice(len(pool), size=int(rng.integers(1, 8)), replace=False)
            qrels[qid] = {pool[int(j)]: int(rng.integers(0, 4)) for j in judged}
        q += 1
    qrels["only-in-qrels"] = {"d1": 1}
    # Each query's rows come in random order (pool order); spread: rows of all queries mixed.
    order = rng.permutation(len(qids)) if spread else np.arange(len(qids))
    q_arr, d_arr, s_arr = np.array(qids)[order], np.array(docids)[order], np.array(scores)[order]
    return q_arr, d_arr, s_arr, qrels


def _nested(q: np.ndarray, d: np.ndarray, s: np.ndarray) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for qid, docid, score in zip(q.tolist(), d.tolist(), s.tolist()):
        out.setdefault(qid, {})[docid] = score
    return out


def _write_trec(path: Path, q: np.ndarray, d: np.ndarray, s: np.ndarray, sep: str = " ", end: str = "\n") -> Path:
    lines = [sep.join((qid, "Q0", docid, str(i), repr(score), "tag")) for i, (qid, docid, score) in
             enumerate(zip(q.tolist(), d.tolist(), s.tolist()))]
    path.write_bytes((end.join(lines) + end).encode("utf-8"))
    return path


def _forms(q: np.ndarray, d: np.ndarray, s: np.ndarray, tmp: Path) -> dict[str, Callable[[], Any]]:
    """Each input form of the same run, built as a user would build it."""
    ql, dl, sl = q.tolist(), d.tolist(), s.tolist()
    return {
        "numpy U": lambda: (q, d, s),
        "numpy object": lambda: (q.astype(object), d.astype(object), s),
        "list of rows": lambda: list(zip(ql, dl, sl)),
        "tuple of rows": lambda: tuple(zip(ql, dl, sl)),
        "lists": lambda: (ql, dl, sl),
        "pandas object": lambda: pd.DataFrame({"qid": pd.Series(ql, dtype=object), "docid": pd.Series(dl, dtype=object),
                                               "score": sl}),
        "pandas str": lambda: pd.DataFrame({"qid": ql, "docid": dl, "score": sl}),
        "string[pyarrow]": lambda: pd.DataFrame({"qid": pd.Series(ql, dtype="string[pyarrow]"),
                                                 "docid": pd.Series(dl, dtype="string[pyarrow]"), "score": sl}),
        "ArrowDtype": lambda: pd.DataFrame({"qid": pd.Series(ql, dtype=pd.ArrowDtype(pa.string())),
                                            "docid": pd.Series(dl, dtype=pd.ArrowDtype(pa.string())), "score": sl}),
        "pandas categorical": lambda: pd.DataFrame({"qid": pd.Categorical(ql, categories=sorted(set(ql))[::-1]),
                                                    "docid": dl, "score": sl}),
        "pyarrow Table": lambda: pa.table({"qid": ql, "docid": dl, "score": sl}),
        "pyarrow chunked": lambda: pa.concat_tables(
            [pa.table({"qid": ql[:999], "docid": dl[:999], "score": sl[:999]}),
             pa.table({"qid": ql[999:], "docid": dl[999:], "score": sl[999:]})]
        ),
        "polars DataFrame": lambda: pl.DataFrame({"qid": ql, "docid": dl, "score": sl}),
        "polars Series": lambda: (pl.Series(ql), pl.Series(dl), pl.Series(sl)),
        "TREC file": lambda: metrics.read_run(_write_trec(tmp / "single.trec", q, d, s)),
        "TREC file, CRLF": lambda: metrics.read_run(_write_trec(tmp / "crlf.trec", q, d, s, end="\r\n")),
        "TREC file, tabs": lambda: metrics.read_run(_write_trec(tmp / "tabs.trec", q, d, s, sep="\t")),
        "TREC file, spaces": lambda: metrics.read_run(_write_trec(tmp / "spaces.trec", q, d, s, sep="  ")),
    }


def _evaluate(form: Any, qrels: dict[str, dict[str, int]], **kw: Any) -> dict[str, dict[str, Any]]:
    if isinstance(form, tuple) and len(form) == 3 and not isinstance(form[0], tuple):
        return metrics.evaluate_columns(*form, qrels, MEASURES, per_query=True, **kw)
    return metrics.evaluate(form, qrels, MEASURES, per_query=True, **kw)


@pytest.mark.parametrize("spread", [False, True], ids=["contiguous", "spread"])
def test_every_input_form_equals_pytrec_eval_and_the_dict_path(tmp_path: Path, spread: bool) -> None:
    q, d, s, qrels = _case(seed=1 if spread else 2, spread=spread)
    assert len(q) >= _tables._ARROW_MIN_ROWS
    run = _nested(q, d, s)
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(run)
    by_dict = metrics.evaluate(run, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    default_dict = metrics.evaluate(run, qrels, MEASURES, per_query=True)
    trec = {"ndcg@10": "ndcg_cut_10", "recall@10": "recall_10", "mrr": "recip_rank", "map@100": "map_cut_100",
            "P@5": "P_5", "bpref": "bpref", "Rprec": "Rprec", "num_ret": "num_ret"}
    assert set(by_dict) == set(reference)
    for qid, values in reference.items():
        for name, trec_name in trec.items():
            assert by_dict[qid][name] == pytest.approx(values[trec_name], abs=1e-12), (qid, name)
    for label, build in _forms(q, d, s, tmp_path).items():
        form = build()
        ours = _evaluate(form, qrels, ties="pytrec_eval")
        assert list(ours) == list(by_dict), label  # the same queries, in the run's order
        assert ours == by_dict, label  # every value of every query equal: the same arithmetic
        assert _evaluate(form, qrels) == default_dict, label  # ties="trec_eval" (doubles) too


@pytest.mark.parametrize("spread", [False, True], ids=["contiguous", "spread"])
def test_without_pyarrow_the_numpy_paths_give_the_same(monkeypatch: pytest.MonkeyPatch, spread: bool) -> None:
    q, d, s, qrels = _case(seed=6, spread=spread)
    want = metrics.evaluate(_nested(q, d, s), qrels, MEASURES, per_query=True)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    for form in ((q, d, s), (q.astype(object), d.astype(object), s), list(zip(q.tolist(), d.tolist(), s.tolist()))):
        assert _evaluate(form, qrels) == want


def test_duplicates_and_nan_scores_are_named_in_every_form(tmp_path: Path) -> None:
    q, d, s, qrels = _case(seed=3, spread=True)
    d = d.copy()
    victim = int(np.flatnonzero(q == q[100])[1])
    d[victim] = d[100]  # one doc twice in a query
    for label, build in _forms(q, d, s, tmp_path).items():
        with pytest.raises(MetricError, match="appears more than once"):
            _evaluate(build(), qrels)
        # on_duplicate="max" keeps the higher score: as if the lower row was not there.
        drop = victim if s[victim] < s[100] else 100  # equal scores: either row, the same values
        rest = np.ones(len(q), dtype=bool)
        rest[drop] = False
        want = metrics.evaluate_columns(q[rest], d[rest], s[rest], qrels, MEASURES, per_query=True)
        assert _evaluate(build(), qrels, on_duplicate="max") == want, label
    s = s.copy()
    s[200] = np.nan
    for label, build in _forms(q, d, s, tmp_path).items():
        if label.startswith("TREC"):
            with pytest.raises(MetricError, match=r"\.trec:201: score is NaN"):
                build()
        else:
            with pytest.raises(MetricError, match="is NaN"):
                _evaluate(build(), qrels)


def test_python_strings_that_are_not_all_strings_take_the_generic_path() -> None:
    # ints, bytes and None among the ids: no pyarrow conversion, the generic path reads (or names) them.
    q, d, s, qrels = _case(seed=4, spread=False)
    numbered = {qid: {docid[1:]: label for docid, label in docs.items() if docid[1:].isdigit()}
                for qid, docs in qrels.items()}
    keep = np.array([x[1:].isdigit() for x in d.tolist()])
    ints = [int(x[1:]) for x in d[keep].tolist()]
    as_text = metrics.evaluate_columns(q[keep], [str(x) for x in ints], s[keep], numbered, MEASURES, per_query=True)
    assert metrics.evaluate_columns(q[keep].tolist(), ints, s[keep], numbered, MEASURES, per_query=True) == as_text
    mixed = d.astype(object)
    mixed[5] = None
    with pytest.raises(MetricError, match="doc id at row 5 is missing"):
        metrics.evaluate_columns(q, mixed, s, qrels, MEASURES)
    missing = q.astype(object)
    missing[7] = None
    with pytest.raises(MetricError, match="missing query id"):
        metrics.evaluate_columns(missing, d, s, qrels, MEASURES)


def test_trec_files_read_alike_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CSV-reader path, the numpy splitter (with pyarrow's float parser and with numpy's) and
    the line reader read the same file to the same columns, blocks of lines included."""
    q, d, s, _ = _case(seed=5, spread=True)
    single = _write_trec(tmp_path / "run.trec", q, d, s)
    text = single.read_text(encoding="utf-8").splitlines()
    # Comments, blank lines, fields after the tag, a BOM: not single-spaced, so the numpy splitter reads it.
    messy = tmp_path / "messy.trec"
    messy.write_bytes(b"\xef\xbb\xbf# a comment\n\n" + "\n".join(
        line + (" extra fields" if i % 5 == 0 else "") + ("\n   " if i % 97 == 0 else "")
        for i, line in enumerate(text)).encode("utf-8") + b"\n")
    want = (np.char.encode(q, "utf-8"), np.char.encode(d, "utf-8"), s)

    def check(path: Path) -> None:
        run = metrics.read_run(path)
        assert run.qids.dtype.kind == "S" and run.docids.dtype.kind == "S"
        assert run.qids.tolist() == want[0].tolist() and run.docids.tolist() == want[1].tolist()
        assert np.array_equal(run.scores, want[2])

    check(single)
    check(messy)
    monkeypatch.setattr(_runfile, "_BLOCK_BYTES", 4096)  # many blocks: lines never split across two
    check(single)
    check(messy)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as without pyarrow: numpy parses the scores
    check(single)
    check(messy)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["q1 Q0 d1 1 0.5 t", "q1 Q0 d2 2"], r"bad\.trec:2: expected 'qid Q0 docid rank score tag', got 'q1 Q0 d2 2'"),
        (["# c", "q1 Q0 d1 1 0.5 t", "q1\tQ0 d2 2 x t"], r"bad\.trec:3: score 'x' is not a number"),
        (["q1 Q0 d1 1 0.5 t", "q1 0 d1 1"], r"bad\.trec:2: .*looks like a qrels file"),
        (["q1 Q0 d1 1 0.5 t", "", "q1 Q0 d2 2 nan t"], r"bad\.trec:3: score is NaN"),
    ],
)
@pytest.mark.parametrize("pyarrow", [True, False], ids=["with pyarrow", "without pyarrow"])
def test_trec_file_errors_name_the_line_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], message: str, pyarrow: bool
) -> None:
    if not pyarrow:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    path = tmp_path / "bad.trec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(MetricError, match=message):
        metrics.read_run(path)


def test_trec_files_the_splitters_leave_to_the_line_reader(tmp_path: Path) -> None:
    # A control character str.split keeps in a field, Unicode whitespace, JSON lines: the line reader.
    cases = {
        "ctrl.trec": ("q1 Q0 d\x011 1 0.5 t\n", {"q1": {"d\x011": 0.5}}),
        "nbsp.trec": ("q1 Q0 d1\u00a0x 1 0.5 t\n", None),
        "run.jsonl": ('{"qid": "q1", "docid": "d1", "score": 0.5}\n', {"q1": {"d1": 0.5}}),
    }
    for name, (content, want) in cases.items():
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        if want is None:  # str.split splits at U+00A0: six fields, the doc id is 'd1'
            assert metrics.read_run(path).to_dict() == {"q1": {"d1": 1.0}}
        else:
            assert metrics.read_run(path).to_dict() == want
