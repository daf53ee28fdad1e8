"""The docs site: it builds with ``--strict``, its API reference covers the public face, and every
code block of the quick-start pages runs as written.

The quick starts are run the way a reader would run them (tests/support/quickstart.py): the page's
marked ``python`` blocks, in order, as one script in a fresh directory, with the frameworks' real OpenAI
classes pointed at the loopback chat-completions server (``OPENAI_BASE_URL``, ``OPENAI_API_BASE``) and
the spans sent over OTLP/HTTP to a loopback receiver (``OTEL_EXPORTER_OTLP_ENDPOINT``); then the page's
marked ``ragaudit ...`` shell lines. A page whose code stops working fails here, so the docs cannot rot.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.support.quickstart import blocks, install_requirements, run_page

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RAW_ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj):`")
PRIVATE_ANCHOR = re.compile(r'(?:id|href)="[^"]*ragaudit(?:\.\w+)*\._\w+')
QUICK_STARTS = sorted(p.name for p in (DOCS / "quickstart").glob("*.md") if blocks(p, "run", "python"))


def test_every_quick_start_marks_what_runs_and_what_to_install() -> None:
    # The marks are what CI runs (here in the dev venv, and in a fresh venv per page: noxfile.py); a
    # page whose code has no mark would never be checked.
    assert QUICK_STARTS == ["langchain.md", "llamaindex.md", "otlp-worker.md"]
    for page in QUICK_STARTS:
        path = DOCS / "quickstart" / page
        assert install_requirements(path), f"{page}: no <!-- quickstart: install --> pip line"
        assert len(re.findall(r"^```python", path.read_text(encoding="utf-8"), re.M)) - \
            len(blocks(path, "run", "python")) <= 1, f"{page}: more than the one offline tip is unmarked"


@pytest.mark.slow
@pytest.mark.parametrize("page", QUICK_STARTS)
def test_quick_start_runs_as_written(page: str, tmp_path: Path) -> None:
    # The page's marked code, in this venv, with ragaudit from src; `nox -s user_install` does the same in
    # an empty venv with only the page's install line.
    pythonpath = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = run_page(DOCS / "quickstart" / page, tmp_path, pythonpath=pythonpath)
    assert result["judged"] >= 1


def test_docs_build_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (the docs extra)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    build = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    assert "WARNING" not in build.stderr, build.stderr[-4000:]
    site = tmp_path / "site"
    for module_name in ("ragaudit", "ragaudit.integrations.langchain", "ragaudit.integrations.llamaindex"):
        reference = (site / "reference" / module_name / "index.html").read_text(encoding="utf-8")
        module = importlib.import_module(module_name)
        for name in module.__all__:
            assert f"{module_name}.{name}" in reference, f"{module_name}.{name} missing from the API reference"
    pages = {str(p.relative_to(site)): p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    # Every docstring cross-reference is one mkdocstrings renders: no reST role is left as text.
    raw = {page: found for page, html in pages.items() if (found := RAW_ROLE.findall(html))}
    assert raw == {}, raw
    # Only public names: no entry is rendered, or linked to, under a private module's path.
    private = {page: found for page, html in pages.items() if page.startswith("reference/")
               and (found := PRIVATE_ANCHOR.findall(html))}
    assert private == {}, private
    assert "## [Unreleased]" not in pages["changelog/index.html"] and "Unreleased" in pages["changelog/index.html"]
    for image in re.findall(r"\]\((?:\.\./)*images/([\w.-]+)\)", "".join(
            p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))):
        if image.endswith(".svg"):  # a drawing: it parses and draws something (a few KB is normal)
            drawing = ElementTree.parse(DOCS / "images" / image).getroot()
            assert drawing.tag.endswith("svg") and any(e.tag.endswith("rect") for e in drawing.iter()), image
            continue
        assert (DOCS / "images" / image).stat().st_size > 10_000, f"docs/images/{image} is missing or empty"


def test_troubleshooting_names_only_counters_that_exist() -> None:
    # The page tells a user which counter to read: each one it names must be one stats() has.
    from ragaudit import Auditor, LexicalJudge
    from ragaudit.integrations.otlp._core import _COUNTERS
    from ragaudit.records import UNSUBMITTED_REASONS

    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    auditor = Auditor(LexicalJudge(), audit_log=None)
    try:
        keys = set(auditor.stats())
    finally:
        auditor.shutdown(10)
    named = set(re.findall(r'stats\(\)\["(\w+)"\]', page))
    assert named and named - keys == set()
    worker = {w for w in re.findall(r"`((?:turns|traces|spans|requests)_?\w*)`", page) if "<" not in w}
    assert worker and worker - set(_COUNTERS) - {"requests"} == set(), worker - set(_COUNTERS)
    assert {f"unjudged_{reason}" for reason in UNSUBMITTED_REASONS} <= named


def test_every_file_architecture_md_names_exists() -> None:
    # ARCHITECTURE.md walks the code file by file; a file renamed or removed must take the page with it.
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`([\w./-]+\.(?:py|c|h))`", text))
    candidates = [ROOT / "noxfile.py", *(p for top in ("src", "tests", "benchmarks", "examples")
                                         for p in (ROOT / top).rglob("*") if "node_modules" not in p.parts)]
    files = [p.relative_to(ROOT).as_posix() for p in candidates if p.suffix in {".py", ".c", ".h"}]
    missing = sorted(name for name in named if not any(f == name or f.endswith("/" + name) for f in files))
    assert len(named) > 60 and not missing, missing
