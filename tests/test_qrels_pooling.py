"""``ragaudit qrels`` (pooled judged qrels) -> ``ragaudit metrics`` round trip, and ``calibrate --grades``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragaudit import Auditor, LexicalJudge, metrics
from ragaudit.cli import main
from ragaudit.evaluation.pooling import grade_agreement, pool_qrels, qid_for
from ragaudit.records import RagTurn, RetrievedDoc

DOCS = {
    "refunds": "Any customer gets a full refund within 30 days of purchase.",
    "exchanges": "Exchanges within 45 days of purchase, for items of equal or lower value.",
    "gifts": "Gift cards are neither refundable nor exchangeable.",
}
QUESTIONS = ["How many days for a full refund of a purchase?", "Are gift cards refundable?"]


def _log(path: Path, order: dict[str, list[str]]) -> None:
    with Auditor(LexicalJudge(), mode="inline", audit_log=path) as auditor:
        for i, question in enumerate(QUESTIONS):
            docs = [RetrievedDoc(id=d, content=DOCS[d], rank=r) for r, d in enumerate(order[question], start=1)]
            auditor.submit(RagTurn(turn_id=f"{path.stem}-{i}", query=question, answer="A full refund.",
                                   documents=docs))


def test_qrels_then_metrics_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, poor = tmp_path / "good.jsonl", tmp_path / "poor.jsonl"
    _log(good, {QUESTIONS[0]: ["refunds", "exchanges"], QUESTIONS[1]: ["gifts", "refunds"]})
    _log(poor, {QUESTIONS[0]: ["gifts", "exchanges"], QUESTIONS[1]: ["exchanges", "gifts"]})
    qrels_path, runs = tmp_path / "judged.qrels", tmp_path / "runs"
    assert main(["qrels", str(good), str(poor), "-o", str(qrels_path), "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "2 questions" in out and "graded differently" in out
    qrels = metrics.read_qrels(qrels_path)
    assert set(qrels) == {qid_for(q) for q in QUESTIONS}
    assert qrels[qid_for(QUESTIONS[1])]["gifts"] == 3  # every question term in it
    scores = {}
    for name in ("good", "poor"):
        assert main(["metrics", "--run", str(runs / f"{name}.run"), "--qrels", str(qrels_path), "-m", "ndcg@2",
                     "-m", "recall@2", "--relevance-level", "2", "--format", "json"]) == 0
        scores[name] = json.loads(capsys.readouterr().out)["means"]
        expected = metrics.evaluate(metrics.read_run(runs / f"{name}.run"), qrels, ["ndcg@2", "recall@2"],
                                    relevance_level=2)
        assert scores[name]["ndcg@2"] == pytest.approx(expected["ndcg@2"])
    # pooled recall: the poor retriever misses the refund document the good one found
    assert scores["good"]["recall@2"] == 1.0 and scores["poor"]["recall@2"] < 1.0
    assert scores["good"]["ndcg@2"] > scores["poor"]["ndcg@2"]


def test_disagreeing_grades_resolve_to_lower_median_and_are_counted() -> None:
    def entry(grade: int | None) -> dict[str, object]:
        return {"query": " Refund  window? ", "documents": [{"id": "d1", "rank": 1}],
                "document_grades": [{"rank": 1, "doc_id": "d1", "grade": grade}]}

    pooled = pool_qrels({"a": [entry(3), entry(1), entry(None)], "b": [entry(2), {"query": "refund WINDOW?"}]})
    assert pooled.qrels == {qid_for("refund window?"): {"d1": 2}}  # grades 3, 1, 2 -> lower median 2
    assert (pooled.disagreements, pooled.grades_missing, pooled.turns_without_grades) == (1, 1, 1)
    assert pooled.runs["a"] == pooled.runs["b"] == {qid_for("refund window?"): ["d1"]}


def test_grade_agreement_weighted_kappa_and_confusion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    human = {"q": {"a": 3, "b": 0, "c": 2, "d": 1}}
    judged = {"q": {"a": 3, "b": 0, "c": 1, "e": 2}}
    result = grade_agreement(human, judged)
    assert (result.n, result.human_only, result.judged_only) == (3, 1, 1)
    assert result.agreement == pytest.approx(2 / 3) and result.binary_agreement == pytest.approx(2 / 3)
    assert result.confusion[2][1] == 1 and result.confusion[3][3] == 1
    # quadratic weights by hand: observed = (1/3)*1 ; expected from marginals rows {0,2,3}, cols {0,1,3}
    expected = sum((i - k) ** 2 for i in (0, 2, 3) for k in (0, 1, 3)) / 9
    assert result.weighted_kappa == pytest.approx(1 - (1 / 3) / expected)
    # and through the command line, against an audit log
    log = tmp_path / "audit.jsonl"
    _log(log, {QUESTIONS[0]: ["refunds", "exchanges"], QUESTIONS[1]: ["gifts", "refunds"]})
    human_path = tmp_path / "human.qrels"
    human_path.write_text(f"{qid_for(QUESTIONS[1])} 0 gifts 3\n{qid_for(QUESTIONS[1])} 0 refunds 0\n")
    assert main(["calibrate", "--grades", str(human_path), str(log), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n"] == 2 and got["confusion"][3][3] == 1
