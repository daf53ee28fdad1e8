"""Where a judged session shows (issue 30): the ``ragaudit.session`` span linked to every turn's span,
``session.*`` ``gen_ai.evaluation.result`` log records, Langfuse session scores, the audit-log line and
the HTML report's session view. One Auditor, the real OTel SDK (spans and logs), a real HTTP receiver
for Langfuse, the loopback judge; the turns are traced by the Auditor's own span recorder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import Auditor, ChatRagJudge, Sessions
from ragaudit.evaluation.audit_log import report_from_audit_log
from ragaudit.tracing import conventions as c
from ragaudit.tracing.evaluation_logs import EvaluationLogExporter
from ragaudit.tracing.files import read_audit_log
from ragaudit.tracing.http_exporters import LangfuseExporter
from tests.support.http_recorder import HttpRecorder
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer
from tests.support.sessions import judge_rule
from tests.test_sessions import TURNS, turn

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[dict[str, Any]]:
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    log_provider = LoggerProvider()
    log_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    with LLMServer(judge_rule) as srv, HttpRecorder() as langfuse:
        sink = LangfuseExporter(langfuse.url, public_key="pk-lf-1", secret_key="sk-lf-1")
        audit_log = tmp_path / "audit.jsonl"
        with Auditor(open_judge(ChatRagJudge, srv), tracer_provider=provider, audit_log=audit_log,
                     handle_signals=False, exporters=[EvaluationLogExporter(log_provider), sink],
                     sessions=Sessions(clock=lambda: 0.0)) as auditor:
            traced = []
            for i, (q, a) in enumerate(TURNS, start=1):
                traced.append(auditor.recorder.record_turn(turn(i, q, a)))  # the turn span, as integrations do
                auditor.submit(traced[-1])
            assert auditor.force_flush(10)
            assert auditor.end_session("s1")
            assert auditor.force_flush(10)
        yield {"spans": spans.get_finished_spans(), "logs": logs.get_finished_logs(), "turns": traced,
               "langfuse": [r["body"] for r in langfuse.requests], "audit_log": audit_log, "srv": srv}


def test_the_session_span_is_linked_to_every_turn_span(run: dict[str, Any]) -> None:
    [span] = [s for s in run["spans"] if s.name == c.SPAN_SESSION]
    assert span.parent is None  # a trace of its own: a session spans many traces
    linked = [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links]
    assert linked == [(t.trace_id, t.span_id) for t in run["turns"]]
    assert all(link.attributes[c.LINK_TYPE] == c.LINK_TYPE_SESSION_TURN for link in span.links)
    attrs = span.attributes
    assert attrs[c.SESSION_ID] == "s1" and attrs[c.OPENINFERENCE_SPAN_KIND] == c.SPAN_KIND_EVALUATOR
    assert attrs[c.ATTR_SESSION_RESOLVED] == "yes" and attrs[c.ATTR_SESSION_RESOLVED_TURN] == 4
    assert attrs[c.ATTR_SESSION_GROUNDEDNESS] == 0.75 and attrs[c.ATTR_SESSION_CONTRADICTIONS] == 1
    assert attrs[c.ATTR_SESSION_TURNS] == 4 and attrs[c.ATTR_SESSION_PARTIAL] is False
    [event] = [e for e in span.events if e.name == c.EVENT_SESSION_CONTRADICTION]
    assert dict(event.attributes) == {"first_turn": 2, "first_sentence": 1, "second_turn": 4, "second_sentence": 1,
                                      "first_text": "Refunds take 14 days.", "second_text": "Refunds take 30 days."}
    names = [e.attributes[c.GEN_AI_EVALUATION_NAME] for e in span.events if e.name == c.GEN_AI_EVALUATION_RESULT]
    assert names == ["session.resolved", "session.groundedness", "session.contradictions", "session.repeated_turns"]


def test_session_evaluation_log_records(run: dict[str, Any]) -> None:
    records = [r.log_record for r in run["logs"]]
    session = {r.attributes[c.GEN_AI_EVALUATION_NAME]: r for r in records
               if str(r.attributes[c.GEN_AI_EVALUATION_NAME]).startswith("session.")}
    assert set(session) == {"session.resolved", "session.groundedness", "session.contradictions",
                            "session.repeated_turns"}
    resolved = session["session.resolved"].attributes
    assert resolved[c.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0 and resolved[c.GEN_AI_EVALUATION_SCORE_LABEL] == "yes"
    assert resolved[c.SESSION_ID] == resolved[c.GEN_AI_CONVERSATION_ID] == "s1"
    assert session["session.groundedness"].attributes[c.GEN_AI_EVALUATION_SCORE_VALUE] == 0.75
    assert session["session.contradictions"].attributes[c.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    last = run["turns"][-1]  # filed under the session's last turn
    assert f"{session['session.resolved'].span_id:016x}" == last.span_id
    assert len(records) == 4 * 3 + 4  # the turns' own three each, and the session's four


def test_langfuse_session_scores(run: dict[str, Any]) -> None:
    scores = {b["name"]: b for b in run["langfuse"] if "sessionId" in b}
    assert set(scores) == {"session.resolved", "session.groundedness", "session.contradictions",
                           "session.repeated_turns"}
    assert all(b["sessionId"] == "s1" and "traceId" not in b and b["dataType"] == "NUMERIC"
               for b in scores.values())
    assert scores["session.resolved"]["value"] == 1.0 and scores["session.groundedness"]["value"] == 0.75
    assert len({b["id"] for b in scores.values()}) == 4


def test_the_audit_log_line_and_the_html_session_view(run: dict[str, Any]) -> None:
    lines = read_audit_log(run["audit_log"])
    [line] = [entry for entry in lines if entry.get("kind") == "session"]
    assert line["session_id"] == "s1" and line["resolved"] == "yes" and line["groundedness"] == 0.75
    assert line["contradictions"] == [{"first_turn": 2, "first_sentence": 1, "first_text": "Refunds take 14 days.",
                                       "second_turn": 4, "second_sentence": 1,
                                       "second_text": "Refunds take 30 days."}]
    assert [t["query"] for t in line["turns"]] == [q for q, _ in TURNS]
    assert [t["scores"]["faithfulness"] for t in line["turns"]] == [1.0, 1.0, 1.0, 0.0]
    report = report_from_audit_log(run["audit_log"])
    assert len(report.rows) == 4 and len(report.sessions) == 1  # the session line is no turn row
    from ragaudit.evaluation.html import render_html

    html = render_html(report)
    assert '<section id="sessions">' in html and "Session s1" in html
    assert html.count("sent v-supported x-contradiction") == 1  # turn 2's sentence, marked
    assert html.count("sent v-unsupported x-contradiction") == 1  # turn 4's, marked too
    assert "contradicted by turn 4, S1" in html and "contradicts turn 2, S1" in html


def test_langfuse_files_the_session_trace_in_the_session(run: dict[str, Any]) -> None:
    """By Langfuse's ingestion rules (tests/support/backends.py): the session span's trace is named
    ragaudit.session and belongs to the session its turns' traces belong to."""
    from ragaudit.tracing.files import span_to_dict
    from tests.support.backends import langfuse_trace

    spans = [span_to_dict(s) for s in run["spans"]]
    for span in spans:  # the receiver's name for the status text
        span["status"]["message"] = span["status"]["description"]
    session = next(s for s in spans if s["name"] == c.SPAN_SESSION)
    trace = langfuse_trace(spans, session["trace_id"])
    assert (trace["name"], trace["session"]) == (c.SPAN_SESSION, "s1")
    assert all(langfuse_trace(spans, t.trace_id)["session"] == "s1" for t in run["turns"])


def test_the_session_judge_is_named_as_an_evaluator(run: dict[str, Any]) -> None:
    """gen_ai.evaluation.evaluator.* (issue 28's attributes) on the session span and its records: the
    judge and model, the session protocol's wire version with the prompt hash."""
    [span] = [s for s in run["spans"] if s.name == c.SPAN_SESSION]
    records = [r.log_record.attributes for r in run["logs"]
               if str(r.log_record.attributes[c.GEN_AI_EVALUATION_NAME]).startswith("session.")]
    for attrs in (span.attributes, *records):
        assert attrs[c.GEN_AI_EVALUATION_EVALUATOR_ID] == "chat:judge-model/judge-model"
        assert str(attrs[c.GEN_AI_EVALUATION_EVALUATOR_VERSION]).startswith("ragaudit-session/1+")
        assert attrs[c.GEN_AI_EVALUATION_EVALUATOR_TYPE] == c.EVALUATOR_TYPE_LLM_JUDGE


def test_ragaudit_report_writes_the_session_view(run: dict[str, Any], tmp_path: Path) -> None:
    from ragaudit.cli import main

    out = tmp_path / "report.html"
    assert main(["report", str(run["audit_log"]), "--html", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "Session s1" in html and "contradicts turn 2, S1" in html
