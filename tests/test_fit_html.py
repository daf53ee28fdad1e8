"""The before/after of a fitted judge as a picture: ``ragaudit report --html --judge-config`` adds a "Fitted
judge" section and ``ragaudit calibrate --fit --html`` writes the same drawing as a page. Every figure drawn is
the configuration's own (what the fit measured on the held-out labels); every text is escaped."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ragaudit.cli import main
from ragaudit.errors import ConfigurationError
from ragaudit.evaluation._fit_html import FitDimension, FitSide, fit_dimensions, fit_svg
from ragaudit.evaluation.audit_log import report_from_audit_log
from ragaudit.judges.fitted import JudgeConfig
from tests.test_calibrate_fit import write_inputs

SVG = "{http://www.w3.org/2000/svg}"


def _fit(tmp_path: Path, *extra: str) -> tuple[Path, Path, Path]:
    """The real ``calibrate --fit`` on 40 labels of a lenient judge: (labels, audit log, judge config)."""
    label_path, log_path = write_inputs(tmp_path, 20, 20)
    config = tmp_path / "judge-config.json"
    assert main(["calibrate", str(label_path), str(log_path), "--fit", "--out", str(config), *extra]) == 0
    return label_path, log_path, config


def _svg(page: str) -> ET.Element:
    found = re.search(r'<svg class="fit".*?</svg>', page, re.S)
    assert found is not None
    return ET.fromstring(found.group(0))  # well-formed XML: every text escaped, every tag closed


def _bar_titles(svg: ET.Element) -> list[str]:
    return [str(rect.findtext(f"{SVG}title")) for rect in svg.iter(f"{SVG}rect") if rect.get("class")]


def _texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text")]


def test_report_html_draws_the_fit_with_the_configs_numbers(tmp_path: Path) -> None:
    _, log_path, config_path = _fit(tmp_path)
    config = JudgeConfig.load(config_path)
    out = tmp_path / "report.html"
    assert main(["report", str(log_path), "--html", str(out), "--judge-config", str(config_path)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<h2>Fitted judge</h2>" in page and f"config {config.digest()}" in page
    assert "not the judge it was fitted for" not in page  # the log's judge is the one fitted (chat:m)
    svg = _svg(page)
    before, after = config.agreement["faithfulness"]["before"], config.agreement["faithfulness"]["after"]
    assert (before["balanced_accuracy"], before["kappa"], after["balanced_accuracy"], after["kappa"]) == (
        0.5, 0.0, 1.0, 1.0)  # the lenient judge, fixed (tests/test_calibrate_fit.py)
    n = after["n"]
    assert _bar_titles(svg) == [
        f"faithfulness balanced accuracy before (threshold 0.500): 0.500 (n={n})",
        f"faithfulness balanced accuracy after (threshold 0.725): 1.000 (n={n})",
        f"faithfulness Cohen's kappa before (threshold 0.500): 0.000 (n={n})",
        f"faithfulness Cohen's kappa after (threshold 0.725): 1.000 (n={n})"]
    texts = _texts(svg)
    assert "threshold 0.500 → 0.725" in texts
    counts = config.label_counts["faithfulness"]
    assert f"held out n={n} · fitted on {counts['fit']} · {counts['pass']} pass / {counts['fail']} fail" in texts
    assert (n, counts["fit"]) == (12, 28)
    for value in ("0.500", "0.000", "1.000"):
        assert value in texts


def test_calibrate_fit_html_writes_the_same_drawing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page_path = tmp_path / "fit.html"
    _, log_path, config_path = _fit(tmp_path, "--html", str(page_path))
    assert f"before/after drawn in {page_path}" in capsys.readouterr().out
    page = page_path.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in page and "<script" not in page
    report_page = tmp_path / "report.html"
    assert main(["report", str(log_path), "--html", str(report_page), "--judge-config", str(config_path)]) == 0
    drawn = re.search(r'<svg class="fit".*?</svg>', page, re.S)
    in_report = re.search(r'<svg class="fit".*?</svg>', report_page.read_text(encoding="utf-8"), re.S)
    assert drawn is not None and in_report is not None and drawn.group(0) == in_report.group(0)


def test_calibrate_html_needs_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    label_path, log_path = write_inputs(tmp_path, 20, 20)
    assert main(["calibrate", str(label_path), str(log_path), "--html", str(tmp_path / "p.html")]) == 2
    assert "use it with --fit" in capsys.readouterr().err
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot be read"),
    ("{not json", "not JSON"),
    ('{"version": 1}', 'no "thresholds"'),
    (json.dumps({"version": 1, "thresholds": {"faithfulness": 0.7},
                 "agreement": {"faithfulness": {"before": {"threshold": 0.5, "kappa": 0.1, "balanced_accuracy": 0.5,
                                                           "n": 4},
                                                "after": {"threshold": 0.7, "kappa": "high",
                                                          "balanced_accuracy": 0.9, "n": 4}}}}),
     "agreement.faithfulness.after.kappa must be a number in [-1, 1] or null, got 'high'"),
    (json.dumps({"version": 1, "thresholds": {"faithfulness": 0.7}, "label_counts": {"faithfulness": {"fit": -1}}}),
     "label_counts.faithfulness.fit must be a whole number >= 0"),
])
def test_a_bad_judge_config_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    content: str | None, message: str) -> None:
    _, log_path = write_inputs(tmp_path, 20, 20)
    config = tmp_path / "bad-config.json"
    if content is not None:
        config.write_text(content, encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["report", str(log_path), "--html", str(out), "--judge-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and message in err
    assert not out.exists()


def test_judge_config_needs_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, log_path, config_path = _fit(tmp_path)
    capsys.readouterr()
    assert main(["report", str(log_path), "--judge-config", str(config_path)]) == 2
    assert "add --html" in capsys.readouterr().err


def test_the_picture_escapes_names(tmp_path: Path) -> None:
    hostile = '<script>alert(1)</script>"&'
    side = FitSide(threshold=0.5, kappa=-0.4, balanced_accuracy=0.3, n=7)
    svg_text = fit_svg([FitDimension(name=hostile, threshold=0.6, before=side, after=side, counts={"fit": 3})])
    svg = ET.fromstring(svg_text)
    assert "<script>" not in svg_text and hostile in _texts(svg)  # escaped in the file, the name when read
    assert "-0.400" in _texts(svg) and "-0.5" in _texts(svg)  # a negative kappa: the scale goes below 0
    # a hostile judge name in a real config reaches the report escaped, and is named as not the log's judge
    _, log_path, config_path = _fit(tmp_path)
    data = json.loads(config_path.read_text(encoding="utf-8"))
    data["judge"] = hostile
    config_path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["report", str(log_path), "--html", str(out), "--judge-config", str(config_path)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<script>" not in page and "not the judge it was fitted for" in page
    _svg(page)


def test_a_config_without_agreement_is_drawn_as_such(tmp_path: Path) -> None:
    config = JudgeConfig(thresholds={"faithfulness": 0.7, "answer_relevance": 0.4})
    dims = fit_dimensions(config)
    assert [d.name for d in dims] == ["faithfulness", "answer_relevance"] and dims[0].after is None
    _, log_path = write_inputs(tmp_path, 20, 20)
    html = report_from_audit_log(log_path).to_html(judge_config=config)
    assert _texts(_svg(html)).count("no held-out agreement recorded") == 2
    with pytest.raises(ConfigurationError, match="'context_relevance' has no threshold"):
        fit_dimensions(JudgeConfig(thresholds={"faithfulness": 0.7}, agreement={"context_relevance": {}}))


def test_the_docs_picture_is_the_drawing_of_the_guides_example(tmp_path: Path) -> None:
    # docs/guides/judges.md shows the picture of its example (these 40 labels): the one drawn today.
    page_path = tmp_path / "fit.html"
    _fit(tmp_path, "--html", str(page_path), "--max-examples", "2")
    drawn = re.search(r'<svg class="fit".*?</svg>', page_path.read_text(encoding="utf-8"), re.S)
    image = Path(__file__).resolve().parents[1] / "docs" / "images" / "calibrate-fit-report.svg"
    assert drawn is not None and image.read_text(encoding="utf-8") == drawn.group(0) + "\n"
