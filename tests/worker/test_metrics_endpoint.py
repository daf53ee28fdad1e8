"""``/metrics`` on the worker: Prometheus's text format of the worker's own counters and the score
metrics of the turns it judged, labelled with the app's service, run name, model and judge; behind
the bearer token like ``/stats``."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.worker.conftest import wait_for
from tests.worker.scripted_judge import DROP_MARKER, judge
from tests.worker.spans import SpanMaker, encode, rag_trace


def _post(url: str, body: bytes, token: str | None = None) -> None:
    headers = {"Content-Type": "application/x-protobuf", **({"Authorization": f"Bearer {token}"} if token else {})}
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/traces", data=body, headers=headers), timeout=10):
        pass


def scrape(url: str, token: str | None = None) -> dict[str, list[Any]]:
    """Every sample of ``/metrics`` by sample name (``..._bucket``, ``..._count``, ``..._total``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url + "/metrics", headers=headers), timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_metrics_serves_scores_and_the_workers_counters(make_worker: Any) -> None:
    worker = make_worker(judge=judge)
    maker = SpanMaker(service="shop-api")
    _post(worker.url, encode(rag_trace(maker)))
    _post(worker.url, encode(rag_trace(maker, question=f"Warranty {DROP_MARKER}?")))
    wait_for(lambda: worker.stats()["auditor"].get("judged", 0) == 2, what="two turns judged")
    assert worker.auditor.force_flush(10.0)
    samples = scrape(worker.url)
    (count,) = samples["ragaudit_score_faithfulness_count"]
    assert count.value == 2
    assert {k: v for k, v in count.labels.items() if not k.startswith("otel_")} == {
        "service_name": "shop-api", "ragaudit_run_name": "RunnableSequence", "ragaudit_model": "gpt-4o-mini",
        "ragaudit_judge_name": "scripted"}
    (total,) = samples["ragaudit_score_faithfulness_sum"]
    assert total.value == pytest.approx(1.1)
    below_half = [b for b in samples["ragaudit_score_faithfulness_bucket"] if b.labels["le"] == "0.5"]
    assert below_half[0].value == 1
    verdicts = {s.labels["ragaudit_sentence_verdict"]: s.value for s in samples["ragaudit_sentences_total"]}
    assert verdicts == {"supported": 1, "unsupported": 1}
    assert {s.labels["ragaudit_judge_status"]: s.value for s in samples["ragaudit_turns_total"]} == {"judged": 2}
    assert samples["ragaudit_worker_turns_judged_total"][0].value == 2  # the worker's own, same endpoint
    assert "target_info" in samples  # the worker's resource: service_name="ragaudit-worker"


def test_metrics_needs_the_token_when_one_is_set(make_worker: Any) -> None:
    worker = make_worker(judge=judge, auth_token="s3cret-token-for-tests")
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(worker.url)
    assert refused.value.code == 401
    assert "ragaudit_worker_spans_received_total" in scrape(worker.url, token="s3cret-token-for-tests")
