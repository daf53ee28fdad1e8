"""`ragaudit worker` with a real Phoenix: a LangChain app (OpenInference, no ragaudit code) sends its
traces to the worker and to Phoenix (the Collector's fan-out, done by the app's two exporters here);
the worker, run as the ``ragaudit worker`` command, sends its judge spans to Phoenix, which shows each
judgement in the app's own trace, under the app's root span, in the app's project."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from typing import Any

import pytest

from tests.support.llm_server import LLMServer
from tests.support.phoenix import PhoenixServer
from tests.support.ports import free_port
from tests.support.topics import QUESTIONS
from tests.worker.conftest import ROOT, rag_rule, run_app, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def test_worker_judgements_shown_by_phoenix(phoenix: PhoenixServer) -> None:
    project = f"ragaudit-worker-{uuid.uuid4().hex[:8]}"
    resource = f"openinference.project.name={project}"  # the standard variable, read by both SDKs
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT / "src"), OTEL_RESOURCE_ATTRIBUTES=resource)
    worker = subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port),
                               "--otlp-endpoint", phoenix.base_url, "--quiet", "0.5"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    questions = QUESTIONS[6:8]
    try:
        wait_for(lambda: _healthy(url) or worker.poll() is not None, timeout=60, what="the worker")
        assert worker.poll() is None
        with LLMServer(rule=rag_rule) as llm:
            expected = run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openinference", *questions],
                               {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "test",
                                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url + "/v1/traces",
                                "APP_ALSO_EXPORT_TO": phoenix.otlp_http_endpoint,
                                "OTEL_RESOURCE_ATTRIBUTES": resource})
        spans = phoenix.wait_for_spans(project, lambda s: sum(x["name"] == "ragaudit.judge" for x in s) >= 2,
                                       timeout=60)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err[-3000:]
    judges = [s for s in spans if s["name"] == "ragaudit.judge"]
    assert len(judges) == len(questions)
    for turn in expected:
        [judge] = [j for j in judges if json.loads(j["attributes"]["input.value"])["query"] == turn["question"]]
        attrs: dict[str, Any] = judge["attributes"]
        assert judge["span_kind"] == "EVALUATOR"
        assert json.loads(attrs["input.value"])["document_ids"] == turn["ids"]
        assert attrs["ragaudit.judge.faithfulness"] == pytest.approx(1.0)
        root = next(s for s in spans if s["context"]["span_id"] == judge["parent_id"])
        assert root["parent_id"] is None and root["context"]["trace_id"] == judge["context"]["trace_id"]
        assert root["attributes"]["input.value"] == turn["question"]
        events = [e for e in judge.get("events", []) if e["name"] == "gen_ai.evaluation.result"]
        assert len(events) == 3
