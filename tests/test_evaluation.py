"""ragaudit.evaluation: dataset runs, None-aware aggregates, diagnosis, outputs, the CI gate, the CLI."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from ragaudit import ConfigurationError, FakeJudge, JudgeRequest
from ragaudit.cli import main
from ragaudit.cli.eval import parse_fail_under
from ragaudit.evaluation import (
    DIAGNOSES,
    EvaluationReport,
    RowResult,
    assert_rag_quality,
    diagnose,
    evaluate_pipeline,
    load_dataset,
    report_from_audit_log,
    summarize,
)
from tests.support.audit_logs import write_audit_log

pytestmark = pytest.mark.timeout(120)

# --- a small real LangChain pipeline ---------------------------------------------------------------

TOPICS = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel"]
DOCS = [Document(id=f"d-{t}", page_content=f"The {t} orchard opens at {i + 6} am.", metadata={"source": f"{t}.md"})
        for i, t in enumerate(TOPICS)]


class KeywordRetriever(BaseRetriever):
    """Returns the documents sharing most words with the query (ties by id), k at most."""

    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        words = set(re.findall(r"[a-z]+", query.lower()))

        def overlap(doc: Document) -> int:
            return len(words & set(re.findall(r"[a-z]+", doc.page_content.lower())))

        ranked = sorted(DOCS, key=lambda d: (-overlap(d), d.id or ""))
        return ranked[: self.k]


def _generate(inputs: dict[str, Any]) -> str:
    question: str = inputs["question"]
    if "explode" in question:
        raise ValueError("generator exploded")
    first = inputs["docs"][0]
    return f"{first.page_content} [1]"


def build_keyword_chain() -> Runnable[Any, str]:
    """A zero-argument factory (used by the CLI test as --pipeline tests.test_evaluation:build_keyword_chain)."""
    return {"docs": KeywordRetriever(), "question": RunnablePassthrough()} | RunnableLambda(_generate)


def _low_faithfulness(request: JudgeRequest) -> dict[str, Any]:
    return {"faithfulness": 0.2, "context_relevance": 0.9, "answer_relevance": 0.9, "reason": "made up"}


low_faithfulness_judge = FakeJudge(_low_faithfulness, name="low-faith")


def _dataset(n: int = 4) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "question": f"When does the {t} orchard open?", "relevant_ids": [f"d-{t}"]}
            for i, t in enumerate(TOPICS[:n])]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGAUDIT_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    yield


def row(id_: str = "r", *, f: float | None = None, c: float | None = None, a: float | None = None,
        metrics: dict[str, float] | None = None, diagnosis: str = "unknown", **kw: Any) -> RowResult:
    return RowResult(id=id_, question="q", answer="a", faithfulness=f, context_relevance=c, answer_relevance=a,
                     retrieval_metrics=metrics or {}, has_ground_truth=bool(metrics),
                     diagnosis=diagnosis, **kw)  # type: ignore[arg-type]


# --- aggregates ------------------------------------------------------------------------------------


def test_summarize_skips_none_and_counts_it() -> None:
    s = summarize("faithfulness", [1.0, None, 0.5, None])
    assert (s.mean, s.n, s.missing, s.min, s.max) == (0.75, 2, 2, 0.5, 1.0)
    empty = summarize("x", [None, None])
    assert (empty.mean, empty.n, empty.missing) == (None, 0, 2)
    with pytest.raises(ConfigurationError, match="NaN"):
        summarize("x", [math.nan])


def test_report_aggregates_are_none_aware() -> None:
    rows = [row("a", f=1.0, c=0.8, a=None, metrics={"recall@5": 1.0}),
            row("b", f=None, c=0.4, a=None, metrics={"recall@5": 0.5}),
            row("c", f=0.5, c=None, a=0.3),
            row("d", error="RuntimeError: boom", diagnosis="error")]
    report = EvaluationReport.from_rows(rows, judge="j", metrics=["recall@5"])
    f, c, a, r = (report.aggregate[n] for n in ("faithfulness", "context_relevance", "answer_relevance",
                                                  "recall@5"))
    assert (f.mean, f.n, f.missing) == (0.75, 2, 2)  # 0.5 if the two None rows counted as 0
    assert (c.mean, c.n, c.missing) == (pytest.approx(0.6), 2, 2)
    assert (a.mean, a.n, a.missing) == (0.3, 1, 3)
    assert (r.mean, r.n, r.missing) == (0.75, 2, 2)
    assert report.errors == 1 and report.rows_without_ground_truth == 2
    assert report.distributions["faithfulness"] == (0, 0, 0, 0, 0, 1, 0, 0, 0, 1)
    assert sum(report.distributions["answer_relevance"]) == 1
    assert report.diagnosis_counts["error"] == 1 and report.diagnosis_shares["error"] == 0.25
    assert set(report.diagnosis_counts) == set(DIAGNOSES)


def test_row_result_rejects_bad_values() -> None:
    with pytest.raises(ConfigurationError, match="faithfulness must be a float in"):
        row(f=1.5)
    with pytest.raises(ConfigurationError, match="recall@5"):
        row(metrics={"recall@5": math.nan})
    with pytest.raises(ConfigurationError, match="diagnosis"):
        row(diagnosis="fine")


def test_usage_totals_and_metrics_found_in_rows() -> None:
    rows = [row("a", usage={"prompt_tokens": 10, "completion_tokens": 2, "calls": 1}, metrics={"P@5": 0.2}),
            row("b", usage={"prompt_tokens": 5, "calls": 1})]
    report = EvaluationReport.from_rows(rows, judge="j")
    assert dict(report.usage) == {"prompt_tokens": 15, "completion_tokens": 2, "calls": 2}
    assert report.metrics == ("P@5",) and report.aggregate["P@5"].n == 1


# --- diagnosis ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("signals", "expected"), [
    ({"recall": 1.0, "faithfulness": 0.2, "answer_relevance": 0.9}, "generation"),
    ({"context_relevance": 0.8, "faithfulness": 0.1}, "generation"),
    ({"recall": 0.0, "context_relevance": 0.2, "faithfulness": 0.1}, "retrieval"),
    ({"recall": 0.0, "faithfulness": 1.0, "answer_relevance": 1.0}, "retrieval"),
    ({"recall": 0.0, "context_relevance": 0.9, "faithfulness": 1.0, "answer_relevance": 1.0}, "ok"),
    ({"recall": 1.0, "faithfulness": 0.9, "answer_relevance": 0.1}, "prompt/question"),
    ({"faithfulness": 0.9, "answer_relevance": 0.1}, "prompt/question"),
    ({"recall": 1.0, "context_relevance": 0.7, "faithfulness": 0.9, "answer_relevance": 0.8}, "ok"),
    ({"recall": 1.0, "faithfulness": 0.9}, "unknown"),           # answer relevance missing
    ({"faithfulness": 0.1, "answer_relevance": 0.1}, "unknown"),  # no retrieval signal
    ({}, "unknown"),
    ({"recall": 1.0, "faithfulness": 1.0, "answer_relevance": 1.0, "error": "boom"}, "error"),
])
def test_diagnosis_rules(signals: dict[str, Any], expected: str) -> None:
    args: dict[str, Any] = {"faithfulness": None, "context_relevance": None, "answer_relevance": None, **signals}
    assert diagnose(**args) == expected


def test_diagnosis_threshold_is_inclusive_and_configurable() -> None:
    args: dict[str, Any] = {"faithfulness": 0.6, "context_relevance": 0.6, "answer_relevance": 0.6}
    assert diagnose(**args, threshold=0.6) == "ok"
    assert diagnose(**args, threshold=0.7) == "retrieval"


# --- the gate -------------------------------------------------------------------------------------


def _gate_report() -> EvaluationReport:
    rows = [row("a", f=0.9, c=0.5, a=None, metrics={"recall@5": 0.5}),
            row("b", f=0.7, c=0.7, a=None, metrics={"recall@5": 1.0})]
    return EvaluationReport.from_rows(rows, judge="j", metrics=["recall@5"])


def test_gate_names_metric_mean_and_threshold() -> None:
    report = _gate_report()
    assert report.gate({"faithfulness": 0.8, "recall@5": 0.75}) == []
    failures = report.gate({"faithfulness": 0.85, "R@5": 0.9, "answer_relevance": 0.1, "ndcg@10": 0.1})
    assert len(failures) == 4
    assert failures[0].startswith("faithfulness: mean 0.8000 < threshold 0.85")
    assert failures[1].startswith("R@5: mean 0.7500 < threshold 0.9")  # matched by metric, not spelling
    assert failures[2].startswith("answer_relevance: no values")
    assert failures[3].startswith("ndcg@10: no values")
    with pytest.raises(ConfigurationError, match="unknown score or metric 'faithfulnes'"):
        report.gate({"faithfulnes": 0.5})


def test_assert_rag_quality() -> None:
    report = _gate_report()
    assert_rag_quality(report, faithfulness=0.5, recall_at_5=0.5)
    assert_rag_quality(report, {"recall@5": 0.75})
    with pytest.raises(AssertionError) as info:
        assert_rag_quality(report, {"faithfulness": 0.95}, recall_at_5=0.8)
    assert "faithfulness: mean 0.8000 < threshold 0.95" in str(info.value)
    assert "recall@5: mean 0.7500 < threshold 0.8" in str(info.value)
    with pytest.raises(ConfigurationError):
        assert_rag_quality(report)


@pytest.mark.parametrize("item", ["faithfulness", "faithfulness=", "=0.5", "faithfulness=high",
                                  "faithfulness=1.5", "recall@x=0.5", "bogus=0.5"])
def test_parse_fail_under_rejects_malformed(item: str) -> None:
    with pytest.raises(ConfigurationError, match="--fail-under"):
        parse_fail_under([item])


def test_parse_fail_under() -> None:
    assert parse_fail_under(["Faithfulness=0.8", "recall@5 = 0.9", "context-relevance=0"]) == {
        "faithfulness": 0.8, "recall@5": 0.9, "context_relevance": 0.0}


# --- outputs --------------------------------------------------------------------------------------


def test_json_and_markdown_outputs(tmp_path: Path) -> None:
    rows = [row("a|1", f=1.0, c=None, a=0.5, metrics={"recall@5": 1.0}, diagnosis="ok",
                citations=[{"doc_id": "d1", "rank": 1, "source": "x.md", "method": "marker", "marker": "[1]"}],
                cited_ids=["d1"], reason="fine | good"),
            row("b", error="ValueError: nope", diagnosis="error")]
    report = EvaluationReport.from_rows(rows, judge="lexical", metrics=["recall@5"])
    data = json.loads(report.to_json(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text()) == data
    assert data["summary"]["context_relevance"] == {"name": "context_relevance", "mean": None, "n": 0,
                                                    "missing": 2, "min": None, "max": None}
    assert data["rows"][0]["context_relevance"] is None and data["rows"][0]["citations"][0]["source"] == "x.md"
    assert data["rows"][1]["error"] == "ValueError: nope"
    assert data["diagnosis"]["error"] == {"count": 1, "share": 0.5}
    assert data["distributions"]["faithfulness"]["counts"][-1] == 1
    assert len(data["distributions"]["faithfulness"]["edges"]) == 11

    md = report.to_markdown(tmp_path / "r.md")
    assert (tmp_path / "r.md").read_text() == md
    assert "| faithfulness | 1.000 | 1 | 1 | 1.000 | 1.000 |" in md
    assert "| context_relevance | – | 0 | 2 | – | – |" in md
    assert "| a\\|1 |" in md  # a pipe in content cannot break the table
    assert "- **b** (error): ValueError: nope" in md


# --- datasets -------------------------------------------------------------------------------------


def test_load_dataset(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "a?", "relevant_ids": ["x"]}\n\n'
                    '{"id": 7, "question": "b?", "qrels": {"x": 2, "y": 0}, "reference_answer": "r", "tag": 1}\n'
                    '{"question": "c?", "relevant_ids": []}\n')
    rows = load_dataset(path)
    assert [r.id for r in rows] == ["row-1", "7", "row-3"]
    assert dict(rows[1].relevant or {}) == {"x": 2, "y": 0} and rows[1].reference_answer == "r"
    assert dict(rows[1].extra) == {"tag": 1}
    assert [r.has_ground_truth for r in rows] == [True, True, False]


@pytest.mark.parametrize(("text", "message"), [
    ('{"question": "a"}\n{"question": \n', "line 2 is not valid JSON"),
    ('{"query": "a"}\n', "line 1: 'question' must be a non-empty string"),
    ('{"id": "x", "question": "a"}\n{"id": "x", "question": "b"}\n', "row id 'x' appears more than once"),
    ('{"question": "a", "relevant_ids": ["x"], "qrels": {"x": 1}}\n', "not both"),
    ('{"question": "a", "relevant_ids": "x"}\n', "relevant_ids"),
    ('{"question": "a", "qrels": ["x"]}\n', "'qrels' must be an object"),
    ("\n", "no rows"),
])
def test_load_dataset_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        load_dataset(path)


# --- evaluate_pipeline() on real pipelines ------------------------------------------------------------


def test_evaluate_pairs_each_row_with_its_own_documents_under_concurrency() -> None:
    dataset = [{**item, "id": f"r{i}"} for i, item in enumerate(_dataset(8) * 3)]
    report = evaluate_pipeline(dataset, build_keyword_chain(), judge=FakeJudge(
        lambda req: {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0, "reason": req.query}),
        metrics=["recall@1", "mrr@10"], concurrency=6, progress=False)
    assert len(report.rows) == 24 and report.errors == 0
    for result, item in zip(report.rows, dataset):
        expected = item["relevant_ids"][0]
        assert result.doc_ids[0] == expected and result.cited_ids == (expected,)
        assert result.reason == item["question"]  # the judgement of this row, not another
        assert result.retrieval_metrics == {"recall@1": 1.0, "mrr@10": 1.0}
        assert result.citations[0]["source"] == expected[2:] + ".md"
        assert result.diagnosis == "ok"
    assert report.stats["judged"] == 24


def test_evaluate_keeps_rows_whose_pipeline_raised() -> None:
    dataset = [*_dataset(3), {"id": "boom", "question": "Please explode now", "relevant_ids": ["d-apple"]}]
    calls = []

    def judge_fn(request: JudgeRequest) -> dict[str, Any]:
        calls.append(request.query)
        # context relevance is withheld for one row: it must stay None, not become 0
        ctx = None if "banana" in request.query else 0.8
        return {"faithfulness": 0.9, "context_relevance": ctx, "answer_relevance": 0.7}

    report = evaluate_pipeline(dataset, build_keyword_chain(), judge=FakeJudge(judge_fn), progress=False)
    assert [r.id for r in report.rows] == ["r0", "r1", "r2", "boom"]
    boom = report.rows[3]
    assert boom.error == "ValueError: generator exploded"
    assert boom.diagnosis == "error"
    assert boom.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    assert dict(boom.retrieval_metrics) == {}
    assert len(calls) == 3  # the failed row was not judged
    ctx = report.aggregate["context_relevance"]
    assert (ctx.mean, ctx.n, ctx.missing) == (pytest.approx(0.8), 2, 2)
    recall = report.aggregate["recall@5"]
    assert (recall.mean, recall.n, recall.missing) == (1.0, 3, 1)
    assert report.errors == 1 and report.diagnosis_counts["error"] == 1


def test_evaluate_dict_input_and_graded_qrels() -> None:
    from operator import itemgetter

    chain = ({"docs": itemgetter("question") | KeywordRetriever(k=3), "question": itemgetter("question")}
             | RunnableLambda(_generate))
    dataset = [{"question": "When does the cherry orchard open?", "qrels": {"d-cherry": 2, "d-apple": 1}}]
    report = evaluate_pipeline(dataset, chain, judge=FakeJudge(lambda r: {"faithfulness": 1.0}),
                      metrics=["ndcg@3", "P@3"], progress=False)
    result = report.rows[0]
    assert result.doc_ids[0] == "d-cherry"
    # ndcg with graded gains: d-cherry (2) at rank 1, d-apple (1) within the top 3 (ties by id)
    assert result.retrieval_metrics["ndcg@3"] == pytest.approx(1.0)
    assert result.retrieval_metrics["P@3"] == pytest.approx(2 / 3)


def test_evaluate_writes_an_audit_log_when_asked(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    report = evaluate_pipeline(_dataset(2), build_keyword_chain(), judge=FakeJudge(lambda r: {"faithfulness": 0.4}),
                      progress=False, auditor_kwargs={"audit_log": log})
    assert len(report.rows) == 2
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert sorted(x["query"] for x in lines) == sorted(r.question or "" for r in report.rows)


def test_no_progress_bar_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    evaluate_pipeline(_dataset(2), build_keyword_chain(), judge=FakeJudge(lambda r: {"faithfulness": 1.0}),
                      progress=True)
    assert capsys.readouterr().err == ""


def test_evaluate_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="LangChain Runnable or a LlamaIndex query engine"):
        evaluate_pipeline(_dataset(1), object(), progress=False)
    with pytest.raises(ConfigurationError, match="concurrency"):
        evaluate_pipeline(_dataset(1), build_keyword_chain(), concurrency=0, progress=False)
    with pytest.raises(ConfigurationError, match="metrics"):
        evaluate_pipeline(_dataset(1), build_keyword_chain(), metrics=["recall@five"], progress=False)
    with pytest.raises(ConfigurationError, match="on_judgement"):
        evaluate_pipeline(_dataset(1), build_keyword_chain(), auditor_kwargs={"on_judgement": print}, progress=False)


def test_evaluate_llamaindex_demo_engine() -> None:
    from ragaudit.demo.kb import dataset_path
    from ragaudit.demo.pipelines import build_llamaindex_engine
    from ragaudit.integrations import llamaindex

    report = evaluate_pipeline(str(dataset_path()), build_llamaindex_engine(), progress=False)
    assert len(report.rows) == 8 and report.errors == 0
    assert report.aggregate["faithfulness"].n == 8
    assert report.aggregate["recall@5"].n == 6 and report.aggregate["recall@5"].missing == 2
    assert all(r.doc_ids for r in report.rows)
    assert llamaindex.uninstrument() is None  # evaluate_pipeline() left no instrumentation behind


# --- the CLI --------------------------------------------------------------------------------------


def test_cli_eval_demo_end_to_end_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html, out = tmp_path / "out.html", tmp_path / "out.json"
    code = main(["eval", "demo", "--html", str(html), "--json", str(out), "--no-progress",
                 "--fail-under", "recall@5=0.9", "--fail-under", "faithfulness=0.5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "quality gate passed" in captured.err
    data = json.loads(out.read_text())
    assert data["judge"] == "lexical" and data["rows_total"] == 8 and data["errors"] == 0
    assert data["summary"]["recall@5"]["n"] == 6 and data["summary"]["recall@5"]["missing"] == 2
    assert data["summary"]["faithfulness"]["n"] == 8
    by_id = {r["id"]: r for r in data["rows"]}
    assert by_id["q1"]["doc_ids"][0] == "kb-refund_eligibility"
    assert by_id["q6"]["retrieval_metrics"] == {} and by_id["q6"]["has_ground_truth"] is False
    # the uncovered question is the least relevant: the signal the demo is built to show
    assert by_id["q6"]["answer_relevance"] < by_id["q1"]["answer_relevance"]
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<script" not in page
    assert "| q1 | What is the refund window" in captured.out


def test_cli_eval_gate_fails_naming_the_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in _dataset(3)))
    md = tmp_path / "r.md"
    code = main(["eval", str(dataset), "--pipeline", "tests.test_evaluation:build_keyword_chain",
                 "--judge", "tests.test_evaluation:low_faithfulness_judge", "--no-progress", "--markdown", str(md),
                 "--fail-under", "faithfulness=0.8", "--fail-under", "context_relevance=0.5",
                 "--fail-under", "hit_rate@1=1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "faithfulness: mean 0.2000 < threshold 0.8" in err
    assert "context_relevance" not in err.split("FAILED")[1]  # only what failed is named
    assert "hit_rate@1" not in err.split("FAILED")[1]  # computed because it was gated, and it passed
    assert "(generation)" in md.read_text()  # good retrieval + low faithfulness


@pytest.mark.parametrize("argv", [
    ["--fail-under", "faithfulness"],
    ["--fail-under", "faithfulness=abc"],
    ["--fail-under", "unknown_metric=0.5"],
    ["--fail-under", "faithfulness=2"],
])
def test_cli_malformed_fail_under_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "demo", "--no-progress", *argv]) == 2
    assert "--fail-under" in capsys.readouterr().err


def test_cli_eval_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(_dataset(1)[0]) + "\n")
    assert main(["eval", str(tmp_path / "missing.jsonl"), "--pipeline", "x:y"]) == 2
    assert main(["eval", str(dataset)]) == 2
    assert "--pipeline module:attr is required" in capsys.readouterr().err
    assert main(["eval", str(dataset), "--pipeline", "tests.test_evaluation:DOCS"]) == 2
    assert "not a LangChain runnable" in capsys.readouterr().err
    assert main(["eval", str(dataset), "--pipeline", "no_such_module_xyz:chain"]) == 2
    assert main(["eval", str(dataset), "--pipeline", "tests.test_evaluation:build_keyword_chain",
                 "--judge", "tests.test_evaluation:TOPICS"]) == 2
    assert "--judge" in capsys.readouterr().err


def test_cli_eval_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "demo", "--dry-run", "--judge", "lexical"]) == 0
    out = capsys.readouterr().out
    assert "8 rows" in out and "judge calls: 0" in out  # the lexical judge calls no model
    assert "nothing was run" in out
    assert main(["eval", "demo", "--dry-run", "--judge", "chat:gpt-4o-mini"]) == 0
    out = capsys.readouterr().out
    assert "judge calls: 8\n" in out  # one call per row for all three scores
    prompt_tokens = int(re.search(r"tokens \(estimated\): (\d+) prompt", out).group(1))  # type: ignore[union-attr]
    assert prompt_tokens > 8 * 500  # the protocol's prompt alone is several hundred tokens per row


# --- ragaudit report -----------------------------------------------------------------------------


def test_cli_report_lowest_scores_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    write_audit_log(log)
    html, out = tmp_path / "audit.html", tmp_path / "audit.json"
    assert main(["report", str(log), "--html", str(html), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    order = [m.group(1) for m in re.finditer(r"turn turn-(\w+)", text)]
    assert order == ["bad", "meh", "good", "none"]  # min of the three scores, no scores last
    assert "cites [2] bad-2 (faq.md) via marker" in text
    assert "reason: invented 60 days" in text
    assert "context_relevance=–" in text
    data = json.loads(out.read_text())
    assert [r["id"] for r in data["rows"]] == ["turn-bad", "turn-meh", "turn-good", "turn-none"]
    assert data["summary"]["context_relevance"]["missing"] == 2
    assert data["rows"][2]["retrieval_metrics"]["recall@5"] == 1.0
    assert "turn-bad" in html.read_text()


def test_cli_report_gate_and_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    write_audit_log(log)
    assert main(["report", str(log), "--limit", "1", "--fail-under", "faithfulness=0.3"]) == 0
    text = capsys.readouterr().out
    assert "showing 1" in text and "turn-meh" not in text
    assert main(["report", str(log), "--fail-under", "faithfulness=0.9", "--fail-under", "recall@5=0.5"]) == 1
    err = capsys.readouterr().err
    assert "faithfulness: mean 0.5667 < threshold 0.9 (n=3, missing=1)" in err
    assert "recall@5" not in err  # 1.0 over the one turn with ground truth
    assert main(["report", str(log), "--fail-under", "map=0.5"]) == 1
    assert "map: no values" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2


def test_report_from_audit_log_diagnosis(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    write_audit_log(log)
    report = report_from_audit_log(log)
    diagnosis = {r.id: r.diagnosis for r in report.rows}
    assert diagnosis == {"turn-bad": "generation", "turn-meh": "prompt/question", "turn-good": "ok",
                         "turn-none": "unknown"}
    assert report.judge == "fake-judge"


def test_evaluate_llamaindex_gives_back_the_process_instrumentation() -> None:
    """evaluate_pipeline() instruments through the public ``llamaindex.instrumented()`` seam and re-attaches
    what the application had installed, which keeps auditing afterwards."""
    from llama_index.core.instrumentation import get_dispatcher

    from ragaudit import Auditor
    from ragaudit.demo.kb import dataset_path
    from ragaudit.demo.pipelines import build_llamaindex_engine
    from ragaudit.integrations import llamaindex

    app_judged: list[str] = []
    app_auditor = Auditor(FakeJudge(lambda r: (app_judged.append(r.query), {"faithfulness": 1.0})[1]))
    installed = llamaindex.instrument(auditor=app_auditor)
    try:
        engine = build_llamaindex_engine()
        report = evaluate_pipeline(str(dataset_path()), engine, progress=False)
        assert len(report.rows) == 8 and app_judged == []  # the evaluation's turns went to its own auditor
        dispatcher = get_dispatcher()
        assert installed.attached and installed.span_handler in dispatcher.span_handlers
        engine.query("How long do I have to return an item?")
        assert installed.force_flush(10) and app_judged == ["How long do I have to return an item?"]
    finally:
        assert llamaindex.uninstrument() is installed
        app_auditor.shutdown()
