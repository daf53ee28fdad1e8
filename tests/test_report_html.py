"""The HTML report renders in headless Chromium: no console or script errors, tables and SVG charts present.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped with a reason when no
Chromium binary can be found.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ragaudit.evaluation import EvaluationReport, RowResult
from ragaudit.evaluation.report import HISTOGRAM_BINS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # headless Chromium per test

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Chromium writes page console messages (console.*, uncaught exceptions, CSP violations, failed
# loads) to stderr as "...:INFO:CONSOLE(...)" or "...:CONSOLE:N]" lines with --enable-logging=stderr.
_CONSOLE = re.compile(r"CONSOLE[:(]")
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> & "quotes"'


def _find_chromium() -> str | None:
    env = os.environ.get("RAGAUDIT_CHROMIUM")
    if env and Path(env).exists():
        return env
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _find_chromium()
    if path is None:
        pytest.skip("Chromium not found (install Debian's 'chromium' package, or set RAGAUDIT_CHROMIUM)")
    return path


@dataclass
class Rendered:
    dom: str
    console: list[str]
    returncode: int
    stderr: str


def _run(chromium: str, page: Path, tmp_path: Path, *extra: str) -> Rendered:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", *extra, page.resolve().as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    console = [line for line in proc.stderr.splitlines() if _CONSOLE.search(line)]
    return Rendered(proc.stdout, console, proc.returncode, proc.stderr)


class _DomSummary(HTMLParser):
    """Counts the elements of the rendered DOM that matter here."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.ids: set[str] = set()
        self.classes: dict[str, int] = {}
        self.rows_in: dict[str, int] = {}
        self._table: list[str] = []
        self.text: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if a.get("id"):
            self.ids.add(a["id"] or "")
        for cls in (a.get("class") or "").split():
            self.classes[f"{tag}.{cls}"] = self.classes.get(f"{tag}.{cls}", 0) + 1
        if tag == "table":
            self._table.append(a.get("id") or "")
        if tag == "tr" and self._table:
            self.rows_in[self._table[-1]] = self.rows_in.get(self._table[-1], 0) + 1
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(f"{tag} {key}={a[key]}")
        if any(k.startswith("on") for k in a):
            self.external.append(f"{tag} has an event handler attribute")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table:
            self._table.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _summary(dom: str) -> _DomSummary:
    parser = _DomSummary()
    parser.feed(dom)
    return parser


FULL_AUDIT_ANSWER = ("A full refund within 30 days [1]. Gift cards are refundable " + "y" * 300 + " [1]. "
                     "Hope that helps!")
FULL_AUDIT_SENTENCES = (
    {"index": 1, "text": "A full refund within 30 days [1].", "verdict": "supported", "supporting_ranks": [1],
     "supporting_doc_ids": ["kb-refunds"], "start": 0, "end": 33},
    {"index": 2, "text": FULL_AUDIT_ANSWER[34:FULL_AUDIT_ANSWER.index("Hope") - 1], "verdict": "contradicted",
     "supporting_ranks": [], "supporting_doc_ids": [], "start": 34, "end": FULL_AUDIT_ANSWER.index("Hope") - 1},
    {"index": 3, "text": "Hope that helps!", "verdict": None, "supporting_ranks": [], "supporting_doc_ids": [],
     "start": FULL_AUDIT_ANSWER.index("Hope"), "end": len(FULL_AUDIT_ANSWER)},
)


