from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragaudit.cli import main


@pytest.fixture()
def trec_files(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 0.9 r\nq1 Q0 d2 2 0.8 r\nq2 Q0 d3 1 0.5 r\nq1 Q0 d1 3 0.1 r\n")
    qrels = tmp_path / "qrels.trec"
    qrels.write_text("q1 0 d2 1\nq2 0 d3 2\nq3 0 d9 1\n")
    return run, qrels


def test_metrics_command_table_and_json(trec_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = trec_files
    # trec_eval refuses a doc listed twice for one query; so do we, unless told to keep the best score
    assert main(["metrics", "--run", str(run), "--qrels", str(qrels), "-m", "mrr@10"]) == 2
    assert "d1" in capsys.readouterr().err
    args = ["metrics", "--run", str(run), "--qrels", str(qrels), "-m", "mrr@10", "-m", "recall@5", "--keep-duplicates"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "mrr@10" in table and "0.7500" in table
    assert main([*args, "--format", "json", "--per-query", "--all-queries"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["per_query"]["q1"]["mrr@10"] == 0.5
    assert report["means"]["mrr@10"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)  # q3 missing from the run counts 0


def test_bad_metric_name_is_a_clear_usage_error(trec_files: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = trec_files
    assert main(["metrics", "--run", str(run), "--qrels", str(qrels), "-m", "ndgc@10"]) == 2
    err = capsys.readouterr().err
    assert "unknown metric 'ndgc@10'" in err and "ndcg" in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_report_with_no_argument_reads_the_default_audit_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer's first `ragaudit report`, in the directory the app ran in, finds the default log;
    where there is none, the error says where the Auditor writes it."""
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 2
    assert "./ragaudit-audit.jsonl" in capsys.readouterr().err
    line = {"turn_id": "t1", "query": "q?", "answer": "a.", "documents": [], "faithfulness": 0.5,
            "context_relevance": 0.5, "answer_relevance": 0.5, "judge": "fake", "reason": "r",
            "usage": {"prompt_tokens": 1200, "completion_tokens": 80}}
    (tmp_path / "ragaudit-audit.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "1 turns in the log" in out
    assert "judge usage completion_tokens 80, prompt_tokens 1,200" in out  # cost control: totals in the report
