"""Calibration against human labels: the figures equal scipy's and a reference kappa, the inputs
(real audit logs and evaluation reports), ``ragaudit calibrate``, z-scores and consistency."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

from ragaudit.cli import main
from ragaudit.errors import ConfigurationError
from ragaudit.evaluation.calibration import (
    ConfusionMatrix,
    ZScoreNormalizer,
    average_ranks,
    balanced_accuracy,
    calibrate,
    cohen_kappa,
    consistency,
    pearson,
    read_judgements,
    read_labels,
    spearman,
    verdicts_for,
)
from ragaudit.evaluation.report import EvaluationReport, RowResult
from ragaudit.judges.base import FakeJudge
from ragaudit.judges.chat import ChatRagJudge
from ragaudit.records import SCORE_NAMES, Judgement, JudgeRequest, RagTurn
from ragaudit.tracing.files import AuditLog
from tests.support.llm_server import LLMServer, judgement_json

pytestmark = pytest.mark.timeout(60)


def reference_kappa(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Cohen's kappa from its definition, for any labels (an independent reference implementation)."""
    labels = sorted(set(a) | set(b))
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    expected = sum((list(a).count(k) / n) * (list(b).count(k) / n) for k in labels)
    return (observed - expected) / (1 - expected)


def reference_balanced_accuracy(truth: Sequence[bool], predicted: Sequence[bool]) -> float:
    recalls = []
    for cls in sorted(set(truth)):
        idx = [i for i, t in enumerate(truth) if t == cls]
        recalls.append(sum(predicted[i] == cls for i in idx) / len(idx))
    return sum(recalls) / len(recalls)


def dataset(seed: int, n: int = 60) -> tuple[list[float], list[float]]:
    """Human scores on a coarse grid (many ties) and noisy judge scores that track them."""
    rng = np.random.default_rng(seed)
    human = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=n)
    judge = np.clip(human + rng.normal(0, 0.25, size=n), 0, 1).round(2)
    return [float(x) for x in human], [float(x) for x in judge]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_figures_equal_scipy_and_reference(seed: int) -> None:
    human, judge = dataset(seed)
    labels = {f"r{i}": {"faithfulness": h} for i, h in enumerate(human)}
    judged = {f"r{i}": {"faithfulness": j, "context_relevance": None, "answer_relevance": None}
              for i, j in enumerate(judge)}
    report = calibrate(labels, judged, threshold=0.6)
    [dim] = report.dimensions
    assert dim.dimension == "faithfulness" and dim.n == len(human)
    assert dim.pearson == pytest.approx(scipy.stats.pearsonr(human, judge)[0], abs=1e-12)
    assert dim.spearman == pytest.approx(scipy.stats.spearmanr(human, judge)[0], abs=1e-12)
    h_pass = [h >= 0.6 for h in human]
    j_pass = [j >= 0.6 for j in judge]
    assert dim.kappa == pytest.approx(reference_kappa(h_pass, j_pass), abs=1e-12)
    assert dim.agreement == pytest.approx(np.mean([a == b for a, b in zip(h_pass, j_pass)]))
    assert dim.balanced_accuracy == pytest.approx(reference_balanced_accuracy(h_pass, j_pass))
    c = dim.confusion
    assert c.tp == sum(h and j for h, j in zip(h_pass, j_pass))
    assert c.fn == sum(h and not j for h, j in zip(h_pass, j_pass))
    assert c.n == len(human)


def test_average_ranks_equal_scipy_rankdata() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0]
    assert list(average_ranks(values)) == pytest.approx(list(scipy.stats.rankdata(values)))


def test_small_hand_example() -> None:
    # 10 pairs: both pass 4, both fail 3, judge too lenient 2, too strict 1
    human = [True] * 4 + [False] * 3 + [False] * 2 + [True]
    judge = [True] * 4 + [False] * 3 + [True] * 2 + [False]
    matrix = ConfusionMatrix.from_pairs(human, judge)
    assert matrix.to_dict() == {"tp": 4, "fp": 2, "fn": 1, "tn": 3}
    # p_o = 0.7, p_e = 0.5*0.6 + 0.5*0.4 = 0.5 -> kappa 0.4
    assert cohen_kappa(matrix) == pytest.approx(0.4)
    assert balanced_accuracy(human, judge) == pytest.approx((4 / 5 + 3 / 5) / 2)


