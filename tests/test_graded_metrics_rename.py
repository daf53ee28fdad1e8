"""The retrieval metrics of the judge's grades are ``graded_*`` (0.1.0: ``judged_*``, a word that also
names a turn's status). Files 0.1.0 wrote are read as before, by every reader: an audit log through
``ragaudit report`` (text, JSON and HTML), ``ragaudit qrels``, ``report_from_audit_log`` and
``read_audit_log``; a span file through ``read_spans``. The old Python names are gone (issue 49).

The old-format files are the current writers' output with the renamed keys put back as 0.1.0
wrote them (``"judged_metrics": {"judged_ndcg@10": ...}``, ``ragaudit.retrieval.judged_ndcg@10``):
nothing else about those lines changed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ragaudit import Auditor, LexicalJudge
from ragaudit.cli import main
from ragaudit.evaluation import RowResult
from ragaudit.evaluation.audit_log import report_from_audit_log
from ragaudit.records import RagTurn, RetrievedDoc
from ragaudit.tracing import JsonlSpanExporter, SpanRecorder, read_audit_log, read_spans
from ragaudit.tracing import conventions as c

DOCS = (RetrievedDoc(id="kb-refunds", content="A full refund within 30 days of purchase.", rank=1),
        RetrievedDoc(id="kb-gifts", content="Gift cards are not refundable.", rank=2))
QUESTIONS = ("How many days for a full refund of a purchase?", "Are gift cards refundable?")


def _turn(i: int, question: str) -> RagTurn:
    return RagTurn(turn_id=f"t{i}", query=question, answer="A full refund within 30 days [1].", documents=DOCS)


def _as_0_1_0_wrote_it(text: str) -> str:
    """The 0.1.0 spelling of the keys this release renamed (and of nothing else)."""
    old = re.sub(r'"graded_(metrics|ndcg@|P@|mrr@)', r'"judged_\1', text)
    return old.replace(f'"{c.retrieval_metric_key("graded_")}', f'"{c.retrieval_metric_key("judged_")}')


@pytest.fixture
def logs(tmp_path: Path) -> tuple[Path, Path]:
    """``(new, old)``: an audit log written now by a real Auditor, and the same lines as 0.1.0 wrote them
    (same file name, so reports titled by it compare equal)."""
    new = tmp_path / "new" / "audit.jsonl"
    old = tmp_path / "old" / "audit.jsonl"
    new.parent.mkdir()
    old.parent.mkdir()
    with Auditor(LexicalJudge(), mode="inline", audit_log=new) as auditor:
        for i, question in enumerate(QUESTIONS):
            assert auditor.submit(_turn(i, question)) == "judged"
    text = new.read_text(encoding="utf-8")
    assert text.count('"graded_metrics": {"graded_ndcg@10"') == len(QUESTIONS)
    old.write_text(_as_0_1_0_wrote_it(text), encoding="utf-8")
    assert '"graded_' not in old.read_text(encoding="utf-8")
    assert old.read_text(encoding="utf-8").count('"judged_metrics": {"judged_ndcg@10"') == len(QUESTIONS)
    return new, old


def test_read_audit_log_reads_an_old_line_as_a_new_one(logs: tuple[Path, Path]) -> None:
    new, old = logs
    lines = read_audit_log(new)
    assert read_audit_log(old) == lines
    assert set(lines[0]["graded_metrics"]) == {"graded_ndcg@10", "graded_P@5", "graded_mrr@10"}
    assert "judged_metrics" not in lines[0]


def test_report_of_an_old_log_is_the_report_of_the_new_one(logs: tuple[Path, Path]) -> None:
    new, old = logs
    now, before = report_from_audit_log(new), report_from_audit_log(old)
    assert [r.to_dict() for r in before.rows] == [r.to_dict() for r in now.rows]
    assert all(set(r.graded_metrics) == {"graded_ndcg@10", "graded_P@5", "graded_mrr@10"} for r in before.rows)


def test_ragaudit_report_text_json_and_html_read_an_old_log_the_same(
        logs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = {}
    for log in logs:
        html, data = log.with_suffix(".html"), log.with_suffix(".json")
        assert main(["report", str(log), "--html", str(html), "--json", str(data)]) == 0
        outputs[log.parent.name] = (capsys.readouterr().out, json.loads(data.read_text(encoding="utf-8")),
                                    html.read_text(encoding="utf-8"))
    (text, data, html), before = outputs["new"], outputs["old"]
    assert "graded_ndcg@10=" in text and "graded_ndcg@10" in html
    assert before[0] == text and before[2] == html
    assert before[1] == data and all("graded_ndcg@10" in row["graded_metrics"] for row in data["rows"])


def test_ragaudit_qrels_reads_an_old_log_the_same(logs: tuple[Path, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    written = []
    for log in logs:
        out, runs = log.with_suffix(".qrels"), log.parent / "runs"
        assert main(["qrels", str(log), "-o", str(out), "--runs", str(runs)]) == 0
        capsys.readouterr()
        written.append((out.read_text(encoding="utf-8"), (runs / "audit.run").read_text(encoding="utf-8")))
    assert written[0] == written[1] and "kb-refunds" in written[0][0]


def test_a_log_mixing_old_and_new_lines_reads_every_line(logs: tuple[Path, Path], tmp_path: Path) -> None:
    new, old = logs
    new_lines, old_lines = new.read_text().splitlines(), old.read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(f"{old_lines[0]}\n{new_lines[1]}\n", encoding="utf-8")
    assert read_audit_log(mixed) == read_audit_log(new)
    # a line with both keys (written by hand or by another tool) keeps the current one
    both = json.loads(new_lines[0]) | {"judged_metrics": {"judged_ndcg@10": 0.0}}
    mixed.write_text(json.dumps(both) + "\n", encoding="utf-8")
    [line] = read_audit_log(mixed)
    assert line["graded_metrics"]["graded_ndcg@10"] == 1.0 and "judged_metrics" not in line
    # an old key with the wrong type is still named as a bad line, under the name it is read as
    both = json.loads(old_lines[0]) | {"judged_metrics": [1]}
    mixed.write_text(json.dumps(both) + "\n", encoding="utf-8")
    with pytest.raises(Exception, match="'graded_metrics' is a list"):
        report_from_audit_log(mixed)


def test_read_spans_reads_an_old_span_file_under_the_new_attribute_names(tmp_path: Path) -> None:
    new, old = tmp_path / "spans.jsonl", tmp_path / "old-spans.jsonl"
    provider = TracerProvider()
    exporter = JsonlSpanExporter(new)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Auditor(LexicalJudge(), mode="inline", audit_log=None, tracer_provider=provider) as auditor:
        recorder = SpanRecorder(provider)
        traced = recorder.record_turn(_turn(0, QUESTIONS[0]))
        assert auditor.submit(traced) == "judged"
    provider.shutdown()
    text = new.read_text(encoding="utf-8")
    key = c.retrieval_metric_key("graded_ndcg@10")
    assert f'"{key}"' in text
    old.write_text(_as_0_1_0_wrote_it(text), encoding="utf-8")
    assert f'"{c.retrieval_metric_key("judged_ndcg@10")}"' in old.read_text(encoding="utf-8")
    spans = read_spans(new)
    assert read_spans(old) == spans
    assert any(s["attributes"].get(key) == 1.0 for s in spans)


def test_the_python_names_are_graded_and_the_old_ones_are_gone() -> None:
    # 0.1.0's Python names (judged_metrics(), RowResult.judged_metrics, ...) were renamed before the first
    # release: 0.2.0 has no alias of them (issue 49). Only the files 0.1.0 wrote are read.
    from ragaudit import turn_audit
    from ragaudit.records import DocumentGrade, Judgement

    judgement = Judgement(judge="j", document_grades=(DocumentGrade(1, "a", 3), DocumentGrade(2, "b", 0)))
    graded = turn_audit.graded_metrics(judgement)
    assert graded == {"graded_ndcg@10": 1.0, "graded_P@5": 0.2, "graded_mrr@10": 1.0}
    assert turn_audit.graded_labels(judgement) == {"a": 3, "b": 0}
    assert turn_audit.GRADED_PREFIX == "graded_"
    assert not hasattr(turn_audit, "judged_metrics") and not hasattr(turn_audit, "JUDGED_PREFIX")

    row = RowResult(id="r", question=None, answer=None, graded_metrics=graded)
    assert row.to_dict()["graded_metrics"] == graded and "judged_metrics" not in row.to_dict()
    with pytest.raises(TypeError, match="judged_metrics"):
        RowResult(id="r", question=None, answer=None, judged_metrics=graded)  # type: ignore[call-arg]
