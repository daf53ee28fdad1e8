"""End to end against a real Phoenix server (issue 30): a judged session's ``ragaudit.session`` span,
sent over OTLP/HTTP with the turns of its conversation, read back through Phoenix's REST API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragaudit import Auditor, FakeJudge, Sessions
from tests.support.phoenix import PhoenixServer
from tests.support.sessions import Clock
from tests.test_sessions import TURNS, turn

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_the_session_span_reads_back_from_phoenix(phoenix: PhoenixServer) -> None:
    project = f"ragaudit-sessions-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": "ragaudit-e2e",
                                                        "openinference.project.name": project}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=phoenix.otlp_http_endpoint)))
    judge = FakeJudge(lambda r: {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0},
                      session=lambda req: {"resolved": "yes", "resolved_turn": 4, "contradictions": [(2, 1, 4, 1)]})
    with Auditor(judge, tracer_provider=provider, audit_log=None, handle_signals=False,
                 sessions=Sessions(clock=Clock())) as auditor:
        traced = []
        for i, (q, a) in enumerate(TURNS, start=1):
            traced.append(auditor.recorder.record_turn(turn(i, q, a)))
            auditor.submit(traced[-1])
        assert auditor.force_flush(30) and auditor.end_session("s1") and auditor.force_flush(30)
    assert provider.force_flush(30_000)
    provider.shutdown()
    spans = phoenix.wait_for_spans(project, lambda s: any(x["name"] == "ragaudit.session" for x in s))
    [session] = [s for s in spans if s["name"] == "ragaudit.session"]
    attrs: dict[str, Any] = dict(session.get("attributes") or {})
    assert session["span_kind"] == "EVALUATOR" and session["parent_id"] is None
    assert attrs["session.id"] == "s1" and attrs["ragaudit.session.resolved"] == "yes"
    assert attrs["ragaudit.session.contradictions"] == 1 and attrs["ragaudit.session.turns"] == 4
    events = {e["name"] for e in session.get("events", [])}
    assert {"gen_ai.evaluation.result", "ragaudit.session.contradiction"} <= events
    turn_spans = {s["context"]["span_id"] for s in spans if s["name"] == "ragaudit.turn"}
    assert turn_spans == {t.span_id for t in traced}
