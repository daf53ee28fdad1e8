"""The docs site: it builds with ``--strict``, its API reference covers the public face, and every
code block of the quick-start pages runs as written.

The quick starts are run the way a reader would run them: the page's ``python`` blocks, in order, as
one script in a fresh directory, with the frameworks' real OpenAI classes pointed at the loopback
chat-completions server (``OPENAI_BASE_URL``) and the spans sent over OTLP/HTTP to a loopback
receiver (``OTEL_EXPORTER_OTLP_ENDPOINT``); then the page's ``ragaudit ...`` shell lines. A page whose
code stops working fails here, so the docs cannot rot.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_server import LLMServer, judgement_json
from tests.support.otlp_receiver import OTLPReceiver

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
RAW_ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj):`")
PRIVATE_ANCHOR = re.compile(r'(?:id|href)="[^"]*ragaudit(?:\.\w+)*\._\w+')
ANSWER = "Items can be returned within 30 days of delivery for a full refund. [returns]"


def code_blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in _FENCE.findall(page.read_text(encoding="utf-8")) if lang == language]


def _model(body: dict[str, Any]) -> str:
    text = json.dumps(body.get("messages", ""))
    if body.get("response_format") or "RAG evaluator" in text:  # the judge
        return judgement_json(0.9, 0.8, 0.85, reason="supported by the returns policy")
    return ANSWER


def _env(srv: LLMServer, receiver: OTLPReceiver) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "RAGAUDIT_"))}
    env.update(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=srv.base_url, OPENAI_API_BASE=srv.base_url,
               OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME="docs-quickstart",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH")) if p))
    return env


QUICK_STARTS = sorted(p.name for p in (DOCS / "quickstart").glob("*.md") if code_blocks(p, "python"))
WORKER_PORT = "4319"  # the port the OTLP worker page uses; the test gives the worker a free one instead


def _free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _start_worker(page: Path, port: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str] | None:
    """The page's ``ragaudit worker ...`` line, started in the background on *port*, ready once it
    answers /readyz; None when the page starts no worker."""
    import urllib.request

    lines = [line for block in code_blocks(page, "bash") for line in block.splitlines()
             if line.startswith("ragaudit worker")]
    if not lines:
        return None
    argv = shlex.split(lines[0].replace(WORKER_PORT, port))[1:]
    worker = subprocess.Popen([sys.executable, "-m", "ragaudit.cli", *argv], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                return worker
        except OSError:
            time.sleep(0.1)
    worker.kill()
    raise AssertionError(f"the worker of {page.name} did not start: {worker.communicate()[0][-3000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("page", QUICK_STARTS)
def test_quick_start_runs_as_written(page: str, tmp_path: Path) -> None:
    path = DOCS / "quickstart" / page
    port = _free_port()
    script = tmp_path / "app.py"
    script.write_text("\n\n".join(code_blocks(path, "python")).replace(f":{WORKER_PORT}/", f":{port}/"),
                      encoding="utf-8")
    with LLMServer(_model) as srv, OTLPReceiver() as receiver:
        env = _env(srv, receiver)
        worker = _start_worker(path, port, tmp_path, env)
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-4000:]
        if worker is not None:  # no ragaudit in the app: the worker judged its trace
            try:
                receiver.wait_for_spans(1, timeout=60, predicate=lambda s: s["name"] == "ragaudit.judge")
                receiver.wait_for_logs(3, timeout=30)
                assert len([r for r in srv.requests if "RAG evaluator" in r.prompt_text]) == 1
            finally:
                worker.terminate()
                assert worker.wait(60) == 0
            return
        lines = [json.loads(x) for x in (tmp_path / "ragaudit-audit.jsonl").read_text().splitlines()]
        questions = [line for line in lines if line.get("turn", line).get("query") or line.get("question")]
        assert lines and len(questions) == len(lines)
        judge_calls = [r for r in srv.requests if "RAG evaluator" in r.prompt_text]
        assert len(judge_calls) == len(lines), "one judge call per judged answer"
        receiver.wait_for_spans(1, timeout=30, predicate=lambda s: s["name"] == "ragaudit.judge")
        for block in code_blocks(path, "bash"):
            for line in block.splitlines():
                if line.startswith("ragaudit "):
                    argv = shlex.split(line.split("#", 1)[0])[1:]
                    shell = subprocess.run([sys.executable, "-m", "ragaudit.cli", *argv], cwd=tmp_path, env=env,
                                           capture_output=True, text=True, timeout=120)
                    assert shell.returncode == 0, (line, shell.stderr[-2000:])
                    assert "turns in the log" in shell.stdout


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
        assert (DOCS / "images" / image).stat().st_size > 10_000, f"docs/images/{image} is missing or empty"