def _report() -> EvaluationReport:
    rows = [
        RowResult(id="q1", question="What is the refund window?", answer="30 days [1].", doc_ids=("kb-1", "kb-2"),
                  doc_sources=("policy.pdf", None), cited_ids=("kb-1",),
                  citations=({"doc_id": "kb-1", "rank": 1, "source": "policy.pdf", "method": "marker",
                              "marker": "[1]"},),
                  faithfulness=1.0, context_relevance=0.9, answer_relevance=0.95,
                  retrieval_metrics={"recall@5": 1.0, "ndcg@10": 1.0}, has_ground_truth=True, diagnosis="ok",
                  reason="grounded", usage={"prompt_tokens": 900, "completion_tokens": 40, "calls": 1}),
        RowResult(id="q2", question=HOSTILE, answer=HOSTILE, doc_ids=("kb-3",), faithfulness=0.1,
                  context_relevance=0.8, answer_relevance=None, retrieval_metrics={"recall@5": 0.5, "ndcg@10": 0.6},
                  has_ground_truth=True, diagnosis="generation", reason=HOSTILE, judge_error=HOSTILE,
                  usage={"prompt_tokens": 700, "calls": 1}),
        RowResult(id="q3", question="Do you ship abroad?", answer="No idea.", faithfulness=None,
                  context_relevance=None, answer_relevance=None, diagnosis="unknown"),
        RowResult(id="q4", question="Boom?", answer=None, error="ValueError: generator exploded",
                  diagnosis="error"),
        RowResult(id="01a23237-4099-726c-9d14-cf9cfe959173", question="How long is the refund window? " * 4,
                  answer=FULL_AUDIT_ANSWER, doc_ids=("kb-refunds", "kb-" + "x" * 120),
                  doc_sources=("return_policy.pdf", None),
                  citations=({"doc_id": "kb-refunds", "rank": 1, "method": "marker", "marker": "[1]"},),
                  faithfulness=0.5, context_relevance=0.9, answer_relevance=1.0, diagnosis="ok",
                  sentences=FULL_AUDIT_SENTENCES,
                  document_grades=({"rank": 1, "doc_id": "kb-refunds", "grade": 3},
                                   {"rank": 2, "doc_id": "kb-" + "x" * 120, "grade": None}),
                  citation_checks=({"sentence": 1, "doc_id": "kb-refunds", "rank": 1, "holds": True,
                                    "verdict": "supported"},
                                   {"sentence": 2, "doc_id": "kb-refunds", "rank": 1, "holds": False,
                                    "verdict": "contradicted"}),
                  graded_metrics={"graded_ndcg@10": 1.0, "graded_P@5": 0.2}, citation_precision=0.5,
                  citation_recall=1.0),
    ]
    return EvaluationReport.from_rows(rows, judge="chat:<model>", metrics=["recall@5", "ndcg@10"])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("html") / "report.html"
    _report().to_html(path)
    yield path


def test_console_errors_are_detected(chromium: str, tmp_path: Path) -> None:
    """The check below can fail: a page that logs an error and throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom-1'); nope();</script>"
                   "</body></html>")
    rendered = _run(chromium, bad, tmp_path, "--dump-dom")
    assert any("boom-1" in line for line in rendered.console), rendered.stderr[-2000:]
    assert any("nope is not defined" in line for line in rendered.console)


def test_report_renders_without_errors(chromium: str, page: Path, tmp_path: Path) -> None:
    rendered = _run(chromium, page, tmp_path, "--dump-dom")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert rendered.console == []
    dom = _summary(rendered.dom)
    assert {"summary", "diagnosis", "answers"} <= dom.ids
    assert dom.rows_in["summary"] == 1 + 5  # header + three scores + two metrics
    assert dom.rows_in["diagnosis"] == 1 + 6
    assert dom.classes["article.answer"] == 5  # one card per audited answer, no wide rows table
    # one of each in the legend, plus the audited answer's sentences
    assert dom.classes["span.v-supported"] == 2 and dom.classes["span.v-contradicted"] == 2
    assert dom.classes["span.v-missing"] == 2
    assert dom.classes["span.g-3"] == 1 and dom.classes["span.g-none"] == 1
    assert dom.classes["svg.histogram"] == 5
    assert dom.classes["svg.scatter"] == 1
    assert dom.tags["rect"] >= 5 * HISTOGRAM_BINS
    assert dom.tags["circle"] == 2  # q1 and q2 have both recall@5 and faithfulness
    assert dom.tags.get("script", 0) == 0 and dom.tags.get("img", 0) == 0
    # no src, no href but in-page links (sentence -> its supporting document), no inline event handlers
    assert [x for x in dom.external if not x.startswith("a href=#")] == []
    assert "a href=#d-01a23237-4099-726c-9d14-cf9cfe959173-1" in dom.external
    text = "".join(dom.text)
    assert '<script>alert("x")</script>' in text  # hostile content shown as text, not markup
    assert "ValueError: generator exploded" in text and "chat:<model>" in text


def test_report_screenshot(chromium: str, page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    rendered = _run(chromium, page, tmp_path, "--hide-scrollbars", "--window-size=1280,1800",
                    f"--screenshot={shot}")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert rendered.console == []
    from PIL import Image

    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1280, 1800)  # the window asked for
        counts = {colour: n for n, colour in image.convert("RGB").getcolors(maxcolors=1 << 22) or ()}
    # What the page shows, read from its pixels: the white page, the histogram bars in the report's
    # bar blue (#0969da), the score cells' colours (low #ffebe9, high #dafbe1), and text (many shades
    # of anti-aliased grey). A blank or unstyled page has none of these.
    assert max(counts, key=counts.__getitem__) == (255, 255, 255)
    assert counts.get((0x09, 0x69, 0xDA), 0) > 1_000
    assert counts.get((0xFF, 0xEB, 0xE9), 0) > 200 and counts.get((0xDA, 0xFB, 0xE1), 0) > 200
    assert len(counts) > 100
    keep = os.environ.get("RAGAUDIT_KEEP_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_audit_and_demo_pages_render(chromium: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages `ragaudit eval demo --html` and `ragaudit report --html` write render cleanly too."""
    from ragaudit.cli import main
    from tests.support.audit_logs import write_audit_log

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    demo_html = tmp_path / "demo.html"
    assert main(["eval", "demo", "--no-progress", "--html", str(demo_html)]) == 0
    log = tmp_path / "audit.jsonl"
    write_audit_log(log)
    audit_html = tmp_path / "audit.html"
    assert main(["report", str(log), "--html", str(audit_html)]) == 0
    for path, rows in ((demo_html, 8), (audit_html, 4)):
        rendered = _run(chromium, path, tmp_path, "--dump-dom")
        assert rendered.returncode == 0 and rendered.console == [], rendered.stderr[-2000:]
        dom = _summary(rendered.dom)
        assert dom.classes["article.answer"] == rows
        assert dom.classes["svg.histogram"] >= 3 and dom.classes["svg.scatter"] == 1


_HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="{page}" style="width:{width}px;height:900px;border:0"></iframe><pre id="out">pending</pre>
<script>
document.getElementById("f").addEventListener("load", function () {{
  var d = this.contentDocument, root = d.documentElement, wide = [];
  d.querySelectorAll("body *").forEach(function (n) {{
    if (n.getBoundingClientRect().right > root.clientWidth + 0.5) wide.push(n.tagName + "." + n.className);
  }});
  document.getElementById("out").textContent = JSON.stringify({{scroll: root.scrollWidth, client: root.clientWidth,
    answers: d.querySelectorAll("article.answer").length, wide: wide.slice(0, 5)}});
}});
</script></body></html>"""


def _layout(chromium: str, page: Path, tmp_path: Path, width: int = 1280) -> dict[str, object]:
    """Lay *page* out in a *width*-px frame (a test harness page; the report itself has no script)."""
    import json

    harness = page.parent / f"harness-{page.stem}.html"
    harness.write_text(_HARNESS.format(page=page.name, width=width))
    rendered = _run(chromium, harness, tmp_path, "--allow-file-access-from-files", "--virtual-time-budget=5000",
                    "--dump-dom")
    found = re.search(r'<pre id="out">([^<]*)</pre>', rendered.dom)
    assert found is not None and found.group(1) != "pending", rendered.stderr[-2000:]
    result: dict[str, object] = json.loads(found.group(1))
    return result


def test_layout_check_can_fail(chromium: str, tmp_path: Path) -> None:
    wide = tmp_path / "wide.html"
    wide.write_text('<!DOCTYPE html><html><body><div style="width:1500px">too wide</div></body></html>')
    layout = _layout(chromium, wide, tmp_path)
    assert layout["wide"] and layout["scroll"] > layout["client"]  # type: ignore[operator]


def test_each_answer_reads_on_one_1280px_screen(chromium: str, page: Path, tmp_path: Path) -> None:
    """At 1,280 px nothing runs off the page (no horizontal scroll), long ids and answers included; and
    the screenshot at that width is a real page."""
    layout = _layout(chromium, page, tmp_path)
    assert layout["answers"] == 5
    assert layout["wide"] == [] and layout["scroll"] == layout["client"], layout
    shot = tmp_path / "answers-1280.png"
    rendered = _run(chromium, page, tmp_path, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}")
    assert rendered.returncode == 0 and rendered.console == [], rendered.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
