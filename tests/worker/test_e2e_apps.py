"""End to end: real apps with real instrumentations send OTLP to the worker; judgements arrive as
spans and log records at a real OTLP receiver. The apps run as processes of their own and import
no ragaudit code (tests/worker/apps)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.topics import QUESTIONS
from tests.worker.conftest import check_judged_once, run_app, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

_QUESTIONS = QUESTIONS[:3]


def _app_env(rag_llm: Any, worker: Any, collector: Any) -> dict[str, str]:
    return {"OPENAI_BASE_URL": rag_llm.base_url, "OPENAI_API_KEY": "test",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": worker.url + "/v1/traces",
            # The Collector's fan-out stand-in: the app's spans also reach the receiver, so the test
            # sees the judge span next to the trace it judges.
            "APP_ALSO_EXPORT_TO": collector.traces_url}


@pytest.mark.parametrize("instrumentation", ["openinference", "openllmetry"])
def test_langchain_app_judged_once_per_turn(instrumentation: str, rag_llm: Any, collector: Any,
                                            make_worker: Any) -> None:
    worker = make_worker()
    expected = run_app("tests.worker.apps.langchain_rag", ["--instrumentation", instrumentation, *_QUESTIONS],
                       _app_env(rag_llm, worker, collector))
    assert [t["question"] for t in expected] == _QUESTIONS
    assert all(t["ids"][0].split("-")[0] in t["question"] for t in expected)
    judges = check_judged_once(collector, expected)
    assert all(j["attributes"]["ragaudit.judge.faithfulness"] == 1.0 for j in judges)
    stats = worker.stats()
    assert stats["turns_judged"] == len(_QUESTIONS) and stats["turns_found"] == len(_QUESTIONS)
    # The evaluated completion's id (issue 28): the app's own chat completion, never the judge's.
    ids = {r["attributes"]["gen_ai.response.id"] for r in collector.logs}
    assert len(ids) == len(_QUESTIONS) and all(i.startswith("chatcmpl-loopback-") for i in ids)


def test_llamaindex_app_judged_once_per_turn(rag_llm: Any, collector: Any, make_worker: Any) -> None:
    worker = make_worker()
    expected = run_app("tests.worker.apps.llamaindex_rag", _QUESTIONS, _app_env(rag_llm, worker, collector))
    check_judged_once(collector, expected)
    stats = worker.stats()
    assert stats["turns_judged"] == len(_QUESTIONS)
    # The retriever calls the app made on its own (to know the expected ids) have no model call.
    assert stats["traces_no_model_call"] == len(_QUESTIONS) + stats["traces_assembled"] - 2 * len(_QUESTIONS)


def test_worker_metrics_reach_the_receiver(rag_llm: Any, collector: Any, make_worker: Any) -> None:
    worker = make_worker()
    run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openinference", _QUESTIONS[0]],
            _app_env(rag_llm, worker, collector))
    wait_for(lambda: worker.stats()["turns_judged"] == 1, what="one judgement")
    names = {"ragaudit.worker.turns_judged", "ragaudit.worker.spans_received", "ragaudit.worker.traces_in_flight",
             "ragaudit.worker.judge_latency"}
    wait_for(lambda: names <= collector.metric_names(), what=f"metrics {names}")
    assert json.loads(json.dumps(worker.stats()))["spans_received"] > 0
