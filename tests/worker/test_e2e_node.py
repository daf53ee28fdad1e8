"""End to end: a TypeScript LangChain.js RAG app on Node 20 (tests/worker/node_app), traced by
``@arizeai/openinference-instrumentation-langchain`` and exported by
``@opentelemetry/exporter-trace-otlp-proto`` (chunked bodies, no content-length), judged by the worker.

The app's npm packages are installed by this test's setup into a cache directory (keyed by the
package.json; ``RAGAUDIT_NODE_CACHE`` overrides where); the test skips, saying why, when Node 20+ or
the npm registry is not available.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.topics import QUESTIONS, topic_documents
from tests.worker.conftest import check_judged_once

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

APP = Path(__file__).parent / "node_app"


@pytest.fixture(scope="module")
def node_app() -> Path:
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed (the LangChain.js sender needs Node 20+)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.skip(f"Node {version} is older than 20")
    manifest = (APP / "package.json").read_bytes()
    key = hashlib.sha256(manifest).hexdigest()[:12]
    base = Path(os.environ.get("RAGAUDIT_NODE_CACHE", Path.home() / ".cache" / "ragaudit-tests"))
    target = base / f"lcjs-app-{key}"
    target.mkdir(parents=True, exist_ok=True)
    (target / "package.json").write_bytes(manifest)
    shutil.copy(APP / "app.ts", target / "app.ts")
    if not (target / "node_modules" / ".ready").exists():
        try:
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=target,
                                  capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.skip("npm install took over 15 minutes (is the npm registry reachable?)")
        if done.returncode != 0:
            pytest.skip(f"npm install failed (is the npm registry reachable?): {done.stderr.strip()[-500:]}")
        (target / "node_modules" / ".ready").write_text("ok")
    (target / "kb.json").write_text(json.dumps([list(d) for d in topic_documents()]))
    return target


def _run_app(node_app: Path, rag_llm: Any, traces_url: str, questions: list[str]) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OPENAI_BASE_URL=rag_llm.base_url, OPENAI_API_KEY="test", KB_PATH=str(node_app / "kb.json"),
               OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces_url)
    done = subprocess.run(["node", "--import", "tsx", "app.ts", *questions], cwd=node_app, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [t["question"] for t in expected] == questions
    return expected


def test_langchain_js_app_judged_once_per_turn(node_app: Path, rag_llm: Any, collector: Any,
                                               make_worker: Any) -> None:
    worker = make_worker()
    questions = QUESTIONS[3:6]
    expected = _run_app(node_app, rag_llm, worker.url + "/v1/traces", questions)
    # The app sent its spans to the worker only: the judge spans and log records are checked
    # against what the app printed (question, answer, evidence ids from the retriever's output.value).
    check_judged_once(collector, expected, app_spans=False)
    stats = worker.stats()
    assert stats["turns_judged"] == len(questions) and stats["requests_bad"] == 0
    ids = {r["attributes"].get("gen_ai.response.id") for r in collector.logs}
    assert len(ids) == len(questions) and all(str(i).startswith("chatcmpl-loopback-") for i in ids)


def test_langchain_js_app_through_the_real_collector(node_app: Path, rag_llm: Any, redis: Any, tmp_path: Path) -> None:
    """The same app sending to tier 1 of examples/collector/ on the real Collector, in front of 3 workers
    (tests/support/fleet.py): each turn judged once, its judge span in the app's trace at the backend."""
    from tests.support.fleet import fleet
    from tests.support.llm_server import LLMServer
    from tests.support.otlp_receiver import OTLPReceiver

    questions = QUESTIONS[6:12]
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=1000) as f:
            expected = _run_app(node_app, rag_llm, f.gateway_url + "/v1/traces", questions)
            check_judged_once(backend, expected)
        assert judge.request_count == len(questions)
