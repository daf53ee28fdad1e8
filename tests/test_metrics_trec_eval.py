"""ragaudit.metrics against pytrec_eval (trec_eval's own code), metric by metric, to 1e-9.

Every case is checked three ways: nested dicts, shuffled numpy columns (the vectorised columnar
path, rows in random order), and, where the run has ties, the dict path falling back to it.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import _blocks, _docids, _fast, _inputs, _kernel, retrieval

pytrec_eval = pytest.importorskip("pytrec_eval")

TOL = 1e-9
# pytrec_eval is trec_eval 9 inside: scores compared as 32-bit floats, so every comparison with it
# passes ties="pytrec_eval" (trec_eval 10's double comparison is checked in test_metrics_trec_eval_suite).
PYTREC_OPTIONS = retrieval._options(1, False, "error", "pytrec_eval", None, False)

# Measures that pytrec_eval names as we do.
SAME_NAME = ("Rprec", "bpref", "infAP", "gm_map", "set_map", "num_ret", "num_rel")
# Our name -> how to read it from pytrec_eval's per-query dict.
MEASURES = [
    "P@1",
    "P@5",
    "P@20",
    "P",
    "recall@5",
    "recall@100",
    "recall",
    "f1@5",
    "f1",
    "hit_rate@1",
    "hit_rate@5",
    "hit_rate",
    "mrr",
    "mrr@3",
    "mrr@10",
    "map",
    "map@5",
    "map@100",
    "ndcg",
    "ndcg@3",
    "ndcg@10",
    "ndcg_burges@5",
    *SAME_NAME,
    "num_rel_ret",
    "iprec_at_recall@0",
    "iprec_at_recall@0.1",
    "iprec_at_recall@0.3",
    "iprec_at_recall@0.5",
    "iprec_at_recall@1",
    "11pt_avg",
]
TREC_NAMES = {
    "P_1",
    "P_5",
    "P_20",
    "set_P",
    "recall_5",
    "recall_100",
    "set_recall",
    "set_F",
    "success_1",
    "success_5",
    "num_rel_ret",
    "recip_rank",
    "map",
    "map_cut_5",
    "map_cut_100",
    "ndcg",
    "ndcg_cut_3",
    "ndcg_cut_10",
    *SAME_NAME,
    "iprec_at_recall",
    "11pt_avg",
}


def _roundings_agree(point: float, num_rel: float) -> bool:
    """Whether trec_eval 10 (lround) and pytrec_eval's trec_eval 9 (+0.9, truncated) turn the recall
    point into the same number of relevant docs (0 and 1 mean the same: from the first one)."""
    x = point * num_rel
    v10 = math.floor(x) + (1 if x - math.floor(x) >= 0.5 else 0)
    return max(v10, 1) == max(int(x + 0.9), 1)


def _skipped(per_query: dict[str, float], name: str) -> bool:
    """Cells where pytrec_eval (trec_eval 9) and trec_eval 10 differ by definition, not checked here."""
    m = metrics.parse_measure(name)
    if m.name in ("iprec_at_recall", "11pt_avg") and per_query["num_ret"] == 0:
        return True  # trec_eval's 0/0 (NaN) for a query that retrieved nothing; ours is 0, as every measure's
    if m.name == "iprec_at_recall":
        return not _roundings_agree(float(m.cutoff or 0), per_query["num_rel"])
    if m.name == "11pt_avg":
        return not all(_roundings_agree(p, per_query["num_rel"]) for p in (i / 10 for i in range(11)))
    return False


def _expected(per_query: dict[str, float], name: str) -> float:
    """The trec_eval value for one of our metric names (derived where trec_eval has no cut-off)."""
    m = metrics.parse_measure(name)
    k = m.cutoff
    direct: dict[tuple[str, int | None], str] = {
        ("P", None): "set_P",
        ("recall", None): "set_recall",
        ("f1", None): "set_F",
        ("mrr", None): "recip_rank",
        ("map", None): "map",
        ("ndcg", None): "ndcg",
    }
    if m.name in ("Rprec", "bpref", "infAP", "set_map", "num_ret", "num_rel", "num_rel_ret", "11pt_avg"):
        return per_query[m.name]
    if m.name == "gm_map":  # pytrec_eval's per-query gm_map is log(max(AP, 0.00001)); ours is AP
        return per_query["map"]
    if m.name == "iprec_at_recall":
        return per_query[f"iprec_at_recall_{float(m.cutoff or 0):.2f}"]
    if (m.name, k) in direct:
        return per_query[direct[(m.name, k)]]
    if m.name == "P":
        return per_query[f"P_{k}"]
    if m.name == "recall":
        return per_query[f"recall_{k}"]
    if m.name == "f1":
        p, r = per_query[f"P_{k}"], per_query[f"recall_{k}"]
        return 2 * p * r / (p + r) if p + r else 0.0
    if m.name == "hit_rate":
        return per_query[f"success_{k}"] if k is not None else float(per_query["num_rel_ret"] > 0)
    if m.name == "mrr":
        # trec_eval's recip_rank has no cut-off: keep it when the first relevant rank is within K.
        rr = per_query["recip_rank"]
        assert k is not None
        return rr if rr > 0 and round(1 / rr) <= k else 0.0
    if m.name == "map":
        return per_query[f"map_cut_{k}"]
    if m.name == "ndcg":
        return per_query[f"ndcg_cut_{k}"]
    raise AssertionError(name)


def _burges_reference(run: dict[str, float], qrels: dict[str, int], k: int) -> float:
    """ndcg with 2^rel - 1 gains, written out plainly (trec_eval's ranking, no pytrec measure).

    trec_eval keeps scores as 32-bit floats: rank by those, ties by doc id descending.
    """
    with np.errstate(over="ignore"):
        ranked = sorted(run, key=lambda d: (float(np.float32(run[d])), d), reverse=True)[:k]
    dcg = sum((2 ** max(qrels.get(d, 0), 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted((lab for lab in qrels.values() if lab > 0), reverse=True)[:k]
    idcg = sum((2**lab - 1) / math.log2(i + 2) for i, lab in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def _columns(run: dict[str, dict[str, float]], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    random.Random(seed).shuffle(rows)
    qids, docids, scores = zip(*rows)
    return np.array(qids), np.array(docids), np.array(scores, dtype=np.float64)


def _compare(
    ours: dict[str, dict[str, float]],
    reference: dict[str, dict[str, float]],
    run: dict[str, dict[str, float]],
    qrels: dict[str, dict[str, int]],
    label: str,
) -> None:
    assert set(ours) == set(reference), f"{label}: evaluated queries differ"
    for qid, values in reference.items():
        for name in MEASURES:
            if name.startswith("ndcg_burges"):
                k = metrics.parse_measure(name).cutoff
                assert k is not None
                want = _burges_reference(run[qid], qrels[qid], k)
            elif _skipped(values, name):
                continue
            else:
                want = _expected(values, name)
            got = ours[qid][name]
            assert abs(got - want) <= TOL, f"{label}: query {qid!r} {name}: ours {got!r}, trec_eval {want!r}"


def _check_all(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], level: int = 1) -> None:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES, relevance_level=level)
    reference = evaluator.evaluate(run)
    by_dict = metrics.evaluate(run, qrels, MEASURES, per_query=True, relevance_level=level, ties="pytrec_eval")
    _compare(by_dict, reference, run, qrels, "dict input")
    nonempty = {q: docs for q, docs in run.items() if docs}
    if nonempty:
        qids, docids, scores = _columns(nonempty)
        by_columns = metrics.evaluate_columns(
            qids, docids, scores, qrels, MEASURES, per_query=True, relevance_level=level, ties="pytrec_eval")
        expected = {q: v for q, v in reference.items() if q in nonempty}
        _compare(by_columns, expected, run, qrels, "columnar input")
    # Means are plain averages of the per-query values, over the queries trec_eval evaluates.
    means = metrics.evaluate(run, qrels, MEASURES, relevance_level=level, ties="pytrec_eval")
    for name in MEASURES:
        summary = metrics.parse_measure(name).aggregate([by_dict[q][name] for q in by_dict])
        assert means[name] == pytest.approx(summary, abs=TOL)
    # gm_map's summary is the geometric mean pytrec_eval gives from its per-query logarithms.
    logs = [reference[q]["gm_map"] for q in by_dict]
    assert means["gm_map"] == pytest.approx(math.exp(sum(logs) / len(logs)), rel=1e-12)


TRICKY: dict[str, tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]] = {
    "all scores tied: doc id descending decides, d9 above d10": (
        {"q": {"d10": 1.0, "d9": 1.0, "d1": 1.0, "d100": 1.0, "d2": 1.0}},
        {"q": {"d10": 1, "d2": 2}},
    ),
    "numeric-looking ids compare as strings": (
        {"q": {"10": 0.5, "9": 0.5, "100": 0.5, "11": 0.2, "1": 0.2}},
        {"q": {"9": 1, "100": 1, "1": 3}},
    ),
    "ties inside a ranking, input order reversed": (
        {"q": {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.5, "e": 0.5, "f": 0.9}},
        {"q": {"c": 1, "e": 2, "f": 1}},
    ),
    "no relevant document in the qrels": (
        {"q": {"a": 0.3, "b": 0.2}, "r": {"a": 0.5}},
        {"q": {"a": 0, "b": -1}, "r": {"a": 1}},
    ),
    "graded and negative labels, negative retrieved first": (
        {"q": {"neg": 0.99, "a": 0.9, "b": 0.8, "c": 0.7, "zero": 0.6, "x": 0.1}},
        {"q": {"neg": -2, "a": 1, "b": 3, "c": 2, "zero": 0, "unret": 3, "unret2": -1}},
    ),
    "K beyond the list": (
        {"q": {"a": 2.0, "b": 1.0}},
        {"q": {"b": 1, "c": 1}},
    ),
    "relevant docs never retrieved": (
        {"q": {"a": 2.0, "b": 1.0, "c": 0.5}},
        {"q": {"y": 2, "z": 1}},
    ),
    "negative, zero, -0.0 and infinite scores": (
        {"q": {"a": -0.0, "b": 0.0, "c": -1.5, "d": float("inf"), "e": float("-inf"), "f": -1e300}},
        {"q": {"a": 1, "c": 2, "e": 1, "f": 1}},
    ),
    "scores one ulp apart (near-ties ranked exactly)": (
        {
            "q": {
                "a": 0.5,
                "b": float(np.nextafter(0.5, 1.0)),
                "c": float(np.nextafter(0.5, 0.0)),
                "d": 0.5,
                "e": 1e-300,
                "f": float(np.nextafter(1e-300, 1.0)),
            }
        },
        {"q": {"c": 1, "d": 2, "f": 1}},
    ),
    "unicode ids tie by code point": (
        {"q": {"dz": 1.0, "d\u00e9": 1.0, "dZ": 1.0, "d\u4e2d": 1.0, "d": 1.0}},
        {"q": {"dz": 1, "d\u4e2d": 1}},
    ),
    "queries only in the run, only in the qrels, and empty in the run": (
        {"q": {"a": 1.0, "b": 0.5}, "run-only": {"a": 1.0}, "empty": {}},
        {"q": {"b": 1}, "qrels-only": {"a": 1}, "empty": {"a": 1}},
    ),
    "one deep query among shallow ones (padding)": (
        {
            "deep": {f"d{i}": float((i * 7919) % 613) for i in range(400)},
            "shallow": {"a": 0.2, "b": 0.1},
            "one": {"x": 3.0},
        },
        {
            "deep": {f"d{i}": (i % 4) for i in range(0, 400, 13)},
            "shallow": {"b": 1},
            "one": {"x": 1, "y": 2},
        },
    ),
}


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("case", list(TRICKY), ids=list(TRICKY))
def test_tricky_cases_match_trec_eval(case: str, level: int) -> None:
    run, qrels = TRICKY[case]
    _check_all(run, qrels, level)


def test_duplicate_ids_refused_or_max_kept_as_trec_eval_would_see_them() -> None:
    qids = np.array(["q", "q", "q", "q", "r"])
    docids = np.array(["a", "b", "a", "c", "a"])
    scores = np.array([0.1, 0.5, 0.9, 0.7, 0.3])
    qrels = {"q": {"a": 1, "c": 2}, "r": {"a": 1}}
    with pytest.raises(MetricError, match=r"query 'q'.*'a'.*more than once"):
        metrics.evaluate_columns(qids, docids, scores, qrels, ["ndcg@10"], ties="pytrec_eval")
    kept = metrics.evaluate_columns(qids, docids, scores, qrels, MEASURES, per_query=True,
                                    on_duplicate="max", ties="pytrec_eval")
    deduped = {"q": {"a": 0.9, "b": 0.5, "c": 0.7}, "r": {"a": 0.3}}
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(deduped)
    _compare(kept, reference, deduped, qrels, "on_duplicate='max'")


def _random_case(seed: int, n_queries: int = 1000) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    rng = np.random.default_rng(seed)
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        depth = int(rng.integers(0, 120))
        pool = rng.choice(400, size=depth + 30, replace=False)
        docs = [f"d{int(x)}" for x in pool[:depth]]
        kind = q % 4
        if kind == 0:
            scores = rng.integers(0, 6, depth).astype(float)  # heavy ties
        elif kind == 1:
            scores = np.round(rng.normal(size=depth), 2)  # some ties, negatives
        else:
            scores = rng.random(depth)
        if q % 50 != 7:  # a few qrels-only queries
            run[qid] = dict(zip(docs, scores.tolist()))
        if q % 50 != 13:  # a few run-only queries
            judged = rng.choice(pool, size=int(rng.integers(1, 25)), replace=False)
            labels = rng.integers(-1, 4, len(judged))
            qrels[qid] = {f"d{int(d)}": int(lab) for d, lab in zip(judged, labels)}
    return run, qrels


@pytest.mark.parametrize("level", [1, 2])
def test_thousand_random_queries_match_trec_eval(level: int) -> None:
    run, qrels = _random_case(seed=20240 + level)
    _check_all(run, qrels, level)


def test_runs_written_in_rank_order_match_trec_eval() -> None:
    # Rows already in score order (as run files are written) take a path that skips sorting;
    # ties inside them must still be ordered by doc id, whatever order the file gives them.
    run, qrels = _random_case(seed=77)
    rng = random.Random(1)
    ranked: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        items = list(docs.items())
        rng.shuffle(items)
        ranked[qid] = dict(sorted(items, key=lambda item: -item[1]))
    _check_all(ranked, qrels)
    rows = [(q, d, s) for q, docs in ranked.items() for d, s in docs.items()]
    qids, docids, scores = (np.array(col) for col in zip(*rows))
    ours = metrics.evaluate_columns(qids, docids, scores.astype(float), qrels, MEASURES,
                                    per_query=True, ties="pytrec_eval")
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(ranked)
    _compare(ours, {q: v for q, v in reference.items() if ranked.get(q)}, ranked, qrels, "columns in rank order")


def test_thousand_random_queries_without_ties_take_the_dict_fast_path() -> None:
    rng = np.random.default_rng(7)
    run = {f"q{q}": {f"d{i}": float(s) for i, s in enumerate(rng.random(60))} for q in range(1000)}
    qrels = {
        f"q{q}": {f"d{int(i)}": int(rng.integers(1, 4)) for i in rng.choice(80, 6, replace=False)} for q in range(1000)
    }
    _check_all(run, qrels)


def test_result_does_not_depend_on_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    run, qrels = _random_case(seed=5, n_queries=300)
    whole = metrics.evaluate(run, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    monkeypatch.setattr(_blocks, "CHUNK_CELLS", 37)
    monkeypatch.setattr(_blocks, "COUNT_CELLS", 50)
    small = metrics.evaluate(run, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    qids, docids, scores = _columns({q: d for q, d in run.items() if d})
    small_columns = metrics.evaluate_columns(qids, docids, scores, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    for qid, values in whole.items():
        for name, value in values.items():
            assert small[qid][name] == pytest.approx(value, abs=TOL)
            if qid in small_columns:
                assert small_columns[qid][name] == pytest.approx(value, abs=TOL)


@dataclasses.dataclass(frozen=True, slots=True)
class _CollidingIds(_docids.DocIds):
    """Doc ids whose hash function maps everything to two values: collisions everywhere."""

    def hash(self, encoded: np.ndarray) -> np.ndarray:
        return _collide(_docids.hash_fixed(encoded))


class _CollidingHashed(_docids.HashedDocIds):
    """The same for doc ids hashed by the C speedups (kept in the caller's column)."""

    def hash(self, encoded: np.ndarray) -> np.ndarray:
        return _collide(_docids.hash_fixed(encoded))


def _collide(hashes: np.ndarray) -> np.ndarray:
    return (hashes & np.uint64(1)) << np.uint64(62)


def _colliding(docs: _docids.DocIds, ids: np.ndarray | None = None) -> _docids.DocIds:
    if isinstance(docs, _docids.HashedDocIds):
        hashed = docs if ids is None else _docids.hashed_docids(ids)  # new ids: hashed again
        assert hashed is not None and hashed.hashes is not None
        return _CollidingHashed(
            docs.ids, docs.rows, column=hashed.column, field=docs.field, hashes=_collide(hashed.hashes)
        )
    return _CollidingIds(docs.ids if ids is None else ids, docs.rows)


@pytest.mark.parametrize("speedups", [False, True], ids=["pure", "C speedups"])
def test_hash_collisions_are_settled_by_comparing_ids(speedups: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # With a hash that collides for half of all ids, duplicate detection and the qrels join must
    # fall back to comparing the strings and still agree with trec_eval.
    if speedups and _fast.speedups is None:
        pytest.skip("the C speedups are not built in this install")
    if not speedups:
        monkeypatch.setattr(_fast, "speedups", None)
    run, qrels = _random_case(seed=11, n_queries=200)
    nonempty = {q: d for q, d in run.items() if d}
    qids, docids, scores = _columns(nonempty)
    prepared_qrels = _inputs.prepare_qrels(qrels)
    prepared, n_run = _inputs.prepare_columns(qids, docids, scores, prepared_qrels)
    assert prepared.docs is not None
    docs = prepared.docs
    assert isinstance(docs, _docids.HashedDocIds) is speedups
    colliding = dataclasses.replace(prepared, docs=_colliding(docs))
    keys = [(name, metrics.parse_measure(name)) for name in MEASURES]
    ours = retrieval._finish(colliding, prepared_qrels, keys, PYTREC_OPTIONS, True, n_run)
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(nonempty)
    _compare(ours, reference, nonempty, qrels, "colliding hashes")  # type: ignore[arg-type]
    dup_ids = (docs.column if isinstance(docs, _docids.HashedDocIds) else docs.ids).copy()
    first = int(prepared.offsets[0])
    row_of = np.arange(len(dup_ids)) if docs.rows is None else docs.rows  # run row -> the column's row
    dup_ids[row_of[first + 1]] = dup_ids[row_of[first]]
    duplicated = dataclasses.replace(prepared, docs=_colliding(docs, dup_ids))
    with pytest.raises(MetricError, match="more than once"):
        retrieval._finish(duplicated, prepared_qrels, keys, PYTREC_OPTIONS, True, n_run)


@pytest.mark.parametrize("kind", ["object", "bytes", "int"])
def test_other_id_dtypes_match_trec_eval(kind: str) -> None:
    run, qrels = _random_case(seed=3, n_queries=150)
    if kind == "int":
        run = {q: {d[1:]: s for d, s in docs.items()} for q, docs in run.items()}
        qrels = {q: {d[1:]: lab for d, lab in docs.items()} for q, docs in qrels.items()}
    nonempty = {q: d for q, d in run.items() if d}
    qids, docids, scores = _columns(nonempty)
    converted: Any = {
        "object": lambda: docids.astype(object),
        "bytes": lambda: np.char.encode(docids, "utf-8"),
        "int": lambda: docids.astype(np.int64),
    }[kind]()
    ours = metrics.evaluate_columns(qids.astype(object), converted, scores, qrels, MEASURES,
                                    per_query=True, ties="pytrec_eval")
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(nonempty)
    _compare(ours, reference, nonempty, qrels, f"{kind} doc ids")


def test_tables_match_trec_eval() -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    run, qrels = _random_case(seed=9, n_queries=200)
    nonempty = {q: d for q, d in run.items() if d}
    qids, docids, scores = _columns(nonempty)
    frame = pd.DataFrame({"qid": qids, "docid": docids, "score": scores})
    qrels_frame = pd.DataFrame(
        [(q, d, lab) for q, docs in qrels.items() for d, lab in docs.items()], columns=["qid", "docid", "relevance"]
    )
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(nonempty)
    for run_table, qrels_table in [
        (frame, qrels),
        (frame, qrels_frame),
        (pa.Table.from_pandas(frame), pa.Table.from_pandas(qrels_frame)),
        (frame.astype({"qid": object, "docid": object}), qrels),
    ]:
        ours = metrics.evaluate(run_table, qrels_table, MEASURES, per_query=True, ties="pytrec_eval")
        _compare(ours, reference, nonempty, qrels, type(run_table).__name__)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Tie-heavy and rank-only runs, random, through every input path


def _tied_case(
    seed: int, n_queries: int = 400, tied_share: float = 0.6
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Runs as real retrievers write them: long doc ids sharing a prefix, BM25-like scores rounded
    to one decimal in *tied_share* of the queries (many ties, some of them on judged docs), rows in
    random order within each query."""
    rng = np.random.default_rng(seed)
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(n_queries):
        qid = f"query-{q:05d}"
        depth = int(rng.integers(1, 60))
        pool = rng.choice(5000, size=depth + 10, replace=False)
        docs = [f"clueweb-{int(x):07d}" for x in pool[:depth]]
        scores = rng.gamma(2.0, 3.0, depth)
        scores = np.round(scores, 1) if rng.random() < tied_share else scores
        run[qid] = dict(zip(docs, scores.tolist()))
        judged = rng.choice(pool, size=int(rng.integers(1, 12)), replace=False)
        qrels[qid] = {f"clueweb-{int(d):07d}": int(lab) for d, lab in zip(judged, rng.integers(-1, 4, len(judged)))}
    return run, qrels


def _rank_ordered(run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {q: dict(sorted(docs.items(), key=lambda item: -item[1])) for q, docs in run.items()}


def _assert_every_path_matches(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], label: str) -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(run)
    _compare(metrics.evaluate(run, qrels, MEASURES,
        per_query=True, ties="pytrec_eval"), reference, run, qrels, f"{label}, dicts")
    rows = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]  # queries contiguous, as given
    qids, docids, scores = (np.array(col) for col in zip(*rows))
    scores = scores.astype(np.float64)
    frame = pd.DataFrame({"qid": qids, "docid": docids, "score": scores})
    inputs: dict[str, Any] = {
        "numpy columns": (qids, docids, scores),
        "numpy columns, queries interleaved": _columns(run, seed=3),
        "object columns": (qids.astype(object), docids.astype(object), scores),
        "pandas": frame,
        "pyarrow": pa.Table.from_pandas(frame),
    }
    for name, given in inputs.items():
        if isinstance(given, tuple):
            ours = metrics.evaluate_columns(*given, qrels, MEASURES, per_query=True, ties="pytrec_eval")
        else:
            ours = metrics.evaluate(given, qrels, MEASURES, per_query=True, ties="pytrec_eval")
        _compare(ours, reference, run, qrels, f"{label}, {name}")


@pytest.mark.parametrize("tied_share", [0.05, 0.6, 1.0])
def test_tie_heavy_runs_match_trec_eval_on_every_input_and_row_order(tied_share: float) -> None:
    run, qrels = _tied_case(seed=int(tied_share * 100), tied_share=tied_share)
    tied_queries = sum(len(set(np.float32(list(d.values())).tolist())) < len(d) for d in run.values())
    assert tied_queries >= 0.02 * len(run)  # the data does tie
    _assert_every_path_matches(run, qrels, f"{tied_share:.0%} rounded, shuffled rows")
    _assert_every_path_matches(_rank_ordered(run), qrels, f"{tied_share:.0%} rounded, rank order")


def test_every_doc_of_a_query_tied_matches_trec_eval() -> None:
    rng = np.random.default_rng(4)
    run = {f"q{q}": {f"doc-{int(d)}": 1.0 for d in rng.choice(300, 80, replace=False)} for q in range(50)}
    qrels = {q: {d: int(rng.integers(0, 3)) for d in list(docs)[::7]} for q, docs in run.items()}
    _assert_every_path_matches(run, qrels, "all tied")


def _rank_only_case(seed: int) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    run, qrels = _tied_case(seed, n_queries=300)
    rng = random.Random(seed)
    ranked: dict[str, list[str]] = {}
    for q, docs in run.items():
        ids = list(docs)
        rng.shuffle(ids)
        ranked[q] = ids
    return ranked, qrels


def test_rank_only_runs_match_trec_eval_on_every_input() -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    ranked, qrels = _rank_only_case(seed=21)
    # trec_eval needs scores: give it -rank, so its order is the list's own.
    as_scores = {q: {d: -float(i) for i, d in enumerate(ids)} for q, ids in ranked.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(as_scores)
    _compare(metrics.evaluate(ranked, qrels, MEASURES,
        per_query=True, ties="pytrec_eval"), reference, as_scores, qrels, "lists")
    rows = [(q, d, i + 1) for q, ids in ranked.items() for i, d in enumerate(ids)]
    qids, docids, ranks = (np.array(col) for col in zip(*rows))
    by_columns = metrics.evaluate_columns(qids, docids, None, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    _compare(by_columns, reference, as_scores, qrels, "columns without scores")
    frame = pd.DataFrame({"qid": qids, "docid": docids, "rank": ranks}).sample(frac=1.0, random_state=2)
    for table in (frame, pa.Table.from_pandas(frame)):
        ours = metrics.evaluate(table, qrels, MEASURES, per_query=True, ties="pytrec_eval")
        _compare(ours, reference, as_scores, qrels, f"{type(table).__name__} with a rank column")
    # Queries interleaved: each query's rows keep their relative order, which is the ranking.
    keys = np.random.default_rng(5).random(len(qids))
    for q in ranked:
        block = np.flatnonzero(qids == q)
        keys[block] = np.sort(keys[block])
    stable = np.argsort(keys)
    interleaved = metrics.evaluate_columns(qids[stable], docids[stable], None, qrels, MEASURES,
                                           per_query=True, ties="pytrec_eval")
    _compare(interleaved, reference, as_scores, qrels, "columns without scores, interleaved")


def test_rank_only_duplicates_are_refused_or_keep_their_best_rank() -> None:
    qrels = {"q": {"a": 1, "c": 2, "e": 1}}
    with pytest.raises(MetricError, match=r"query 'q'.*'a'.*more than once"):
        metrics.evaluate({"q": ["b", "a", "c", "a"]}, qrels, ["ndcg@10"], ties="pytrec_eval")
    with pytest.raises(MetricError, match="more than once"):
        metrics.evaluate_columns(["q"] * 4, ["b", "a", "c", "a"], None, qrels, ["ndcg@10"], ties="pytrec_eval")
    deduped = {"q": {"b": -0.0, "a": -1.0, "c": -2.0, "e": -3.0}}
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(deduped)
    given = ["b", "a", "c", "a", "b", "e"]
    kept = metrics.evaluate({"q": given}, qrels, MEASURES, per_query=True, on_duplicate="max", ties="pytrec_eval")
    _compare(kept, reference, deduped, qrels, "lists, on_duplicate='max'")
    kept_columns = metrics.evaluate_columns(
        ["q"] * len(given), given, None, qrels, MEASURES, per_query=True, on_duplicate="max", ties="pytrec_eval")
    _compare(kept_columns, reference, deduped, qrels, "columns, on_duplicate='max'")


def test_every_declared_measure_is_cross_checked_here() -> None:
    # Adding a measure is one entry in measures.ENTRIES: this keeps its trec_eval check from being forgotten.
    # relstring is a string (pytrec_eval returns 0.0 for it): checked below against a plain reference.
    checked = {metrics.parse_measure(name).name for name in MEASURES} | {"relstring"}
    assert checked == set(metrics.MEASURE_NAMES)


def _relstring_reference(run: dict[str, float], qrels: dict[str, int], k: int) -> str:
    ranked = sorted(run, key=lambda d: (float(np.float32(run[d])), d), reverse=True)[:k]
    chars = []
    for d in ranked:
        label = qrels.get(d)
        chars.append("-" if label is None else "." if label < 0 else ">" if label > 9 else str(label))
    return "".join(chars)


def test_relstring_is_the_labels_of_the_top_k_as_trec_eval_prints_them() -> None:
    run, qrels = _random_case(seed=31, n_queries=300)
    qrels["q1"] = {**qrels.get("q1", {}), **{d: 12 for d in list(run.get("q1", {}))[:3]}}  # labels above 9
    for k in (10, 3, 200):
        ours = metrics.evaluate(run, qrels, [f"relstring@{k}"], per_query=True, ties="pytrec_eval")
        for qid, values in ours.items():
            assert values[f"relstring@{k}"] == _relstring_reference(run[qid], qrels[qid], k), qid
        one = metrics.score_ranking(sorted(run["q1"], key=lambda d: (run["q1"][d], d), reverse=True), qrels["q1"],
                                    [f"relstring@{k}"])
        assert one[f"relstring@{k}"] == _relstring_reference(run["q1"], qrels["q1"], k)
    with pytest.raises(MetricError, match="per_query=True"):
        metrics.evaluate(run, qrels, ["relstring"])


@pytest.mark.parametrize("level", [1, 2])
def test_judged_docs_only_matches_pytrec_evals_judged_docs_only_flag(level: int) -> None:
    run, qrels = _random_case(seed=41 + level, n_queries=400)
    names = [n for n in MEASURES if not n.startswith("ndcg_burges")]
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES, relevance_level=level,
                                               judged_docs_only_flag=True).evaluate(run)
    ours = metrics.evaluate(run, qrels, names, per_query=True, relevance_level=level, judged_docs_only=True,
                            ties="pytrec_eval")
    for qid, values in reference.items():
        for name in names:
            if not _skipped(values, name):
                want, got = _expected(values, name), ours[qid][name]
                assert abs(got - want) <= TOL, f"-J: query {qid!r} {name}: ours {got!r}, trec_eval {want!r}"
    nonempty = {q: d for q, d in run.items() if d}
    by_columns = metrics.evaluate_columns(*_columns(nonempty), qrels, names, per_query=True, relevance_level=level,
                                          judged_docs_only=True, ties="pytrec_eval")
    assert by_columns == {q: v for q, v in ours.items() if q in nonempty}


def _top(docs: dict[str, float], m: int) -> dict[str, float]:
    ranked = sorted(docs, key=lambda d: (float(np.float32(docs[d])), d), reverse=True)[:m]
    return {d: docs[d] for d in ranked}


@pytest.mark.parametrize("max_docs", [1, 7, 50])
def test_max_docs_per_query_is_pytrec_eval_on_the_truncated_run(max_docs: int) -> None:
    # trec_eval -M N ranks the whole run, then keeps the top N: pytrec_eval given those N must agree.
    run, qrels = _random_case(seed=50 + max_docs, n_queries=400)
    truncated = {q: _top(docs, max_docs) for q, docs in run.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES).evaluate(truncated)
    ours = metrics.evaluate(run, qrels, MEASURES, per_query=True, max_docs_per_query=max_docs, ties="pytrec_eval")
    _compare(ours, reference, truncated, qrels, f"-M {max_docs}")
    names = [n for n in MEASURES if not n.startswith("ndcg_burges")]
    both = metrics.evaluate(run, qrels, names, per_query=True, max_docs_per_query=max_docs, judged_docs_only=True,
                            ties="pytrec_eval")
    judged_top = pytrec_eval.RelevanceEvaluator(qrels, TREC_NAMES, judged_docs_only_flag=True).evaluate(truncated)
    for qid, values in judged_top.items():
        for name in names:
            if not _skipped(values, name):
                assert abs(both[qid][name] - _expected(values, name)) <= TOL, f"-M {max_docs} -J: {qid} {name}"


def test_custom_ndcg_gains_match_a_plain_reference() -> None:
    run, qrels = _random_case(seed=61, n_queries=300)
    table = {0: 0.5, 1: 3.0, 2: 9.0, 3: 1.0}

    def reference(docs: dict[str, float], judged: dict[str, int], k: int | None) -> float:
        ranked = sorted(docs, key=lambda d: (float(np.float32(docs[d])), d), reverse=True)[:k]
        gain = lambda label: table.get(label, float(label)) if label >= 0 else 0.0  # noqa: E731
        dcg = sum(gain(judged[d]) / math.log2(i + 2) for i, d in enumerate(ranked) if d in judged)
        ideal = sorted((g for g in map(gain, judged.values()) if g > 0), reverse=True)[:k]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        return dcg / idcg if idcg > 0 else 0.0

    spec = "ndcg." + ",".join(f"{level}={gain}" for level, gain in table.items())
    cut = "ndcg@5." + ",".join(f"{level}={gain}" for level, gain in table.items())
    ours = metrics.evaluate(run, qrels, [spec, cut], per_query=True, ties="pytrec_eval")
    for qid, values in ours.items():
        assert values[spec] == pytest.approx(reference(run[qid], qrels[qid], None), abs=TOL), qid
        assert values[cut] == pytest.approx(reference(run[qid], qrels[qid], 5), abs=TOL), qid
    # Gains of the default (label) are trec_eval's plain ndcg.
    plain = metrics.evaluate(run, qrels, ["ndcg", "ndcg.1=1,2=2"], per_query=True)
    assert all(v["ndcg"] == pytest.approx(v["ndcg.1=1,2=2"], abs=TOL) for v in plain.values())
    one = metrics.score_ranking(sorted(run["q2"], key=lambda d: -run["q2"][d]), qrels["q2"], [spec])
    assert one[spec] == pytest.approx(reference(run["q2"], qrels["q2"], None), abs=TOL)


def test_the_tie_case_in_both_modes_against_pytrec_eval() -> None:
    # 1.00000002 vs 1.00000001: one 32-bit float, so pytrec_eval ties them and "b" (doc id descending)
    # ranks first; trec_eval 10 compares doubles, so "a" does. ties= picks which one we reproduce.
    run, qrels = {"q": {"b": 1.00000001, "a": 1.00000002}}, {"q": {"b": 1}}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)["q"]["recip_rank"]
    assert theirs == 1.0
    assert metrics.evaluate(run, qrels, ["recip_rank"], ties="pytrec_eval")["recip_rank"] == theirs
    assert metrics.evaluate(run, qrels, ["recip_rank"])["recip_rank"] == 0.5


@pytest.mark.parametrize("counting", [True, False], ids=["counted", "sorted"])
def test_unsorted_rows_rank_alike_by_counting_or_by_sorting(counting: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rows out of score order are ranked by counting the cells above each judged doc (short rows)
    # or by sorting the row and searching it (long rows with many judged docs); force each way on
    # tie-heavy shuffled rows of every depth (padded blocks included) and on deep rows.
    monkeypatch.setattr(_blocks, "counting_pays", lambda docs, rows, depth: counting)
    run, qrels = _tied_case(seed=41, n_queries=300, tied_share=0.6)
    _assert_every_path_matches(run, qrels, f"counting={counting}")
    rng = np.random.default_rng(42)
    deep = {f"q{q}": {f"doc-{int(d):05d}": float(s) for d, s in zip(rng.choice(9000, 700, replace=False),
                                                                    np.round(rng.random(700), 2))}
            for q in range(12)}
    deep_qrels = {q: {d: int(rng.integers(0, 4)) for d in list(docs)[::3]} for q, docs in deep.items()}
    _assert_every_path_matches(deep, deep_qrels, f"700 deep, counting={counting}")


def test_counting_pays_on_short_rows_and_on_long_rows_with_few_judged_docs() -> None:
    assert _blocks.counting_pays(docs=5000, rows=1000, depth=100)
    assert _blocks.counting_pays(docs=1000, rows=1000, depth=1000)
    assert not _blocks.counting_pays(docs=50_000, rows=1000, depth=1000)


@pytest.mark.parametrize("width", ["one length", "several lengths"])
def test_non_ascii_ids_match_trec_eval_whatever_their_lengths(width: str) -> None:
    # Labelled ids of one length are encoded from a single join (numpy 'U' runs: UTF-32; 'S' runs:
    # ASCII only, so these take the general path); ids of several lengths always do.
    run, qrels = _tied_case(seed=43, n_queries=150)

    def rename(docid: str) -> str:
        number = int(docid.rsplit("-", 1)[1])
        return f"dôc-{number:07d}" if width == "one length" else f"dôc-{number}"

    run = {q: {rename(d): s for d, s in docs.items()} for q, docs in run.items()}
    qrels = {q: {rename(d): lab for d, lab in docs.items()} for q, docs in qrels.items()}
    _assert_every_path_matches(run, qrels, f"non-ASCII ids, {width}")


def test_entries_encoded_by_join_equal_and_hash_as_numpys_own() -> None:
    for kind in ("U", "S"):
        for ids in (["ab", "cd", "ef"], ["a", "bcd"], ["é1", "x2"], ["x"]):
            docs = _docids.DocIds(np.array(["zz", "ab"], dtype=kind))
            ours, general = _kernel._encode_entries(docs, ids), docs.encode(ids)
            assert (ours == general).all() and (docs.hash(ours) == docs.hash(general)).all(), (kind, ids)


@pytest.mark.parametrize("top_label", [3, 5000], ids=["counting sort", "sorted"])
def test_ideal_dcg_from_graded_labels_matches_trec_eval(top_label: int) -> None:
    # Few label values order the ideal ranking by a counting sort; a wide range by a sort.
    rng = np.random.default_rng(top_label)
    run = {f"q{q}": {f"d{d}": float(s) for d, s in enumerate(np.round(rng.random(40), 1))} for q in range(200)}
    qrels = {q: {f"d{int(d)}": int(rng.integers(0, top_label + 1)) for d in rng.choice(60, 15, replace=False)}
             for q in run}
    names = ["ndcg", "ndcg@5", "ndcg@10"]
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg", "ndcg_cut_5", "ndcg_cut_10"}).evaluate(run)
    ours = metrics.evaluate(run, qrels, names, per_query=True, ties="pytrec_eval")
    for qid, values in reference.items():
        for name, trec in zip(names, ("ndcg", "ndcg_cut_5", "ndcg_cut_10")):
            assert abs(ours[qid][name] - values[trec]) <= TOL, (qid, name)


def test_query_order_of_the_run_does_not_change_any_value() -> None:
    # A run with exactly the qrels' queries in their order skips remapping queries; reordered,
    # shortened or padded with qrels-only queries (-c), it must give the same values.
    run, qrels = _tied_case(seed=44, n_queries=200)
    same = metrics.evaluate(run, qrels, MEASURES, per_query=True, ties="pytrec_eval")
    backwards = metrics.evaluate(dict(reversed(run.items())), qrels, MEASURES, per_query=True, ties="pytrec_eval")
    assert backwards == same
    part = dict(list(run.items())[::2])
    padded = metrics.evaluate(part, qrels, MEASURES, per_query=True, ties="pytrec_eval", all_queries=True)
    for qid, values in padded.items():
        if qid in part:
            assert values == same[qid]
        else:
            assert values["num_rel"] == same[qid]["num_rel"] and values["map"] == 0.0


@pytest.mark.parametrize("same_depth", [True, False], ids=["one span", "padded"])
def test_rows_in_score_order_are_told_apart_wherever_their_order_breaks(same_depth: bool) -> None:
    # A row's first pairs are checked before the whole row: a row out of order only after them
    # (or only in its last pair) must still count as out of order, a short padded row as in order.
    rng = np.random.default_rng(45)
    n = 300
    lengths = np.full(n, 40) if same_depth else rng.integers(1, 60, n)
    rows, want = [], []
    for length in lengths.tolist():
        row = np.sort(np.round(rng.random(length), 1))[::-1].copy()
        if length > 1 and rng.random() < 0.5:
            at = int(rng.choice([0, length - 2, int(rng.integers(0, length - 1))]))
            row[at], row[at + 1] = row[at + 1] - 0.05, row[at]
        rows.append(row)
        want.append(bool((row[1:] <= row[:-1]).all()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    scores = np.concatenate(rows).astype(np.float32)
    block = _blocks.block_of(offsets, np.arange(n), lengths)
    assert (block.span is not None) == same_depth
    assert _blocks.descending_rows(block, scores).tolist() == want
    assert 0 < sum(want) < n


@pytest.mark.parametrize("entry_q", [[0, 0, 1, 2, 2], [2, 2, 0, 1, 1, 1], [2, 0, 2, 1, 0], [1], []],
                         ids=["run order", "grouped, other order", "scattered", "one", "none"])
def test_entries_grouped_by_query_keep_their_qrels_order(entry_q: list[int]) -> None:
    q = np.array(entry_q, dtype=np.int64)
    by_query = _kernel._by_query(q, 4)
    take, rows = by_query.of(np.arange(4))
    assert rows.tolist() == sorted(entry_q)
    assert take.tolist() == sorted(range(len(entry_q)), key=lambda i: (entry_q[i], i))
    take, rows = by_query.of(np.array([2, 0]))
    assert [entry_q[i] for i in take.tolist()] == [2] * entry_q.count(2) + [0] * entry_q.count(0)
