"""The HTML report of an audit log shows the score trend over time as an inline SVG, built only from
numbers and dates ragaudit computes: a hostile timestamp is counted, never echoed."""

from __future__ import annotations

import re
from pathlib import Path

from ragaudit.cli import main
from ragaudit.evaluation._trend_html import score_trend
from ragaudit.evaluation.audit_log import report_from_audit_log
from tests.support.review_logs import turn, write_review_log

HOSTILE_TS = '2026-01-01T00:00:00Z"><script>alert(1)</script>'


def _log(tmp_path: Path, times: list[str]) -> Path:
    turns = [turn(f"t-{i}", f"q{i}", "Returns are accepted within 30 days.") for i in range(len(times))]
    verdicts = {f"q{i}": (1.0 - i / 10, 0.5, None, []) for i in range(len(times))}
    return write_review_log(tmp_path / "audit.jsonl", turns, verdicts, times=times)


def test_trend_buckets_means_per_hour(tmp_path: Path) -> None:
    times = ["2026-03-01T10:05:00Z", "2026-03-01T10:55:00Z", "2026-03-01T20:10:00Z", "2026-03-02T09:00:00.250Z"]
    trend = score_trend(report_from_audit_log(_log(tmp_path, times)).rows)
    assert trend is not None and trend.width_s == 3600 and trend.unreadable == 0
    starts = [b[0].strftime("%H:%M") for b in trend.buckets]
    assert starts == ["10:00", "20:00", "09:00"]  # 23 hours: hourly; empty hours left out
    first = trend.buckets[0][1]
    assert first["faithfulness"] == (0.95, 2) and first["context_relevance"] == (0.5, 2)
    assert first["answer_relevance"] == (None, 0)  # missing is not zero


def test_report_html_has_the_trend_svg_and_escapes(tmp_path: Path) -> None:
    times = ["2026-03-01T10:05:00Z", "2026-03-02T11:00:00Z", "2026-03-04T09:00:00Z", HOSTILE_TS]
    log = _log(tmp_path, times)
    out = tmp_path / "r.html"
    assert main(["report", str(log), "--html", str(out)]) == 0
    page = out.read_text()
    svg = re.search(r'<svg class="trend".*?</svg>', page, re.S)
    assert svg is not None and '<h2>Score trend</h2>' in page
    assert svg.group(0).count("<polyline") == 2  # faithfulness and context relevance; answer relevance never given
    assert "2026-03-01" in svg.group(0) and "2026-03-04" in svg.group(0)
    assert "1 rows with an unreadable time left out" in page
    assert "<script>" not in page and "alert(1)" not in page


def test_a_dataset_report_without_times_has_no_trend(tmp_path: Path) -> None:
    assert score_trend([]) is None
