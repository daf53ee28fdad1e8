"""Score metrics: every AuditRecord as OTel metrics, through the real metrics SDK (InMemoryMetricReader).

The Auditor records into the MeterProvider it is given or the global one (a no-op until the app
configures an SDK); attributes are the low-cardinality ones declared in the conventions, never the
question, ids or other metadata; the table in docs/guides/alerts.md lists exactly the declared names.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ragaudit import (
    Auditor,
    Budget,
    CostControl,
    FakeJudge,
    Judgement,
    JudgeRequest,
    RagTurn,
    RetrievedDoc,
    SentenceVerdict,
)
from ragaudit.records import Citation
from ragaudit.tracing import conventions as c

DOCS = Path(__file__).resolve().parents[1] / "docs" / "guides" / "alerts.md"


def _turn(n: int, **metadata: Any) -> RagTurn:
    docs = (RetrievedDoc("d1", "Paris is the capital of France.", rank=1),
            RetrievedDoc("d2", "Berlin is the capital of Germany.", rank=2))
    answer = "Paris is the capital [1]. It has 9 moons [2]."
    return RagTurn(turn_id=f"t{n}", query=f"secret question {n}?", answer=answer, documents=docs,
                   citations=(Citation("d1", 1, "[1]"), Citation("d2", 2, "[2]")), model="gpt-app",
                   metadata={"run_name": "qa_chain", "prompt_version": "v3", "customer_id": f"c{n}", **metadata})


def _full_audit(request: JudgeRequest) -> Judgement:
    return Judgement(faithfulness=0.5, context_relevance=0.75, answer_relevance=1.0, judge="scripted", sentences=(
        SentenceVerdict(1, "Paris is the capital [1].", "supported", (1,), ("d1",)),
        SentenceVerdict(2, "It has 9 moons [2].", "contradicted", (), ())))


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    return {m.name: list(m.data.data_points) for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics for m in sm.metrics}


def _auditor(provider: Any, judge: Any = None, **kwargs: Any) -> Auditor:
    return Auditor(judge or FakeJudge(_full_audit, name="scripted"), audit_log=None, handle_signals=False,
                   meter_provider=provider, **kwargs)


def test_every_score_sentence_and_citation_is_a_metric_with_only_low_cardinality_attributes() -> None:
    reader = InMemoryMetricReader()
    auditor = _auditor(MeterProvider(metric_readers=[reader]))
    try:
        for n in range(3):
            auditor.submit(_turn(n))
        assert auditor.force_flush(10.0)
    finally:
        auditor.shutdown(10.0)
    points = _points(reader)
    expected = {c.ATTR_RUN_NAME: "qa_chain", c.ATTR_PROMPT_VERSION: "v3", c.ATTR_MODEL: "gpt-app",
                c.ATTR_JUDGE_NAME: "scripted"}
    for metric, total in (("ragaudit.score.faithfulness", 1.5), ("ragaudit.score.context_relevance", 2.25),
                          ("ragaudit.score.answer_relevance", 3.0), ("ragaudit.score.citation_precision", 1.5)):
        (point,) = points[metric]
        assert (point.count, point.sum, dict(point.attributes)) == (3, pytest.approx(total), expected)
        assert tuple(point.explicit_bounds) == c.SCORE_BUCKETS
    # Citation recall: the one supported sentence cites a document that holds -> 1.0 each time.
    assert points["ragaudit.score.citation_recall"][0].sum == pytest.approx(3.0)
    assert "ragaudit.score.graded_ndcg" not in points  # the judge graded no document: no value, no point
    sentences = {p.attributes[c.ATTR_SENTENCE_VERDICT]: p.value for p in points[c.METRIC_SENTENCES]}
    assert sentences == {"supported": 3, "contradicted": 3}
    citations = {p.attributes[c.ATTR_CITATION_RESULT]: p.value for p in points[c.METRIC_CITATIONS]}
    assert citations == {"holds": 3, "fails": 3}
    (turns,) = points[c.METRIC_TURNS]
    assert (turns.value, dict(turns.attributes)) == (3, {**expected, c.ATTR_JUDGE_STATUS: "judged"})
    for metric in points.values():  # never the question, a turn id or other metadata
        for point in metric:
            assert set(point.attributes) <= {*c.TURN_METRIC_ATTRIBUTES, c.ATTR_JUDGE_STATUS, c.ATTR_UNJUDGED_REASON,
                                             c.ATTR_SENTENCE_VERDICT, c.ATTR_CITATION_RESULT}
            assert not any("secret" in str(v) or (str(v).startswith(("t", "c")) and str(v)[1:].isdigit())
                           for v in point.attributes.values())


def test_unjudged_and_failed_turns_are_counted_by_reason() -> None:
    reader = InMemoryMetricReader()

    def flaky(request: JudgeRequest) -> dict[str, Any]:
        if "1" in request.query:
            raise RuntimeError("judge down")
        return {"faithfulness": 0.9}

    auditor = _auditor(MeterProvider(metric_readers=[reader]), FakeJudge(flaky, name="flaky"),
                       cost=CostControl(budget=Budget(max_calls=2)), mode="inline")
    try:
        for n in range(4):
            auditor.submit(_turn(n, **{"service.name": "shop-api"}))
        assert auditor.force_flush(10.0)
    finally:
        auditor.shutdown(10.0)
    points = _points(reader)
    outcomes = {(p.attributes[c.ATTR_JUDGE_STATUS], p.attributes.get(c.ATTR_UNJUDGED_REASON)): p.value
                for p in points[c.METRIC_TURNS]}
    assert outcomes == {("judged", None): 1, ("failed", None): 1, ("unjudged", "over_budget"): 2}
    assert all(p.attributes[c.ATTR_SERVICE_NAME] == "shop-api" for p in points[c.METRIC_TURNS])
    (faithfulness,) = points["ragaudit.score.faithfulness"]  # a failed judgement records no score
    assert faithfulness.count == 1


def test_one_batch_of_mixed_records_counts_each_attribute_set_exactly() -> None:
    # The exporter sums a batch's counts and adds them once per metric and attribute set: records of
    # two models, judged and unjudged, in one export, each counted under its own attributes.
    from ragaudit.content import ContentPolicy
    from ragaudit.records import AuditRecord
    from ragaudit.tracing.score_metrics import ScoreMetricsExporter

    reader = InMemoryMetricReader()
    exporter = ScoreMetricsExporter(MeterProvider(metric_readers=[reader]), judge_name="scripted")
    request = JudgeRequest(query="q?", answer="a", context="c")
    judged = [AuditRecord(replace(_turn(n), model=model), ContentPolicy(), judgement=_full_audit(request))
              for n, model in enumerate(("gpt-a", "gpt-b", "gpt-a"))]
    unjudged = AuditRecord(replace(_turn(9), model="gpt-a"), ContentPolicy(), unjudged="over_budget")
    exporter.export([*judged, unjudged])
    points = _points(reader)
    turns = {(p.attributes[c.ATTR_MODEL], p.attributes[c.ATTR_JUDGE_STATUS]): p.value for p in points[c.METRIC_TURNS]}
    assert turns == {("gpt-a", "judged"): 2, ("gpt-b", "judged"): 1, ("gpt-a", "unjudged"): 1}
    sentences = {(p.attributes[c.ATTR_MODEL], p.attributes[c.ATTR_SENTENCE_VERDICT]): p.value
                 for p in points[c.METRIC_SENTENCES]}
    assert sentences == {("gpt-a", "supported"): 2, ("gpt-a", "contradicted"): 2,
                         ("gpt-b", "supported"): 1, ("gpt-b", "contradicted"): 1}
    faithfulness = {p.attributes[c.ATTR_MODEL]: p.count for p in points[c.SCORE_METRICS["faithfulness"]]}
    assert faithfulness == {"gpt-a": 2, "gpt-b": 1}


def test_the_global_meter_provider_is_used_and_without_an_sdk_nothing_is_lost() -> None:
    from opentelemetry.metrics import _internal as metrics_internal

    # No SDK configured: the API's no-op provider; judging and the other exporters go on unaffected.
    auditor = _auditor(None)
    try:
        auditor.submit(_turn(0))
        assert auditor.force_flush(10.0)
        assert auditor.stats()["judged"] == 1 and auditor.stats()["export_errors"] == 0
    finally:
        auditor.shutdown(10.0)
    reader = InMemoryMetricReader()
    saved = metrics_internal._METER_PROVIDER
    metrics_internal._METER_PROVIDER = MeterProvider(metric_readers=[reader])  # this test's own, put back below
    try:
        auditor = _auditor(None)
        auditor.submit(_turn(1))
        assert auditor.force_flush(10.0)
        auditor.shutdown(10.0)
    finally:
        metrics_internal._METER_PROVIDER = saved
    assert _points(reader)["ragaudit.score.faithfulness"][0].count == 1


def test_a_meter_provider_that_is_not_one_is_a_configuration_error() -> None:
    from ragaudit.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="meter_provider must be an OpenTelemetry MeterProvider"):
        _auditor("http://localhost:9464")


def test_session_verdicts_are_counted() -> None:
    reader = InMemoryMetricReader()
    judge = FakeJudge(_full_audit, name="scripted", session=lambda request: {"resolved": "yes"})
    auditor = _auditor(MeterProvider(metric_readers=[reader]), judge, sessions=True)
    try:
        for n in range(2):
            auditor.submit(_turn(n, session_id="s1"))
        assert auditor.force_flush(10.0)
        auditor.end_session("s1")
        assert auditor.force_flush(10.0)
    finally:
        auditor.shutdown(10.0)
    points = _points(reader)
    (sessions,) = points[c.METRIC_SESSIONS]
    assert sessions.value == 1
    assert dict(sessions.attributes) == {c.ATTR_JUDGE_NAME: "scripted", c.ATTR_SESSION_RESOLVED: "yes",
                                         c.ATTR_SESSION_CONTRADICTED: False, c.ATTR_SESSION_PARTIAL: False}
    (groundedness,) = points[c.METRIC_SESSION_GROUNDEDNESS]
    assert groundedness.sum == pytest.approx(0.5)  # one supported, one contradicted sentence per turn


def test_the_docs_table_lists_exactly_the_declared_metrics() -> None:
    rows = re.findall(r"^\| `([a-z_.]+)` \| (\w+) \| `([^`]*)` \| ([^|]+) \|", DOCS.read_text(), re.MULTILINE)
    documented = {name: (instrument, unit, tuple(re.findall(r"`([^`]+)`", attrs)))
                  for name, instrument, unit, attrs in rows}
    declared = {spec.name: (spec.instrument, spec.unit, spec.attributes) for spec in c.METRICS}
    assert documented == declared


def _prometheus_names() -> tuple[set[str], set[str]]:
    """The series and labels Prometheus shows of the declared metrics (OTel's Prometheus naming)."""
    series: set[str] = set()
    for spec in c.METRICS:
        base = spec.name.replace(".", "_")
        suffixes = ("total",) if spec.instrument == "counter" else ("bucket", "sum", "count")
        series |= {f"{base}_{suffix}" for suffix in suffixes}
    labels = {a.replace(".", "_") for spec in c.METRICS for a in spec.attributes} | {"le"}
    return series, labels


def test_the_example_rules_and_dashboard_name_only_declared_series_and_labels() -> None:
    import json

    import yaml

    examples = Path(__file__).resolve().parents[1] / "examples"
    rules = yaml.safe_load((examples / "prometheus" / "alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((examples / "grafana" / "ragaudit-dashboard.json").read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    series, labels = _prometheus_names()
    used_series = {name for expr in exprs for name in re.findall(r"\b(ragaudit_\w+)\s*[{[]", expr)}
    used_labels = {label.strip() for expr in exprs for group in re.findall(r"by \(([^)]*)\)", expr)
                   for label in group.split(",")}
    used_labels |= {name for expr in exprs for name in re.findall(r"(\w+)\s*[!=]~?\s*\"", expr)}
    assert used_series and used_series <= series, used_series - series
    assert used_labels and used_labels <= labels, used_labels - labels
    assert {rule["alert"] for group in rules["groups"] for rule in group["rules"]} == {
        "RagFaithfulnessLow", "RagUnsupportedSentencesUp", "RagJudgingFailing", "RagJudgeBudgetExhausted"}
