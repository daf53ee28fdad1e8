"""ragaudit.metrics: names, errors, input forms, all_queries, ties, per-query shape, files, the CLI helper."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragaudit import metrics
from ragaudit.cli.metrics import render_metrics
from ragaudit.errors import MetricError
from ragaudit.metrics import Measure, parse_measure

RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.6},
    "q2": {"d5": 0.5, "d6": 0.4},
}
QRELS = {
    "q1": {"d2": 1, "d4": 2, "d9": 1},
    "q2": {"d6": 1},
}


# ---------------------------------------------------------------------------------------------
# Names


@pytest.mark.parametrize(
    ("text", "name", "cutoff"),
    [
        ("ndcg@10", "ndcg", 10),
        ("nDCG@10", "ndcg", 10),
        ("ndcg_cut_10", "ndcg", 10),
        ("ndcg", "ndcg", None),
        ("ndcg_burges@5", "ndcg_burges", 5),
        ("recall@5", "recall", 5),
        ("R@5", "recall", 5),
        ("recall_5", "recall", 5),
        ("mrr@10", "mrr", 10),
        ("RR@10", "mrr", 10),
        ("recip_rank", "mrr", None),
        ("map", "map", None),
        ("AP@100", "map", 100),
        ("map_cut_100", "map", 100),
        ("P@5", "P", 5),
        ("precision@5", "P", 5),
        ("P_5", "P", 5),
        ("f1@5", "f1", 5),
        ("hit_rate@5", "hit_rate", 5),
        ("success@5", "hit_rate", 5),
        ("Success_5", "hit_rate", 5),
        (" map@7 ", "map", 7),
    ],
)
def test_parse_measure_accepts_ir_measures_and_trec_spellings(text: str, name: str, cutoff: int | None) -> None:
    measure = parse_measure(text)
    assert measure == Measure(name, cutoff)
    assert str(measure) == (name if cutoff is None else f"{name}@{cutoff}")
    assert parse_measure(measure) is measure


@pytest.mark.parametrize("text", ["ndgc@10", "accuracy", "gm_bpref", "@5", "P_"])
def test_unknown_metric_names_it_and_lists_the_valid_ones(text: str) -> None:
    with pytest.raises(MetricError) as info:
        parse_measure(text)
    message = str(info.value)
    assert repr(text) in message
    for valid in ("ndcg", "recall", "mrr", "map", "hit_rate", "f1"):
        assert valid in message


@pytest.mark.parametrize("text", ["ndcg@0", "recall@-1", "P_0", "map_cut_-5"])
def test_zero_or_negative_cutoff_is_refused(text: str) -> None:
    with pytest.raises(MetricError, match="positive integer"):
        parse_measure(text)


def test_non_integer_cutoff_and_non_string_names_are_refused() -> None:
    with pytest.raises(MetricError, match="'ndcg@ten': cut-off 'ten' is not an integer"):
        parse_measure("ndcg@ten")
    with pytest.raises(MetricError, match="not an integer"):
        parse_measure("ndcg@10@2")
    with pytest.raises(MetricError, match="string"):
        parse_measure(10)  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="unknown metric"):
        Measure("bleu", 4)
    with pytest.raises(MetricError, match="positive integer"):
        Measure("ndcg", 0)
    assert "ndcg" in metrics.MEASURE_NAMES


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("Rprec", "Rprec"), ("R-prec", "Rprec"), ("bpref", "bpref"), ("infAP", "infAP"), ("gm_map", "gm_map"),
        ("set_map", "set_map"), ("num_rel_ret", "num_rel_ret"), ("11pt_avg", "11pt_avg"),
        ("iprec_at_recall_0.10", "iprec_at_recall@0.1"), ("iprec_at_recall..10", "iprec_at_recall@0.1"),
        ("IPrec@0.1", "iprec_at_recall@0.1"), ("iprec_at_recall@1", "iprec_at_recall@1"),
        ("relstring", "relstring"), ("relstring.20", "relstring@20"), ("relstring_20", "relstring@20"),
        ("P.5", "P@5"), ("ndcg_cut.10", "ndcg@10"), ("set_P", "P"), ("set_F", "f1"), ("set_recall", "recall"),
        ("ndcg.1=3,2=9,4=4.5", "ndcg.1=3,2=9,4=4.5"), ("ndcg@10.1=3", "ndcg@10.1=3"),
        ("11pt_avg..25,.5,.75", "11pt_avg.0.25,0.5,0.75"),
    ],
)
def test_trec_eval_measures_and_parameters_parse(text: str, canonical: str) -> None:
    measure = parse_measure(text)
    assert str(measure) == canonical
    assert parse_measure(str(measure)) == measure


def test_measure_parameters_are_checked_at_construction() -> None:
    assert Measure("ndcg", gains={1: 3, 2: 9}) == parse_measure("ndcg.1=3,2=9")
    exact = Measure("ndcg", gains={1: 0.1234567891}, cutoff=5)
    assert parse_measure(str(exact)) == exact  # the spelling reads back to the same gains
    for text, problem in [
        ("Rprec@10", "takes no cut-off"),
        ("iprec_at_recall", "needs a recall level"),
        ("iprec_at_recall@1.5", r"in \[0, 1\]"),
        ("P.5,10", "one cut-off per metric"),
        ("ndcg.1=x", "level=gain"),
        ("ndcg.-1=3", "integer >= 0"),
        ("ndcg.1=3,1=4", "once"),
        ("ndcg_burges.1=3", "no parameters"),
        ("11pt_avg.0.2,2", r"in \[0, 1\]"),
        ("map.1=3", "no parameters"),
    ]:
        with pytest.raises(MetricError, match=problem):
            parse_measure(text)
    with pytest.raises(MetricError, match="only ndcg"):
        Measure("map", gains=((1, 2.0),))
    with pytest.raises(MetricError, match="only 11pt_avg"):
        Measure("map", points=(0.5,))


def test_summaries_sum_counts_and_average_gm_map_geometrically() -> None:
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d9": 1}}
    run = {"q1": {"d1": 0.9, "d3": 0.5}, "q2": {"d8": 1.0, "d7": 0.1}}
    per = metrics.evaluate(run, qrels, ["num_ret", "num_rel", "num_rel_ret", "map", "gm_map"], per_query=True)
    assert per["q1"] == {"num_ret": 2.0, "num_rel": 2.0, "num_rel_ret": 1.0, "map": 0.5, "gm_map": 0.5}
    means = metrics.evaluate(run, qrels, ["num_ret", "num_rel", "num_rel_ret", "map", "gm_map"])
    assert means["num_ret"] == 4.0 and means["num_rel"] == 3.0 and means["num_rel_ret"] == 1.0
    assert means["map"] == 0.25
    assert means["gm_map"] == pytest.approx(math.sqrt(0.5 * 0.00001))  # AP 0 counts as 0.00001


def test_measure_is_frozen_and_hashable() -> None:
    measure = parse_measure("ndcg@10")
    with pytest.raises(AttributeError):
        measure.cutoff = 5  # type: ignore[misc]
    assert {measure: 1}[Measure("ndcg", 10)] == 1


# ---------------------------------------------------------------------------------------------
# Values and shapes


def test_hand_computed_values() -> None:
    out = metrics.evaluate(RUN, QRELS, ["P@2", "recall@4", "f1@4", "mrr@1", "mrr@2", "map", "ndcg@4", "hit_rate@1"])
    # q1 ranking d1 d2 d3 d4, relevant d2 (1), d4 (2), d9 (1, not retrieved): 3 relevant.
    # q2 ranking d5 d6, relevant d6.
    p2 = (0.5 + 0.5) / 2
    recall4 = (2 / 3 + 1) / 2
    f1 = (2 * 0.5 * (2 / 3) / (0.5 + 2 / 3) + 2 * 0.25 * 1 / 1.25) / 2  # P@4 divides by 4
    ap = ((1 / 2 + 2 / 4) / 3 + (1 / 2) / 1) / 2
    dcg1 = 1 / math.log2(3) + 2 / math.log2(5)
    idcg1 = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    ndcg = (dcg1 / idcg1 + (1 / math.log2(3)) / 1) / 2
    assert out == pytest.approx(
        {
            "P@2": p2,
            "recall@4": recall4,
            "f1@4": f1,
            "mrr@1": 0.0,
            "mrr@2": 0.5,
            "map": ap,
            "ndcg@4": ndcg,
            "hit_rate@1": 0.0,
        }
    )


def test_ndcg_burges_uses_exponential_gain() -> None:
    out = metrics.evaluate({"q": {"a": 2.0, "b": 1.0}}, {"q": {"a": 1, "b": 3}}, ["ndcg_burges@2", "ndcg@2"])
    dcg = 1 / 1 + 7 / math.log2(3)
    idcg = 7 / 1 + 1 / math.log2(3)
    assert out["ndcg_burges@2"] == pytest.approx(dcg / idcg)
    assert out["ndcg@2"] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_f1_without_cutoff_uses_the_whole_ranking() -> None:
    out = metrics.evaluate(RUN, QRELS, ["f1", "P", "recall"], per_query=True)
    assert out["q1"]["P"] == pytest.approx(2 / 4)
    assert out["q1"]["recall"] == pytest.approx(2 / 3)
    assert out["q1"]["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    zero = metrics.evaluate({"q": {"a": 1.0}}, {"q": {"b": 1}}, ["f1@3"])
    assert zero == {"f1@3": 0.0}


def test_per_query_shape_and_keys_as_given() -> None:
    out = metrics.evaluate(RUN, QRELS, ["NDCG@3", Measure("recall", 2), "P@2"], per_query=True)
    assert list(out) == ["q1", "q2"]
    for values in out.values():
        assert list(values) == ["NDCG@3", "recall@2", "P@2"]
        assert all(isinstance(v, float) for v in values.values())
    means = metrics.evaluate(RUN, QRELS, ["NDCG@3", "recall@2"])
    assert set(means) == {"NDCG@3", "recall@2"}
    single = metrics.evaluate(RUN, QRELS, "map")
    assert set(single) == {"map"}


def test_relevance_level_changes_what_counts_as_relevant_but_not_ndcg_gains() -> None:
    one = metrics.evaluate(RUN, QRELS, ["recall@4", "ndcg@4"], per_query=True)
    two = metrics.evaluate(RUN, QRELS, ["recall@4", "ndcg@4"], per_query=True, relevance_level=2)
    assert one["q1"]["recall@4"] == pytest.approx(2 / 3)
    assert two["q1"]["recall@4"] == pytest.approx(1.0)  # only d4 (label 2) is relevant at level 2
    assert two["q2"]["recall@4"] == 0.0
    assert one["q1"]["ndcg@4"] == two["q1"]["ndcg@4"]


def test_all_queries_semantics() -> None:
    qrels = {**QRELS, "q3": {"d1": 1, "d2": 0}}
    run = {**RUN, "unjudged": {"d1": 1.0}}
    default = metrics.evaluate(run, qrels, ["recall@4"], per_query=True)
    assert set(default) == {"q1", "q2"}  # q3 not in the run; "unjudged" not in the qrels
    complete = metrics.evaluate(run, qrels, ["recall@4", "num_rel", "num_ret"], per_query=True, all_queries=True)
    assert list(complete) == ["q1", "q2", "q3"]
    # trec_eval -c: an empty ranking, so 0 on every metric, but its relevant docs still count.
    assert complete["q3"] == {"recall@4": 0.0, "num_rel": 1.0, "num_ret": 0.0}
    mean_default = metrics.evaluate(run, qrels, ["recall@4"])["recall@4"]
    mean_complete = metrics.evaluate(run, qrels, ["recall@4"], all_queries=True)["recall@4"]
    assert mean_default == pytest.approx((2 / 3 + 1) / 2)
    assert mean_complete == pytest.approx((2 / 3 + 1 + 0) / 3)


def test_options_are_keyword_only() -> None:
    qrels = {**QRELS, "q3": {"d1": 1}}
    with pytest.raises(TypeError):
        # Positional options would have flipped meaning: they are keyword-only now.
        metrics.evaluate(RUN, qrels, ["map"], False, 1, False)  # type: ignore[misc]


def test_no_query_in_common() -> None:
    with pytest.raises(MetricError, match="no query of the run"):
        metrics.evaluate({"x": {"a": 1.0}}, QRELS, ["map"])
    out = metrics.evaluate({"x": {"a": 1.0}}, QRELS, ["map"], all_queries=True, per_query=True)
    assert out == {"q1": {"map": 0.0}, "q2": {"map": 0.0}}


def test_queries_are_paired_by_id_not_position() -> None:
    forward = metrics.evaluate(RUN, QRELS, ["map"], per_query=True)
    reordered_qrels = {"q2": QRELS["q2"], "q1": QRELS["q1"]}
    reordered_run = {"q2": RUN["q2"], "q1": RUN["q1"]}
    backward = metrics.evaluate(reordered_run, reordered_qrels, ["map"], per_query=True)
    assert backward["q1"] == forward["q1"] and backward["q2"] == forward["q2"]


def test_numpy_scalars_and_non_string_ids_are_accepted() -> None:
    plain = metrics.evaluate(RUN, QRELS, ["ndcg@3", "map"], per_query=True)
    numpy_run = {
        np.str_(q): {np.str_(d): np.float32(s) if i % 2 else np.float64(s) for i, (d, s) in enumerate(docs.items())}
        for q, docs in RUN.items()
    }
    numpy_qrels = {q: {d: np.int64(lab) for d, lab in docs.items()} for q, docs in QRELS.items()}
    assert metrics.evaluate(numpy_run, numpy_qrels, ["ndcg@3", "map"], per_query=True) == plain
    int_run = {1: {10: 0.5, 9: 0.5, 3: 0.1}}
    int_qrels = {"1": {"9": 1, 3: np.int32(2)}}
    out = metrics.evaluate(int_run, int_qrels, ["mrr", "P@3"], per_query=True)
    assert out == {"1": {"mrr": 1.0, "P@3": pytest.approx(2 / 3)}}  # "9" > "10" as strings
    assert metrics.evaluate(RUN, {"q1": {"d2": 1.0}}, ["P@2"]) == {"P@2": 0.5}  # integral float label
    assert metrics.evaluate(RUN, {"q1": {"d2": True, "d1": False}}, ["P@2"]) == {"P@2": 0.5}  # bools are 1/0


def test_columns_accept_lists_and_unordered_rows() -> None:
    rows = [(q, d, s) for q, docs in RUN.items() for d, s in docs.items()]
    rows = rows[::-1]
    qids, docids, scores = (list(col) for col in zip(*rows))
    expected = metrics.evaluate(RUN, QRELS, ["ndcg@3", "map", "P"], per_query=True)
    assert metrics.evaluate_columns(qids, docids, scores, QRELS, ["ndcg@3", "map", "P"], per_query=True) == expected
    run = metrics.Run(np.array(qids), np.array(docids), np.array(scores))
    assert len(run) == 6
    assert metrics.evaluate(run, QRELS, ["ndcg@3", "map", "P"], per_query=True) == expected
    assert run.to_dict() == RUN


# ---------------------------------------------------------------------------------------------
# Errors


def test_nan_score_names_query_and_doc() -> None:
    with pytest.raises(MetricError, match=r"query 'q1', doc 'd3' is NaN"):
        metrics.evaluate({"q1": {"d1": 1.0, "d3": float("nan")}}, QRELS, ["map"])
    with pytest.raises(MetricError, match=r"query 'q2', doc 'd6' is NaN"):
        metrics.evaluate_columns(["q1", "q2", "q2"], ["d1", "d5", "d6"], [1.0, 0.5, np.nan], QRELS, ["map"])


def test_rows_of_queries_not_in_the_qrels_are_ignored_entirely() -> None:
    run = {**RUN, "elsewhere": {"x": float("nan")}}
    assert metrics.evaluate(run, QRELS, ["map"]) == metrics.evaluate(RUN, QRELS, ["map"])


def test_non_numeric_score_is_refused() -> None:
    with pytest.raises(MetricError, match=r"query 'q1', doc 'd1' must be a number"):
        metrics.evaluate({"q1": {"d1": "high"}}, QRELS, ["map"])
    with pytest.raises(MetricError, match="scores must be numbers"):
        metrics.evaluate_columns(["q1"], ["d1"], ["high"], QRELS, ["map"])


def test_empty_inputs_are_refused() -> None:
    with pytest.raises(MetricError, match="run is empty"):
        metrics.evaluate({}, QRELS, ["map"])
    with pytest.raises(MetricError, match="run is empty"):
        metrics.evaluate_columns(np.array([], dtype=str), np.array([], dtype=str), np.array([]), QRELS, ["map"])
    with pytest.raises(MetricError, match="qrels are empty"):
        metrics.evaluate(RUN, {}, ["map"])
    with pytest.raises(MetricError, match="qrels are empty"):
        metrics.evaluate(RUN, {"q1": {}}, ["map"])
    with pytest.raises(MetricError, match="no metric requested"):
        metrics.evaluate(RUN, QRELS, [])


def test_bad_options_and_shapes_are_refused() -> None:
    with pytest.raises(MetricError, match="unknown metric 'ndcg10'"):
        metrics.evaluate(RUN, QRELS, ["ndcg@10", "ndcg10"])
    for level in (0, -1, 1.5, True):
        with pytest.raises(MetricError, match="relevance_level"):
            metrics.evaluate(RUN, QRELS, ["map"], relevance_level=level)  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="on_duplicate"):
        metrics.evaluate(RUN, QRELS, ["map"], on_duplicate="min")  # type: ignore[call-overload]
    with pytest.raises(MetricError, match="differ in length"):
        metrics.evaluate_columns(["q1", "q1"], ["d1"], [1.0, 2.0], QRELS, ["map"])
    with pytest.raises(MetricError, match="must be a mapping"):
        metrics.evaluate({"q1": [("d1", 1.0)]}, QRELS, ["map"])
    with pytest.raises(MetricError, match="must be a mapping"):
        metrics.evaluate(RUN, {"q1": ["d1"]}, ["map"])
    # A list of rows is a run (issue 31) -- of (qid, docid, score) rows, nothing else.
    for rows in ([("q1", "d1")], [("q1", "d1", 1.0), ("q1", "d2")], ["q1 d1 1.0"], [{"qid": "q1", "docid": "d1"}]):
        with pytest.raises(MetricError, match=r"run rows must be \(qid, docid, score\) tuples"):
            metrics.evaluate(rows, QRELS, ["map"])
    with pytest.raises(MetricError, match="must be a mapping"):
        metrics.evaluate({("q1", "d1", 1.0)}, QRELS, ["map"])  # a set: no order, no rows


@pytest.mark.parametrize("label", [1.5, "1", float("nan"), None, [1]])
def test_non_integer_labels_name_query_and_doc(label: object) -> None:
    with pytest.raises(MetricError, match=r"query 'q1', doc 'd2' must be an integer"):
        metrics.evaluate(RUN, {"q1": {"d1": 1, "d2": label}}, ["map"])


def test_duplicate_docs_in_columns_and_in_string_converted_dicts() -> None:
    with pytest.raises(MetricError, match=r"query 'q': doc id '7' appears more than once"):
        metrics.evaluate({"q": {7: 0.1, "7": 0.9}}, {"q": {"7": 1}}, ["map"])
    kept = metrics.evaluate({"q": {7: 0.1, "7": 0.9, "8": 0.5}}, {"q": {"8": 1}}, ["mrr"], on_duplicate="max")
    assert kept == {"mrr": 0.5}  # "7" kept at 0.9, so "8" is second
    with pytest.raises(MetricError, match="more than once"):
        metrics.Run(np.array(["q", "q"]), np.array(["a", "a"]), np.array([1.0, 2.0])).to_dict()
    assert metrics.Run(np.array(["q", "q"]), np.array(["a", "a"]), np.array([1.0, 2.0])).to_dict("max") == {
        "q": {"a": 2.0}
    }
    with pytest.raises(MetricError, match="differ in length"):
        metrics.Run(np.array(["q"]), np.array(["a", "b"]), np.array([1.0]))


def test_ties_trec_eval_compares_doubles_and_pytrec_eval_32_bit_floats() -> None:
    # The relevant "b" scores 1.00000001, "a" 1.00000002: apart as doubles (trec_eval >= 10.0: "a"
    # first), one 32-bit float (pytrec_eval, trec_eval <= 9.0.8: a tie, doc id descending, "b" first).
    run, qrels = {"q": {"b": 1.00000001, "a": 1.00000002}}, {"q": {"b": 1}}
    assert metrics.evaluate(run, qrels, ["recip_rank"]) == {"recip_rank": 0.5}
    assert metrics.evaluate(run, qrels, ["recip_rank"], ties="trec_eval") == {"recip_rank": 0.5}
    assert metrics.evaluate(run, qrels, ["recip_rank"], ties="pytrec_eval") == {"recip_rank": 1.0}
    columns = (["q", "q"], ["b", "a"], [1.00000001, 1.00000002])
    assert metrics.evaluate_columns(*columns, qrels, ["mrr"]) == {"mrr": 0.5}
    assert metrics.evaluate_columns(*columns, qrels, ["mrr"], ties="pytrec_eval") == {"mrr": 1.0}
    # Far enough apart to differ in single precision too: the same in both modes.
    wide = {"q": {"b": 0.5 + 1e-6, "a": 0.5}}
    for ties in ("trec_eval", "pytrec_eval"):
        assert metrics.evaluate(wide, qrels, ["mrr"], ties=ties) == {"mrr": 1.0}  # type: ignore[arg-type]
    with pytest.raises(MetricError, match=r"ties must be 'trec_eval'.*'pytrec_eval'"):
        metrics.evaluate(run, qrels, ["mrr"], ties="float32")  # type: ignore[arg-type]


def test_ties_through_the_command_line(tmp_path: Path) -> None:
    run_path = _write(tmp_path / "run.trec", ["q Q0 b 1 1.00000001 t", "q Q0 a 2 1.00000002 t"])
    qrels_path = _write(tmp_path / "qrels.txt", ["q 0 b 1"])
    assert render_metrics(run_path, qrels_path, ["recip_rank"], fmt="trec") == "recip_rank            \tall\t0.5000"
    assert render_metrics(run_path, qrels_path, ["recip_rank"], fmt="trec", ties="pytrec_eval").endswith("1.0000")


# ---------------------------------------------------------------------------------------------
# score_ranking: the per-turn function


def test_score_ranking_matches_evaluate_on_random_rankings() -> None:
    rng = np.random.default_rng(3)
    names = ["P@3", "recall@5", "f1@3", "hit_rate@2", "mrr@4", "mrr", "map@5", "map", "ndcg@3", "ndcg", "P",
             "Rprec", "bpref", "infAP", "gm_map", "set_map", "num_ret", "num_rel", "num_rel_ret",
             "iprec_at_recall@0.3", "11pt_avg", "ndcg.0=1,1=3,2=0.5", "ndcg@4.2=-1", "relstring@8"]
    for _ in range(300):
        n = int(rng.integers(0, 12))
        ranked = [f"d{int(x)}" for x in rng.choice(20, n, replace=False)]
        judged = {f"d{int(x)}": int(lab) for x, lab in zip(rng.choice(20, 6, replace=False), rng.integers(-1, 4, 6))}
        level = int(rng.integers(1, 3))
        got = metrics.score_ranking(ranked, judged, names, relevance_level=level)
        if not ranked:
            num_rel = float(sum(label >= level for label in judged.values()))
            assert got == {**dict.fromkeys(names, 0.0), "num_rel": num_rel, "relstring@8": ""}
            continue
        # The same formulas on the batch path: one ranking, all queries' code.
        run = {"q": {doc: float(n - i) for i, doc in enumerate(ranked)}}
        want = metrics.evaluate(run, {"q": judged}, names, per_query=True, relevance_level=level)["q"]
        assert got.pop("relstring@8") == want.pop("relstring@8")
        assert got == pytest.approx(want, abs=1e-12)


def test_score_ranking_keeps_first_occurrence_of_a_repeated_id() -> None:
    got = metrics.score_ranking(["a", "b", "a", "c"], {"a": 1, "c": 1}, ["P@3", "recall@3", "mrr@1"])
    assert got == {"P@3": pytest.approx(2 / 3), "recall@3": 1.0, "mrr@1": 1.0}


def test_score_ranking_errors() -> None:
    with pytest.raises(MetricError, match="unknown metric"):
        metrics.score_ranking(["a"], {"a": 1}, ["recal@3"])
    with pytest.raises(MetricError, match="must be an integer"):
        metrics.score_ranking(["a"], {"a": 0.5}, ["recall@1"])  # type: ignore[dict-item]


# ---------------------------------------------------------------------------------------------
# Files


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_trec_files_round_trip(tmp_path: Path) -> None:
    run_lines = [
        f"{q} Q0 {d} {rank} {s} mytag"
        for q, docs in RUN.items()
        for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]), 1)
    ]
    run_path = _write(tmp_path / "run.trec", ["# a comment", "", *run_lines])
    qrels_path = _write(
        tmp_path / "qrels.txt", [f"{q} 0 {d} {lab}" for q, docs in QRELS.items() for d, lab in docs.items()]
    )
    run = metrics.read_run(run_path)
    assert isinstance(run, metrics.Run)
    assert run.to_dict() == RUN
    assert metrics.read_qrels(qrels_path) == QRELS
    names = ["ndcg@3", "map", "P@2"]
    assert metrics.evaluate(run, metrics.read_qrels(qrels_path), names) == metrics.evaluate(RUN, QRELS, names)


def test_jsonl_files_round_trip(tmp_path: Path) -> None:
    run_path = _write(
        tmp_path / "run.jsonl",
        [json.dumps({"qid": q, "docid": d, "score": s}) for q, docs in RUN.items() for d, s in docs.items()],
    )
    qrels_path = _write(
        tmp_path / "qrels.jsonl",
        [
            json.dumps({"query_id": q, "doc_id": d, "relevance": lab})
            for q, docs in QRELS.items()
            for d, lab in docs.items()
        ],
    )
    assert metrics.read_run(run_path).to_dict() == RUN
    assert metrics.read_qrels(qrels_path) == QRELS
    per_query = _write(
        tmp_path / "qrels-per-query.jsonl",
        [json.dumps({"qid": "q1", "qrels": QRELS["q1"]}), json.dumps({"qid": "q2", "relevant_ids": ["d6"]})],
    )
    assert metrics.read_qrels(per_query) == QRELS


FILE_ERRORS = [
    ("run", "bad.trec", ["q1 Q0 d1 1 0.5 tag", "q1 Q0 d2 2"], r"bad\.trec:2: expected 'qid Q0 docid rank score tag'"),
    ("run", "qrels.txt", ["q1 0 d1 1"], r"qrels\.txt:1: .*looks like a qrels file"),
    ("qrels", "run.trec", ["q1 Q0 d1 1 0.5 tag"], r"run\.trec:1: .*looks like a run file"),
    ("run", "nan.trec", ["q1 Q0 d1 1 0.5 t", "q1 Q0 d2 2 nan t"], r"nan\.trec:2: score is NaN"),
    ("run", "text.trec", ["q1 Q0 d1 1 high t"], r"text\.trec:1: score 'high' is not a number"),
    ("qrels", "conflict.txt", ["q1 0 d1 1", "q1 0 d1 2"], r"conflict\.txt:2: .*judged twice"),
    ("qrels", "label.txt", ["q1 0 d1 high"], r"label\.txt:1: relevance must be an integer"),
    ("run", "bad.jsonl", ['{"qid": "q1", "docid": "d1", "score": 1}', "{oops"], r"bad\.jsonl:2: not valid JSON"),
    ("run", "q.jsonl", ['{"qid": "q1", "docid": "d1", "relevance": 1}'], r"q\.jsonl:1: .*looks like a qrels file"),
    ("run", "noscore.jsonl", ['{"qid": "q1", "docid": "d1"}'], r"noscore\.jsonl:1: no score"),
    ("qrels", "empty.txt", ["", "# nothing"], r"qrels file .*empty\.txt' is empty"),
]


@pytest.mark.parametrize(("reader", "name", "lines", "message"), FILE_ERRORS, ids=[e[1] for e in FILE_ERRORS])
def test_file_errors_name_file_and_line(tmp_path: Path, reader: str, name: str, lines: list[str], message: str) -> None:
    path = _write(tmp_path / name, lines)
    with pytest.raises(MetricError, match=message):
        (metrics.read_run if reader == "run" else metrics.read_qrels)(path)


def test_missing_file_is_a_metric_error(tmp_path: Path) -> None:
    with pytest.raises(MetricError, match="cannot read run file"):
        metrics.read_run(tmp_path / "missing.trec")


def test_duplicates_in_a_run_file_are_refused_at_evaluation(tmp_path: Path) -> None:
    run_path = _write(tmp_path / "dup.trec", ["q1 Q0 d2 1 0.9 t", "q1 Q0 d2 2 0.1 t"])
    run = metrics.read_run(run_path)
    with pytest.raises(MetricError, match="more than once"):
        metrics.evaluate(run, QRELS, ["map"])
    assert metrics.evaluate(run, QRELS, ["mrr"], on_duplicate="max") == {"mrr": 1.0}


# ---------------------------------------------------------------------------------------------
# metrics_command (what the CLI prints)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    run_lines = [f"{q} Q0 {d} 0 {s} t" for q, docs in {**RUN, "extra": {"d1": 1.0}}.items() for d, s in docs.items()]
    qrels = {**QRELS, "missing": {"d1": 1}}
    qrels_lines = [f"{q} 0 {d} {lab}" for q, docs in qrels.items() for d, lab in docs.items()]
    return _write(tmp_path / "run.trec", run_lines), _write(tmp_path / "qrels.txt", qrels_lines)


def test_metrics_command_table(files: tuple[Path, Path]) -> None:
    run_path, qrels_path = files
    text = render_metrics(run_path, qrels_path, ["ndcg@10", "recall@5"])
    lines = text.splitlines()
    assert lines[0].split() == ["query", "ndcg@10", "recall@5"]
    means = metrics.evaluate(RUN, QRELS, ["ndcg@10", "recall@5"])
    assert lines[2].split() == ["all", f"{means['ndcg@10']:.4f}", f"{means['recall@5']:.4f}"]
    assert "2 queries evaluated" in lines[-1]
    assert "1 qrels queries missing from the run" in lines[-1]
    assert "1 run queries not in the qrels" in lines[-1]
    detailed = render_metrics(run_path, qrels_path, ["ndcg@10"], per_query=True)
    assert [line.split()[0] for line in detailed.splitlines()[2:-1]] == ["q1", "q2", "all"]


def test_metrics_command_json(files: tuple[Path, Path]) -> None:
    run_path, qrels_path = files
    doc = json.loads(render_metrics(run_path, qrels_path, ["map", "P@2"], per_query=True, fmt="json"))
    assert doc["means"] == pytest.approx(metrics.evaluate(RUN, QRELS, ["map", "P@2"]))
    assert doc["queries"] == {"evaluated": 2, "run": 3, "qrels": 3, "missing_from_run": 1, "not_in_qrels": 1}
    assert set(doc["per_query"]) == {"q1", "q2"}
    assert doc["all_queries"] is False and doc["relevance_level"] == 1 and doc["ties"] == "trec_eval"
    complete = json.loads(render_metrics(run_path, qrels_path, ["map"], fmt="json", all_queries=True))
    assert complete["queries"]["evaluated"] == 3
    assert "per_query" not in complete


def test_metrics_command_errors(files: tuple[Path, Path]) -> None:
    run_path, qrels_path = files
    with pytest.raises(MetricError, match="unknown metric"):
        render_metrics(run_path, qrels_path, ["ndcg@10", "nope"])
    with pytest.raises(MetricError, match="fmt"):
        render_metrics(run_path, qrels_path, ["map"], fmt="xml")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Import cost


def test_importing_metrics_loads_no_dataframe_library_or_jit() -> None:
    code = (
        "import sys, ragaudit.metrics; "
        "print(sorted(m for m in ('pandas', 'pyarrow', 'numba', 'scipy', 'ranx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def _table_cases() -> list[tuple[str, object]]:
    pa = pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    rows = [("q1", "dé-1", 0.5), ("q1", "d2", 0.5), ("q1", "d10", 0.9), ("q2", "d9", 0.1), ("q2", "ü", 0.7),
            ("q3", "d1", 0.3)]
    qids, docids, scores = (list(col) for col in zip(*rows))
    table = pa.table({"qid": qids, "docid": docids, "score": scores})
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=2))
    dictionary = pa.table({"qid": pa.array(qids).dictionary_encode(), "docid": docids, "score": scores})
    large = pa.table({"qid": pa.array(qids, pa.large_string()), "docid": pa.array(docids, pa.large_string()),
                      "score": scores})
    shuffled = table.take([5, 0, 3, 1, 4, 2])
    frame = pd.DataFrame({"qid": qids, "docid": docids, "score": scores})
    categorical = frame.assign(qid=frame["qid"].astype("category"))
    objects = frame.astype({"qid": object, "docid": object})
    return [("arrow", table), ("arrow-chunked", chunked), ("arrow-dictionary", dictionary), ("arrow-large", large),
            ("arrow-shuffled", shuffled), ("pandas", frame), ("pandas-categorical", categorical),
            ("pandas-object", objects), ("pandas-shuffled", frame.sample(frac=1.0, random_state=1))]


def test_table_inputs_of_every_layout_match_the_dict_path() -> None:
    from ragaudit.metrics import evaluate

    run = {"q1": {"dé-1": 0.5, "d2": 0.5, "d10": 0.9}, "q2": {"d9": 0.1, "ü": 0.7}, "q3": {"d1": 0.3}}
    qrels = {"q1": {"dé-1": 1, "d2": 2}, "q2": {"ü": 1}, "q3": {"d7": 1}}
    measures = ["ndcg@2", "mrr@10", "map", "P@1", "recall@2"]
    expected = evaluate(run, qrels, measures, per_query=True)
    for name, table in _table_cases():
        assert evaluate(table, qrels, measures, per_query=True) == expected, name


# ---------------------------------------------------------------------------------------------
# numpy string columns: narrowed to bytes when ASCII, compared eight bytes at a time


def test_ascii_string_columns_are_narrowed_to_their_bytes_and_others_kept() -> None:
    from ragaudit.metrics._tables import ascii_bytes

    ids = np.array(["doc-000000001", "d", "", "doc-9"])
    narrowed = ascii_bytes(ids)
    assert narrowed.dtype == np.dtype("S13") and narrowed.tolist() == [s.encode() for s in ids.tolist()]
    swapped = ids.astype(">U13")
    assert ascii_bytes(swapped).tolist() == narrowed.tolist()
    accented = np.array(["doc-1", "dé"])
    assert ascii_bytes(accented) is accented  # not ASCII: kept as it is, never mis-encoded
    assert ascii_bytes(np.array([1, 2])).dtype.kind == "i"


@pytest.mark.parametrize("width", [1, 3, 7, 8, 9, 13, 16, 17, 40])
def test_changes_between_neighbours_match_numpy_for_every_width(width: int) -> None:
    from ragaudit.metrics._tables import changes

    rng = np.random.default_rng(width)
    # Few distinct ids (so neighbours are often equal), differing anywhere: first, middle or last
    # byte, or only in length (trailing NULs are padding, as numpy compares them).
    alphabet = np.frombuffer(b"ab\x00", dtype="S1")
    pool = rng.choice(alphabet, size=(12, width)).view(f"S{width}").ravel()
    arr = pool[rng.integers(0, len(pool), 5_000)]
    assert np.array_equal(changes(arr), arr[1:] != arr[:-1])
    assert np.array_equal(changes(arr.astype("U")), arr[1:] != arr[:-1])
    assert changes(arr[:1]).shape == (0,)


def test_numpy_columns_ascii_or_not_byte_swapped_or_not_give_the_dict_paths_values() -> None:
    from ragaudit.metrics import evaluate, evaluate_columns

    rows = [("q1", "d10", 0.5), ("q1", "d2", 0.5), ("q1", "d1", 0.5), ("q1", "x", 0.9),
            ("q2", "d9", 0.1), ("q2", "d8", 0.7), ("q3", "d1", 0.3), ("q3", "d3", 0.3)]
    qrels = {"q1": {"d2": 1, "d10": 2, "dé": 1}, "q2": {"d8": 1}, "q3": {"d3": 2}}
    measures = ["ndcg@2", "mrr@10", "map", "P@1", "recall@2"]
    qids, docids, scores = (list(col) for col in zip(*rows))
    run: dict[str, dict[str, float]] = {}
    for q, d, s in rows:
        run.setdefault(q, {})[d] = s
    expected = evaluate(run, qrels, measures, per_query=True)
    for q_arr, d_arr in [
        (np.array(qids), np.array(docids)),  # ASCII: narrowed; the qrels' "dé" stays unmatched
        (np.array(qids).astype(">U2"), np.array(docids).astype(">U3")),
        (np.array(qids), np.array([*docids[:-1], "é"])),  # one non-ASCII id keeps the column as text
    ]:
        got = evaluate_columns(q_arr, d_arr, np.array(scores), qrels, measures, per_query=True)
        if d_arr[-1] == "é":
            assert got["q1"] == expected["q1"] and got["q2"] == expected["q2"]
            assert got["q3"]["P@1"] == 0.0  # d1 (the only one left) is not judged relevant
        else:
            assert got == expected