def test_degenerate_inputs_give_none_not_zero() -> None:
    assert cohen_kappa([True, True], [True, True]) is None
    assert cohen_kappa(ConfusionMatrix()) is None
    assert pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None
    assert spearman([1.0], [2.0]) is None
    assert balanced_accuracy(ConfusionMatrix()) is None
    report = calibrate({"a": {"faithfulness": 1.0}}, {"a": {"faithfulness": None}})
    assert report["faithfulness"].n == 0 and report["faithfulness"].unjudged == 1
    assert report["faithfulness"].verdicts == ("no labelled pairs",)


@pytest.mark.parametrize(
    ("kappa", "agreement", "expected"),
    [
        (0.2, 0.9, ("reformulate the rubric",)),
        (0.39, 0.6, ("reformulate the rubric", "refine the rubric")),
        (0.40, 0.8, ("fit for development",)),
        (0.75, 0.74, ("fit for development", "refine the rubric")),
        (0.76, 0.95, ("fit for a CI gate",)),
    ],
)
def test_verdicts(kappa: float, agreement: float, expected: tuple[str, ...]) -> None:
    assert verdicts_for(kappa, agreement) == expected


# -- inputs ---------------------------------------------------------------------------------------------


def write_lines(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_read_labels_accepts_scores_and_pass_fail(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "labels.jsonl", [
        {"id": "t1", "faithfulness": "pass", "context_relevance": 0.25, "answer_relevance": True},
        {"id": "t2", "faithfulnessScore": "FAIL", "answer_relevance": "1"},
        {"turn_id": "t3", "labels": {"faithfulness": 0, "context_relevance": "yes"}},
        {"id": 4, "faithfulness": None},
    ])
    assert read_labels(path) == {
        "t1": {"faithfulness": 1.0, "context_relevance": 0.25, "answer_relevance": 1.0},
        "t2": {"faithfulness": 0.0, "answer_relevance": 1.0},
        "t3": {"faithfulness": 0.0, "context_relevance": 1.0},
        "4": {},
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "x", "faithfulness": 4}, "line 1"),
        ({"id": "x", "faithfulness": "great"}, "pass/fail"),
        ({"faithfulness": 1}, "no id"),
    ],
)
def test_read_labels_rejects_bad_lines(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    path = write_lines(tmp_path / "labels.jsonl", [row])
    with pytest.raises(ConfigurationError, match=message):
        read_labels(path)


def test_duplicate_label_ids_are_an_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "labels.jsonl", [{"id": "a", "faithfulness": 1}, {"id": "a", "faithfulness": 0}])
    with pytest.raises(ConfigurationError, match="labelled twice"):
        read_labels(path)


def judgement(f: float | None, c: float | None = 0.5, a: float | None = 0.5, error: str | None = None) -> Judgement:
    return Judgement(faithfulness=f, context_relevance=c, answer_relevance=a, judge="chat:m", error=error)


SCORES = {"t1": 0.9, "t2": 0.2, "t3": 0.8, "t4": 0.4, "t5": 0.7, "t6": None}


def audit_log(path: Path) -> Path:
    with AuditLog(path) as log:
        for turn_id, score in SCORES.items():
            turn = RagTurn(turn_id=turn_id, query="q", answer="a")
            log.write(turn, judgement(score, error=None if score is not None else "timeout"),
                      judge_status="judged" if score is not None else "failed")
        # t2 judged again later: the last line wins
        log.write(RagTurn(turn_id="t2", query="q", answer="a"), judgement(0.3), judge_status="judged")
    return path


def report_json(path: Path) -> Path:
    rows = [RowResult(id=key, question="q", answer="a", faithfulness=value, context_relevance=0.5,
                      answer_relevance=0.5) for key, value in SCORES.items()]
    EvaluationReport.from_rows(rows, judge="chat:m").to_json(path)
    return path


def test_read_judgements_from_an_audit_log_and_a_report(tmp_path: Path) -> None:
    from_log = read_judgements(audit_log(tmp_path / "audit.jsonl"))
    from_report = read_judgements(report_json(tmp_path / "report.json"))
    assert from_log["t2"]["faithfulness"] == 0.3 and from_report["t2"]["faithfulness"] == 0.2
    assert from_log["t6"] == {"faithfulness": None, "context_relevance": 0.5, "answer_relevance": 0.5}
    assert from_report["t1"] == {"faithfulness": 0.9, "context_relevance": 0.5, "answer_relevance": 0.5}
    assert set(from_log) == set(from_report) == set(SCORES)
    # a bare JSON list of rows is a report too
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"id": "z", "faithfulness": 1.0}]))
    assert read_judgements(rows)["z"]["faithfulness"] == 1.0


