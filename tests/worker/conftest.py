"""Fixtures of the worker's tests: the loopback model, a real OTLP receiver standing in for the
Collector the worker sends to, a worker in this process, and the test apps run as processes of
their own (real senders: the apps import no ragaudit code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_server import LLMServer
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.topics import answer_for, topic_documents

ROOT = Path(__file__).resolve().parents[2]
_TEXTS = [text for _, text, _ in topic_documents()]


def rag_rule(body: dict[str, Any]) -> str | None:
    """The loopback model's answer: the first sentence of the first knowledge-base document in the
    prompt (whatever the framework's prompt template), so every answer is tied to its evidence."""
    messages = body.get("messages") or []
    prompt = " ".join(m.get("content") if isinstance(m.get("content"), str) else
                      " ".join(p.get("text", "") for p in m.get("content") or [] if isinstance(p, dict))
                      for m in messages if isinstance(m, dict))
    hits = sorted((prompt.find(t), t) for t in _TEXTS if t in prompt)
    return answer_for(hits[0][1]) if hits else None


@pytest.fixture(scope="module")
def rag_llm() -> Iterator[LLMServer]:
    with LLMServer(rule=rag_rule) as srv:
        yield srv


@pytest.fixture
def collector() -> Iterator[OTLPReceiver]:
    """A real OTLP/HTTP receiver for traces, logs and metrics (where the worker sends)."""
    with OTLPReceiver() as rx:
        yield rx


@pytest.fixture
def make_worker(collector: OTLPReceiver) -> Iterator[Callable[..., Any]]:
    from ragaudit import LexicalJudge
    from ragaudit.integrations.otlp import Worker

    started: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("judge", LexicalJudge())
        kwargs.setdefault("otlp_endpoint", collector.endpoint)
        kwargs.setdefault("quiet_s", 0.3)
        kwargs.setdefault("max_wait_s", 20.0)
        kwargs.setdefault("metrics_interval_s", 0.5)
        worker = Worker(port=0, **kwargs).start()
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop(10)


def run_app(module: str, args: list[str], env: dict[str, str], timeout: float = 180) -> list[dict[str, Any]]:
    """Run a test app (``python -m module args``) and return its JSON output lines."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", module, *args], env=full, capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)
    assert done.returncode == 0, f"{module} failed:\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def check_judged_once(collector: OTLPReceiver, expected: list[dict[str, Any]], app_spans: bool = True
                      ) -> list[dict[str, Any]]:
    """Every expected turn {question, answer, ids} has exactly one ``ragaudit.judge`` span with that
    question, answer and evidence ids, in the app's trace under its root span, and three
    ``gen_ai.evaluation.result`` log records on the model call that produced the answer.

    Returns the judge spans in the order of *expected*."""
    collector.wait_for_spans(len(expected), timeout=30, predicate=lambda s: s["name"] == "ragaudit.judge")
    collector.wait_for_logs(3 * len(expected), timeout=30)
    judges = collector.spans_named("ragaudit.judge")
    assert len(judges) == len(expected), [json.loads(j["attributes"]["input.value"])["query"] for j in judges]
    spans = collector.spans
    out = []
    for turn in expected:
        mine = [j for j in judges if json.loads(j["attributes"]["input.value"])["query"] == turn["question"]]
        assert len(mine) == 1, turn
        judge = mine[0]
        shown = json.loads(judge["attributes"]["input.value"])
        assert shown["answer"] == turn["answer"]
        assert shown["document_ids"] == turn["ids"]
        assert judge["resource"]["service.name"] == "ragaudit-worker"
        logs = [r for r in collector.logs if r["attributes"].get("ragaudit.turn.id") == shown["turn_id"]]
        assert sorted(r["attributes"]["gen_ai.evaluation.name"] for r in logs) == [
            "answer_relevance", "context_relevance", "faithfulness"]
        assert all(r["event_name"] == "gen_ai.evaluation.result" and r["trace_id"] == judge["trace_id"]
                   for r in logs)
        if app_spans:
            app = [s for s in spans if s["trace_id"] == judge["trace_id"] and s["name"] != "ragaudit.judge"]
            root = [s for s in app if s["parent_span_id"] is None]
            assert len(root) == 1 and judge["parent_span_id"] == root[0]["span_id"]
            evaluated = [s for s in app if s["span_id"] == logs[0]["span_id"]]
            assert evaluated, "the log records' span id is not a span of the app's trace"
            assert turn["answer"] in json.dumps(evaluated[0]["attributes"])
        out.append(judge)
    return out
