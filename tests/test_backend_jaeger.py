"""Jaeger conformance: what a user sees in jaeger-ui for each of our span types.

Read against jaeger v2.20.0 (8498073f): :func:`tests.support.backends.jaeger_span` restates the
OTLP -> Jaeger translation (parent reference type, tags, logs) and
:func:`~tests.support.backends.jaeger_clock_skew_warnings` the clock-skew adjuster. Spans go through
the real OTel SDK and OTLP/HTTP exporter to the loopback receiver, with the resource
:func:`ragaudit.tracing.configure` gives its provider. Turn, retrieval, chat, tool and judge spans,
with content capture on and off.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ragaudit import Judgement
from ragaudit.tracing import SpanRecorder
from ragaudit.tracing.setup import _resource
from tests.support.backends import JAEGER_VERSION, jaeger_clock_skew_warnings, jaeger_span
from tests.support.otlp_receiver import OTLPReceiver
from tests.test_backend_langfuse import ANSWER, JUDGEMENT, QUERY, make_turn

# A judge quicker than the turn it judges: the case Jaeger's clock-skew adjuster flags when it
# compares the two (a judge span longer than its parent is never moved).
QUICK = dataclasses.replace(JUDGEMENT, latency_s=0.01)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as rx:
        yield rx


def record(rx: OTLPReceiver, resource: Resource, *, capture: bool = True, judgement: Judgement = QUICK,
           judge_trace: Any = "turn") -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    rx.clear()
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rx.traces_url)))
    recorder = SpanRecorder(provider, capture_content=capture, judge_trace=judge_trace)
    turn = recorder.record_turn(make_turn())
    # the judge runs after the turn ended, as it does in background mode
    recorder.record_judgement(turn, judgement)
    spans = rx.wait_for_spans(5, timeout=10)
    provider.shutdown()
    assert len(spans) == 5
    return {s["name"].split(" ")[0]: jaeger_span(s) for s in spans}, spans


def test_the_reading_rules_name_their_version() -> None:
    assert JAEGER_VERSION.startswith("jaeger v2.20")


@pytest.mark.parametrize("capture", [True, False], ids=["capture-on", "capture-off"])
def test_each_span_type_shows_what_a_user_expects(receiver: OTLPReceiver, capture: bool) -> None:
    spans, raw = record(receiver, _resource("shop"), capture=capture)
    turn, retrieval, chat, tool, judge = (spans[k] for k in ("ragaudit.turn", "retrieval", "chat", "execute_tool",
                                                            "ragaudit.judge"))
    # parent reference: every span CHILD_OF the turn, the judge included (its link to the turn it
    # judges, which OpenInference requires, says opentracing.ref_type=child_of: else Jaeger would
    # turn the parent reference into FOLLOWS_FROM), and one trace
    assert turn["references"] == []
    for child in (retrieval, chat, tool, judge):
        assert child["references"] == [{"type": "CHILD_OF", "trace_id": turn["trace_id"],
                                         "span_id": turn["span_id"]}], child["operation"]
    assert {s["service"] for s in spans.values()} == {"shop"}

    # tags
    t = turn["tags"]
    assert t["openinference.span.kind"] == "CHAIN" and t["span.kind"] == "internal"
    assert t["session.id"] == "sess-42" and t["user.id"] == "user-7"
    # arrays are one JSON text: a tag search matches only the whole list
    assert t["ragaudit.document.ids"] == '["kb-1","kb-2","kb-3"]'
    assert (t.get("input.value"), t.get("output.value")) == ((QUERY, ANSWER) if capture else (None, None))
    r = retrieval["tags"]
    assert r["gen_ai.operation.name"] == "retrieval" and r["gen_ai.data_source.id"] == "chroma"
    assert r["retrieval.documents.0.document.id"] == "kb-1" and r["ragaudit.document.count"] == 3
    assert r.get("gen_ai.retrieval.query.text") == (QUERY if capture else None)
    assert [d["id"] for d in json.loads(r["gen_ai.retrieval.documents"])] == ["kb-1", "kb-2", "kb-3"]
    ch = chat["tags"]
    assert ch["span.kind"] == "client" and ch["gen_ai.request.model"] == "gpt-test"
    assert (ch["gen_ai.usage.input_tokens"], ch["gen_ai.usage.output_tokens"]) == (40, 12)
    assert ("llm.input_messages.0.message.role" in ch) is capture
    tl = tool["tags"]
    assert tl["gen_ai.tool.name"] == "order_lookup" and tl["gen_ai.tool.call.id"] == "call_1"
    assert tl.get("gen_ai.tool.call.arguments") == ('{"order": "A-1"}' if capture else None)
    j = judge["tags"]
    assert j["ragaudit.judge.faithfulness"] == 0.9 and "ragaudit.judge.context_relevance" not in j
    assert j["ragaudit.judge.missing_scores"] == '["context_relevance"]'
    assert j["gen_ai.response.model"] == "judge-model-2026" and j["gen_ai.usage.input_tokens"] == 300
    assert "error" not in j

    # logs: one gen_ai.evaluation.result per score, a missing one labelled, never 0
    logs = [log for log in judge["logs"] if log["event"] == "gen_ai.evaluation.result"]
    assert [(log["gen_ai.evaluation.name"], log.get("gen_ai.evaluation.score.value"),
             log.get("gen_ai.evaluation.score.label")) for log in logs] == [
        ("faithfulness", 0.9, None), ("context_relevance", None, "missing"), ("answer_relevance", 1.0, None)]
    assert ("gen_ai.evaluation.explanation" in logs[0]) is capture

    # no clock-skew warning although the judge span starts after its parent ended
    judge_raw = next(s for s in raw if s["name"] == "ragaudit.judge")
    turn_raw = next(s for s in raw if s["name"] == "ragaudit.turn")
    assert judge_raw["start_time_ns"] > turn_raw["end_time_ns"]
    assert jaeger_clock_skew_warnings(raw) == {}


def test_without_a_host_in_the_resource_jaeger_warns(receiver: OTLPReceiver) -> None:
    """Why configure() adds host.name: Jaeger treats spans of an unnamed host as from different hosts."""
    assert "host.name" in _resource("shop").attributes
    _, raw = record(receiver, Resource.create({"service.name": "shop"}))
    judge = next(s for s in raw if s["name"] == "ragaudit.judge")
    assert list(jaeger_clock_skew_warnings(raw)) == [judge["span_id"]]


def test_failed_judgement_is_an_error_span_with_an_exception_log(receiver: OTLPReceiver) -> None:
    failed = Judgement.failed("chat:judge-model", "timeout: no judgement within 60s", latency_s=60.0)
    spans, _ = record(receiver, _resource("shop"), judgement=failed)
    judge = spans["ragaudit.judge"]
    # what a search for failed judgements finds in background mode: operation ragaudit.judge, error=true
    assert judge["tags"]["error"] is True and judge["tags"]["otel.status_code"] == "ERROR"
    assert "timeout" in judge["tags"]["otel.status_description"]
    assert any(log["event"] == "exception" for log in judge["logs"])
    # the turn span ended before the judgement: its status says nothing about the judge
    assert "error" not in spans["ragaudit.turn"]["tags"]


def test_separate_judge_trace_follows_from_the_turn(receiver: OTLPReceiver) -> None:
    spans, raw = record(receiver, _resource("shop"), judge_trace="separate")
    turn, judge = spans["ragaudit.turn"], spans["ragaudit.judge"]
    assert judge["trace_id"] != turn["trace_id"]
    assert judge["references"] == [{"type": "FOLLOWS_FROM", "trace_id": turn["trace_id"],
                                     "span_id": turn["span_id"]}]
    # the turn's trace ends with the answer: its duration is the answer's
    turn_trace = [s for s in raw if s["trace_id"] == turn["trace_id"]]
    assert max(s["end_time_ns"] for s in turn_trace) == next(
        s["end_time_ns"] for s in raw if s["name"] == "ragaudit.turn")