def labels_file(tmp_path: Path) -> Path:
    return write_lines(tmp_path / "labels.jsonl", [
        {"id": "t1", "faithfulness": "pass", "answer_relevance": 1},
        {"id": "t2", "faithfulness": "fail", "answer_relevance": 0},
        {"id": "t3", "faithfulness": "pass", "answer_relevance": 1},
        {"id": "t4", "faithfulness": "pass", "answer_relevance": 0},
        {"id": "t5", "faithfulness": "fail", "answer_relevance": 1},
        {"id": "t6", "faithfulness": "pass"},
        {"id": "unjudged", "faithfulness": "pass"},
    ])


def test_cli_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate", str(labels_file(tmp_path)), str(audit_log(tmp_path / "audit.jsonl"))])
    out = capsys.readouterr().out
    assert code == 0
    assert "7 labelled, 6 judged, 6 matched" in out
    lines = out.splitlines()
    faith = next(line for line in lines if line.startswith("faithfulness"))
    # pairs t1..t5 (t6 unjudged): human P F P P F, judge 0.9 0.3 0.8 0.4 0.7 -> P F P F P
    # agreement 3/5; both pass 3 of 5, so chance agreement 0.6*0.6 + 0.4*0.4 = 0.52 -> kappa 0.08 / 0.48
    assert "60.0%" in faith and f" {0.08 / 0.48:.3f} " in faith
    assert "reformulate the rubric; refine the rubric" in faith
    assert any(line.startswith("answer_relevance") for line in lines)
    assert not any(line.startswith("context_relevance") for line in lines)  # no labels for it
    assert "labelled ids without a judgement: 1 (e.g. unjudged)" in out
    assert "faithfulness: labelled ids judged without this score (left out): 1" in out


def test_cli_json_on_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate", str(labels_file(tmp_path)), str(report_json(tmp_path / "report.json")),
                 "--format", "json", "--threshold", "0.75"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    faith = data["dimensions"]["faithfulness"]
    # report scores t1..t5: 0.9 0.2 0.8 0.4 0.7 at threshold 0.75 -> P F P F F against P F P P F
    assert faith["n"] == 5 and faith["unjudged"] == 1
    assert faith["confusion"] == {"tp": 2, "fp": 0, "fn": 1, "tn": 2}
    assert faith["agreement"] == pytest.approx(0.8)
    assert faith["kappa"] == pytest.approx(reference_kappa([1, 0, 1, 1, 0], [1, 0, 1, 0, 0]))
    assert faith["verdicts"] == ["fit for development"]
    assert data["threshold"] == 0.75 and data["matched"] == 6


def test_cli_reports_bad_input_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = write_lines(tmp_path / "labels.jsonl", [{"id": "nobody", "faithfulness": 1}])
    assert main(["calibrate", str(labels), str(audit_log(tmp_path / "audit.jsonl"))]) == 2
    assert "no id is in both" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "missing.jsonl"), str(labels)]) == 2
    with pytest.raises(SystemExit) as refused:  # refused where the flag is read: argparse's exit 2
        main(["calibrate", str(labels), str(labels), "--threshold", "2"])
    assert refused.value.code == 2 and "--threshold: must be a finite number in [0, 1], got '2'" in \
        capsys.readouterr().err


# -- z-scores -------------------------------------------------------------------------------------------


def test_zscores_put_strict_and_lenient_judges_on_one_scale() -> None:
    rng = np.random.default_rng(7)
    quality = rng.uniform(0, 1, size=50)
    strict = [{"faithfulness": float(0.6 * q)} for q in quality]          # never above 0.6
    lenient = [{"faithfulness": float(0.5 + 0.5 * q)} for q in quality]   # never below 0.5
    z_strict = ZScoreNormalizer.fit(strict, judge="strict")
    z_lenient = ZScoreNormalizer.fit(lenient, judge="lenient")
    assert z_strict.std["faithfulness"] == pytest.approx(np.std([r["faithfulness"] for r in strict]))
    expected = scipy.stats.zscore([r["faithfulness"] for r in strict])
    assert [z_strict.transform(r)["faithfulness"] for r in strict] == pytest.approx(list(expected))
    # the same answer quality gets the same z-score from both judges
    for s, le in zip(strict[:10], lenient[:10]):
        assert z_strict.transform(s)["faithfulness"] == pytest.approx(z_lenient.transform(le)["faithfulness"])
    # while the raw scores differ a lot
    assert abs(strict[0]["faithfulness"] - lenient[0]["faithfulness"]) > 0.2
    assert z_strict.unfitted == ("context_relevance", "answer_relevance")
    assert z_strict.transform({"faithfulness": 0.3, "context_relevance": 0.5})["context_relevance"] is None


