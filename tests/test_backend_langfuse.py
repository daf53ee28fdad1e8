"""Langfuse conformance: what a user sees in Langfuse for each of our observation types.

Read against langfuse v4.16.0 (62751446): :data:`tests.support.backends.LANGFUSE_READS` states which
attributes Langfuse reads for each field, :func:`tests.support.backends.langfuse_observation` /
:func:`~tests.support.backends.langfuse_trace` restate its ingestion rules. Spans go through the real
OTel SDK and OTLP/HTTP exporter to the loopback receiver; scores through :class:`LangfuseExporter` to a
loopback recorder. For turn, retrieval, chat, tool and judge spans, with content capture on and off,
each field must hold what a user should see there.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Decision, Sampler, SamplingResult

from ragaudit import Auditor, FakeJudge, Generation, Judgement, RagTurn, Retrieval, RetrievedDoc, ToolCall
from ragaudit.tracing import LangfuseExporter, SpanRecorder, read_audit_log
from ragaudit.tracing.http_exporters import score_id
from tests.support.backends import (
    LANGFUSE_READS,
    LANGFUSE_VERSION,
    langfuse_environment,
    langfuse_observation,
    langfuse_trace,
)
from tests.support.http_recorder import HttpRecorder
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.records import judged

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
QUERY = "What is the return window?"
ANSWER = "You can return items within 30 days [1]."
MESSAGES = (("system", "Answer from the context only."), ("user", f"Context: 30 days.\nQuestion: {QUERY}"))


def test_the_reading_rules_name_their_version() -> None:
    assert LANGFUSE_VERSION.startswith("langfuse v4.16")
    for field in ("input", "output", "model", "usage", "metadata", "level", "environment", "trace.session",
                  "trace.user"):
        assert LANGFUSE_READS[field], field


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as rx:
        yield rx


def provider_to(rx: OTLPReceiver, **resource: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "shop", **resource}),
                              shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rx.traces_url)))
    return provider


def make_turn(n_docs: int = 3, **overrides: Any) -> RagTurn:
    docs = tuple(RetrievedDoc(id=f"kb-{i}", content=f"document {i}", score=1 - i / 100, rank=i,
                              source=f"doc{i}.md") for i in range(1, n_docs + 1))
    fields: dict[str, Any] = {
        "turn_id": "turn-lf", "query": QUERY, "answer": ANSWER, "documents": docs, "model": "gpt-test",
        "framework": "langchain", "started_at": T0, "ended_at": T0 + 100 * MS,
        "metadata": {"session_id": "sess-42", "user_id": "user-7", "tier": "gold", "attempt": 2},
        "retrievals": (Retrieval("chroma", docs, QUERY, T0 + 1 * MS, T0 + 20 * MS),),
        "generations": (Generation(model="gpt-test", prompt="\n".join(c for _, c in MESSAGES), output=ANSWER,
                                   input_tokens=40, output_tokens=12, started_at=T0 + 25 * MS,
                                   ended_at=T0 + 90 * MS, provider="openai", messages=MESSAGES),),
        "tool_calls": (ToolCall(name="order_lookup", arguments='{"order": "A-1"}', output="shipped",
                                call_id="call_1", started_at=T0 + 21 * MS, ended_at=T0 + 24 * MS),),
    }
    fields.update(overrides)
    return RagTurn(**fields)


JUDGEMENT = Judgement(faithfulness=0.9, context_relevance=None, answer_relevance=1.0, reason="Restates [1].",
                      judge="chat:judge-model", latency_s=0.2,
                      usage={"prompt_tokens": 300, "completion_tokens": 40, "calls": 1},
                      details={"model": "judge-model", "response_model": "judge-model-2026"})

_lock = threading.Lock()


def record(rx: OTLPReceiver, capture: bool, judgement: Judgement = JUDGEMENT, **resource: Any
           ) -> tuple[RagTurn, dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """One turn and its judgement, exported over OTLP; (turn, observations by type, spans)."""
    with _lock:
        rx.clear()
        provider = provider_to(rx, **resource)
        recorder = SpanRecorder(provider, capture_content=capture)
        turn = recorder.record_turn(make_turn())
        recorder.record_judgement(turn, judgement)
        spans = rx.wait_for_spans(5, timeout=10)
        provider.shutdown()
    assert len(spans) == 5
    observations = {langfuse_observation(s)["type"]: langfuse_observation(s) for s in spans}
    return turn, observations, spans


@pytest.mark.parametrize("capture", [True, False], ids=["capture-on", "capture-off"])
def test_each_observation_type_shows_what_a_user_expects(receiver: OTLPReceiver, capture: bool) -> None:
    turn, obs, spans = record(receiver, capture, **{"deployment.environment.name": "Staging"})
    assert set(obs) == {"SPAN", "RETRIEVER", "GENERATION", "TOOL", "EVALUATOR"}
    turn_obs, retrieval, chat, tool, judge = (obs[k] for k in ("SPAN", "RETRIEVER", "GENERATION", "TOOL",
                                                                 "EVALUATOR"))
    # every observation: the environment of the traces' resource, default level
    for o in obs.values():
        assert o["environment"] == "staging", o["type"]
        assert o["level"] == "DEFAULT", o["type"]
        assert o["trace_id"] == turn.trace_id

    # turn: question in, answer out; its metadata one filterable entry per key (content: capture on)
    assert turn_obs["input"] == (QUERY if capture else None)
    assert turn_obs["output"] == (ANSWER if capture else None)
    assert turn_obs["model"] is None and turn_obs["usage"] == {}
    if capture:
        assert {k: turn_obs["metadata"].get(k) for k in ("tier", "attempt", "session_id")} == {
            "tier": "gold", "attempt": 2, "session_id": "sess-42"}
    else:
        assert "tier" not in turn_obs["metadata"]

    # retrieval: the query in (issue: it was empty), the ranked documents out (ids only: no content)
    assert retrieval["input"] == (QUERY if capture else None)
    out = json.loads(retrieval["output"])
    assert [(d["id"], d["rank"], d["source"]) for d in out] == [("kb-1", 1, "doc1.md"), ("kb-2", 2, "doc2.md"),
                                                                ("kb-3", 3, "doc3.md")]
    assert retrieval["name"] == "retrieval chroma"

    # chat: the messages as a conversation, the answer, model and token use
    if capture:
        assert json.loads(chat["input"]) == [{"role": r, "content": t} for r, t in MESSAGES]
        assert chat["output"] == ANSWER
    else:
        assert chat["input"] is None and chat["output"] is None
    assert chat["model"] == "gpt-test"
    assert chat["usage"] == {"input": 40, "output": 12, "total": 52}

    # tool: named after the tool, arguments in, result out
    assert tool["name"] == "order_lookup"
    assert tool["input"] == ('{"order": "A-1"}' if capture else None)
    assert tool["output"] == ("shipped" if capture else None)

    # judge: what it was shown in, scores out; the judge model and its token use (Langfuse prices them)
    shown = json.loads(judge["input"])
    assert shown["document_ids"] == ["kb-1", "kb-2", "kb-3"] and shown["turn_id"] == "turn-lf"
    assert (shown.get("query"), shown.get("answer")) == ((QUERY, ANSWER) if capture else (None, None))
    scores = json.loads(judge["output"])
    assert scores["faithfulness"] == 0.9 and scores["context_relevance"] is None
    assert scores.get("reason") == ("Restates [1]." if capture else None)
    assert judge["model"] == "judge-model-2026"
    assert judge["usage"] == {"input": 300, "output": 40, "total": 340}
    assert judge["parent_observation_id"] == turn.span_id

    # the trace: session and user views, name, input/output, environment
    trace = langfuse_trace(spans, str(turn.trace_id))
    assert (trace["session"], trace["user"]) == ("sess-42", "user-7")
    assert trace["name"] == "ragaudit.turn"
    assert (trace["input"], trace["output"]) == ((QUERY, ANSWER) if capture else (None, None))
    assert trace["environment"] == "staging"
    if capture:
        assert trace["metadata"]["tier"] == "gold"


def test_failures_show_as_error_level(receiver: OTLPReceiver) -> None:
    failed = Judgement.failed("chat:judge-model", "timeout: no judgement within 60s", latency_s=60.0)
    with _lock:
        receiver.clear()
        provider = provider_to(receiver)
        recorder = SpanRecorder(provider)
        turn = recorder.record_turn(make_turn(
            retrievals=(Retrieval("chroma", (), QUERY, T0, T0 + MS, error="ConnectionError: store down"),)))
        recorder.record_judgement(turn, failed)
        spans = receiver.wait_for_spans(5, timeout=10)
        provider.shutdown()
    obs = {langfuse_observation(s)["type"]: langfuse_observation(s) for s in spans}
    assert obs["RETRIEVER"]["level"] == "ERROR"
    assert obs["RETRIEVER"]["status_message"] == "ConnectionError: store down"
    assert obs["EVALUATOR"]["level"] == "ERROR"
    assert "timeout" in obs["EVALUATOR"]["status_message"]
    assert obs["SPAN"]["level"] == obs["GENERATION"]["level"] == "DEFAULT"


def test_a_nested_turn_puts_session_user_and_metadata_on_the_apps_trace(receiver: OTLPReceiver) -> None:
    with _lock:
        receiver.clear()
        provider = provider_to(receiver)
        recorder = SpanRecorder(provider)
        with provider.get_tracer("app").start_as_current_span("POST /chat"):
            recorder.record_turn(make_turn(tool_calls=()))
        spans = receiver.wait_for_spans(4, timeout=10)
        provider.shutdown()
    app = next(s for s in spans if s["name"] == "POST /chat")
    trace = langfuse_trace(spans, app["trace_id"])
    assert trace["name"] == "POST /chat"  # the app's root keeps naming its trace
    assert (trace["session"], trace["user"]) == ("sess-42", "user-7")
    assert trace["metadata"]["tier"] == "gold"


def test_separate_judge_trace_is_in_the_same_session(receiver: OTLPReceiver) -> None:
    with _lock:
        receiver.clear()
        provider = provider_to(receiver)
        recorder = SpanRecorder(provider, judge_trace="separate")
        turn = recorder.record_turn(make_turn())
        recorder.record_judgement(turn, JUDGEMENT)
        spans = receiver.wait_for_spans(5, timeout=10)
        provider.shutdown()
    judge = next(s for s in spans if s["name"] == "ragaudit.judge")
    assert judge["trace_id"] != turn.trace_id and judge["parent_span_id"] is None
    trace = langfuse_trace(spans, judge["trace_id"])
    assert (trace["name"], trace["session"], trace["user"]) == ("ragaudit.judge", "sess-42", "user-7")
    turn_trace = langfuse_trace(spans, str(turn.trace_id))
    assert turn_trace["session"] == "sess-42"


@pytest.mark.parametrize("capture", [True, False], ids=["capture-on", "capture-off"])
def test_scores_match_their_trace(receiver: OTLPReceiver, capture: bool) -> None:
    """Scores land on the turn's trace and observation, in the traces' environment, with ids
    derived from trace, span, judge and score name; the reason only with capture on."""
    turn, obs, _ = record(receiver, capture, **{"deployment.environment.name": "Staging"})
    recorder = SpanRecorder(provider_to(receiver, **{"deployment.environment.name": "Staging"}),
                            capture_content=capture)
    with HttpRecorder() as rec:
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk")
        sink.export([judged(turn, JUDGEMENT, recorder)])
        assert sink.force_flush(10)
        sink.shutdown()
        bodies = {r["body"]["name"]: r["body"] for r in rec.requests}
    assert set(bodies) == {"faithfulness", "answer_relevance"}  # the missing score is not sent
    trace_env = obs["SPAN"]["environment"]
    for name, body in bodies.items():
        assert body["traceId"] == turn.trace_id and body["observationId"] == turn.span_id
        assert body["id"] == score_id(str(turn.trace_id), turn.span_id, "chat:judge-model", name)
        assert langfuse_environment(body["environment"]) == trace_env == "staging"
        assert body["comment"] == ("Restates [1]." if capture else None)


def test_environment_from_langfuse_variable(receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_TRACING_ENVIRONMENT", "prod-eu")
    turn, obs, _ = record(receiver, True, **{"deployment.environment.name": "staging"})
    assert {o["environment"] for o in obs.values()} == {"prod-eu"}  # Langfuse's variable wins, as in its SDK
    sink = LangfuseExporter("http://127.0.0.1:9", public_key="pk", secret_key="sk")
    try:
        assert {body["environment"] for _, body in sink.record_requests(judged(turn, JUDGEMENT))} == {"prod-eu"}
    finally:
        sink.shutdown(0.1)


def test_no_environment_means_langfuses_default(receiver: OTLPReceiver) -> None:
    turn, obs, _ = record(receiver, True)
    assert {o["environment"] for o in obs.values()} == {"default"}
    sink = LangfuseExporter("http://127.0.0.1:9", public_key="pk", secret_key="sk")
    try:
        assert all("environment" not in body for _, body in sink.record_requests(judged(turn, JUDGEMENT)))
    finally:
        sink.shutdown(0.1)


def test_sampled_out_turns_get_no_scores() -> None:
    """ALWAYS_OFF: no span is exported, so no score may point at the trace that never exists."""
    with OTLPReceiver() as rx, HttpRecorder() as rec:
        provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rx.traces_url)))
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk")
        judge = FakeJudge(lambda r: {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0})
        with Auditor(judge, audit_log=None, tracer_provider=provider, exporters=[sink]) as auditor:
            for i in range(3):
                turn = auditor.recorder.record_turn(make_turn(turn_id=f"t{i}"))
                assert turn.trace_id is None and turn.span_id is None and turn.sampled_out
                assert auditor.submit(turn) == "queued"
            assert auditor.force_flush(10)
            stats = auditor.stats()
        provider.shutdown()
        assert stats["judged"] == 3
        assert rx.spans == [] and rec.requests == []
        assert sink.stats()["sent"] == 0


def test_a_retried_score_the_backend_stored_is_not_duplicated() -> None:
    """The first POST of each score is stored, then answered too late (the sink's timeout); the
    retry carries the same id, and Langfuse upserts by id (``id: body.id || randomUUID()``)."""
    with HttpRecorder() as rec:
        rec.delays = [1.5, 0.0, 1.5, 0.0]  # each score's first attempt: stored, answered after the client gave up
        sink = LangfuseExporter(rec.url, public_key="pk", secret_key="sk", timeout_s=0.5, backoff_s=0.01,
                            max_retries=2, batch_size=1)
        sink.export([judged(make_turn(trace_id="ab" * 16, span_id="cd" * 8, relevant_ids=None), JUDGEMENT)])
        assert sink.force_flush(20)
        stats = sink.stats()
        sink.shutdown()
        stored: dict[str, dict[str, Any]] = {}
        for request in rec.requests:  # the backend: one row per score id
            stored[request["body"]["id"]] = request["body"]
        attempts = len(rec.requests)
    assert stats["retries"] >= 2 and stats["sent"] == 2 and stats["failed"] == 0
    assert attempts >= 4  # every score went out at least twice
    assert sorted(body["name"] for body in stored.values()) == ["answer_relevance", "faithfulness"]


class _DropTurns(Sampler):
    """Drops turn spans only, as a ratio sampler does for most turns, and records any other root."""

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Any = None, trace_state: Any = None) -> SamplingResult:
        if name == "ragaudit.turn":
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)  # the span keeps its attributes

    def get_description(self) -> str:
        return "drop-turns"


def test_a_sampled_out_turn_leaves_no_orphan_judge_trace(tmp_path: Path) -> None:
    with OTLPReceiver() as rx:
        provider = TracerProvider(sampler=_DropTurns(), shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rx.traces_url)))
        judge = FakeJudge(lambda r: {"faithfulness": 1.0})
        log = tmp_path / "audit.jsonl"
        with Auditor(judge, audit_log=log, tracer_provider=provider) as auditor:
            turn = auditor.recorder.record_turn(make_turn())
            assert auditor.submit(turn) == "queued"
            assert auditor.force_flush(10)
            judged = auditor.stats()["judged"]
            # a turn recorded elsewhere (never traced) still gets a judge span of its own
            auditor.submit(make_turn(turn_id="untraced"))
            assert auditor.force_flush(10)
        provider.shutdown()
        names = [s["name"] for s in rx.spans]
    assert judged == 1
    assert names == ["ragaudit.judge"] and rx.spans[0]["attributes"]["ragaudit.turn.id"] == "untraced"
    lines = {line["turn_id"]: line for line in read_audit_log(log)}  # every judgement is still logged
    assert lines["turn-lf"]["faithfulness"] == 1.0 and lines["turn-lf"]["trace_id"] is None