def test_zscore_normalizer_from_judgements_and_round_trip() -> None:
    history = [judgement(0.2, 0.5), judgement(0.4, 0.5), judgement(0.6, 0.5), judgement(None, error="boom"),
               judgement(0.8, 0.5)]
    normalizer = ZScoreNormalizer.fit(history)
    assert normalizer.count["faithfulness"] == 4
    assert "context_relevance" in normalizer.unfitted  # no spread
    z = normalizer.transform(judgement(0.5))
    assert z["faithfulness"] == pytest.approx(0.0)
    assert z["context_relevance"] is None
    again = ZScoreNormalizer.from_dict(json.loads(json.dumps(normalizer.to_dict())))
    assert again.transform(judgement(0.8)) == normalizer.transform(judgement(0.8))
    with pytest.raises(ConfigurationError):
        ZScoreNormalizer.fit([{"faithfulness": 2.0}, {"faithfulness": 0.1}])


# -- consistency ----------------------------------------------------------------------------------------

REQUESTS = [JudgeRequest(query=f"q{i}", answer="a", context="c") for i in range(4)]


def test_consistency_of_a_deterministic_judge() -> None:
    judge = FakeJudge(lambda r: {"faithfulness": 0.5, "context_relevance": 0.7, "answer_relevance": 0.9})
    report = consistency(judge, REQUESTS, runs=3)
    assert judge.calls == 12
    assert all(d.change_rate == 0.0 and d.n == 4 for d in report.dimensions.values())


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as srv:
        yield srv


def test_consistency_counts_changed_scores(server: LLMServer) -> None:
    # Same inputs twice; on the second pass the judge changes its mind on q1 and q3 (faithfulness).
    seen: dict[str, int] = {}

    def rule(body: dict[str, Any]) -> str:
        question = re.search(r"<<<ragaudit:question:\w+>>>\n(q\d)\n", body["messages"][1]["content"]).group(1)  # type: ignore[union-attr]
        seen[question] = seen.get(question, 0) + 1
        if seen[question] == 2 and question in ("q1", "q3"):
            return judgement_json(0.2, 0.8, 0.7)
        return judgement_json(0.9, 0.8, 0.7, reason=question)

    server.rule = rule
    judge = ChatRagJudge("m", base_url=server.base_url, timeout_s=5.0, max_retries=0)
    try:
        report = consistency(judge, REQUESTS, runs=2)
    finally:
        judge.close()
    assert len(server.requests) == 8
    faith = report.dimensions["faithfulness"]
    assert (faith.n, faith.changed, faith.change_rate) == (4, 2, 0.5)
    assert faith.mean_change == pytest.approx(0.35) and faith.max_change == pytest.approx(0.7)
    assert report.dimensions["context_relevance"].changed == 0
    assert report.failed_runs == 0
    assert json.loads(json.dumps(report.to_dict()))["dimensions"]["faithfulness"]["changed"] == 2


def test_consistency_validates_runs() -> None:
    with pytest.raises(ConfigurationError):
        consistency(FakeJudge(lambda r: {}), REQUESTS, runs=1)


def test_every_score_name_is_calibrated_when_labelled() -> None:
    labels = {str(i): dict.fromkeys(SCORE_NAMES, float(i % 2)) for i in range(6)}
    judged = {str(i): dict.fromkeys(SCORE_NAMES, 0.9 if i % 2 else 0.1) for i in range(6)}
    report = calibrate(labels, judged)
    assert [d.dimension for d in report.dimensions] == list(SCORE_NAMES)
    assert all(d.kappa == 1.0 and d.verdicts == ("fit for a CI gate",) for d in report.dimensions)
    assert all(math.isclose(d.pearson or 0, 1.0) for d in report.dimensions)
