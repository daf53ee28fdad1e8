"""SpanRecorder: turn, retrieval, generation and judge spans, checked through the SDK's in-memory exporter."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from ragaudit.errors import ConfigurationError
from ragaudit.records import (
    TRUNCATION_MARKER,
    Citation,
    Generation,
    Judgement,
    RagTurn,
    Retrieval,
    RetrievedDoc,
)
from ragaudit.tracing import SpanRecorder
from ragaudit.tracing import conventions as c

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def docs() -> tuple[RetrievedDoc, ...]:
    return (
        RetrievedDoc(
            id="kb-returns",
            content="Items can be returned within 30 days with a receipt.",
            score=0.91,
            rank=1,
            source="return_policy.pdf",
            metadata={"section": "Returns"},
        ),
        RetrievedDoc(
            id="kb-shipping",
            content="Standard shipping takes 3 to 5 business days.",
            score=0.42,
            rank=2,
            source="shipping.md",
        ),
    )


def make_turn(**overrides: Any) -> RagTurn:
    documents = docs()
    fields: dict[str, Any] = {
        "turn_id": "turn-1",
        "query": "What is the return window?",
        "answer": "You can return items within 30 days [1].",
        "documents": documents,
        "citations": (Citation("kb-returns", 1, "[1]", "marker"),),
        "model": "gpt-test",
        "framework": "langchain",
        "started_at": T0,
        "ended_at": T0 + 100 * MS,
        "relevant_ids": ["kb-returns"],
        "metadata": {"user_tag": "alpha"},
        "retrievals": (
            Retrieval("chroma", documents, "What is the return window?", T0 + 1 * MS, T0 + 20 * MS),
        ),
        "generations": (
            Generation(
                model="gpt-test",
                prompt="Context: Items can be returned within 30 days.\nQuestion: What is the return window?",
                output="You can return items within 30 days [1].",
                input_tokens=40,
                output_tokens=12,
                started_at=T0 + 25 * MS,
                ended_at=T0 + 90 * MS,
                provider="openai",
            ),
        ),
    }
    fields.update(overrides)
    return RagTurn(**fields)


def judgement(**overrides: Any) -> Judgement:
    fields: dict[str, Any] = {
        "faithfulness": 0.9,
        "context_relevance": 0.8,
        "answer_relevance": 1.0,
        "reason": "The answer restates document [1].",
        "judge": "chat:gpt-judge",
        "latency_s": 0.25,
        "usage": {"prompt_tokens": 300, "completion_tokens": 40, "calls": 1},
    }
    fields.update(overrides)
    return Judgement(**fields)


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    out = {s.name: s for s in spans}
    assert len(out) == len(spans), [s.name for s in spans]
    return out


def all_strings(spans: tuple[ReadableSpan, ...]) -> str:
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.append(json.dumps(dict(span.attributes or {}), default=list))
        for event in span.events:
            parts.append(json.dumps(dict(event.attributes or {}), default=list))
        if span.status.description:
            parts.append(span.status.description)
    return "\n".join(parts)


def record_full(recorder: SpanRecorder, turn: RagTurn | None = None, j: Judgement | None = None) -> RagTurn:
    handle = recorder.start_turn(start_ns=T0)
    assert handle.trace_id is not None and handle.span_id is not None
    turn = (turn or make_turn()).with_trace(handle.trace_id, handle.span_id)
    recorder.end_turn(
        handle, turn, judge_status="queued", retrieval_metrics={"ndcg@10": 1.0, "recall@5": 0.5}
    )
    recorder.record_judgement(turn, j or judgement())
    return turn


def test_turn_children_and_judge_form_one_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    recorder = SpanRecorder(provider)
    assert recorder.enabled
    turn = record_full(recorder)
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"ragaudit.turn", "retrieval chroma", "chat gpt-test", "ragaudit.judge"}
    root = spans["ragaudit.turn"]
    assert root.parent is None
    assert f"{root.context.trace_id:032x}" == turn.trace_id
    assert f"{root.context.span_id:016x}" == turn.span_id
    for name in ("retrieval chroma", "chat gpt-test", "ragaudit.judge"):
        child = spans[name]
        assert child.context.trace_id == root.context.trace_id
        assert child.parent is not None and child.parent.span_id == root.context.span_id

    assert (root.start_time, root.end_time) == (T0, T0 + 100 * MS)
    assert (spans["retrieval chroma"].start_time, spans["retrieval chroma"].end_time) == (
        T0 + MS,
        T0 + 20 * MS,
    )
    assert (spans["chat gpt-test"].start_time, spans["chat gpt-test"].end_time) == (
        T0 + 25 * MS,
        T0 + 90 * MS,
    )
    assert spans["chat gpt-test"].kind is SpanKind.CLIENT

    a = root.attributes or {}
    assert a[c.OPENINFERENCE_SPAN_KIND] == "CHAIN"
    assert a[c.LANGFUSE_OBSERVATION_TYPE] == "span"
    assert a[c.INPUT_VALUE] == "What is the return window?"
    assert a[c.OUTPUT_VALUE] == "You can return items within 30 days [1]."
    assert a[c.ATTR_TURN_ID] == "turn-1"
    assert a[c.ATTR_FRAMEWORK] == "langchain"
    assert a[c.ATTR_CITATION_COUNT] == 1
    assert json.loads(str(a[c.ATTR_CITATIONS])) == [
        {"doc_id": "kb-returns", "rank": 1, "marker": "[1]", "method": "marker"}
    ]
    assert list(a[c.ATTR_DOCUMENT_IDS]) == ["kb-returns", "kb-shipping"]  # type: ignore[arg-type]
    assert a["ragaudit.retrieval.ndcg@10"] == 1.0
    assert a["ragaudit.retrieval.recall@5"] == 0.5
    assert a[c.ATTR_JUDGE_STATUS] == "queued"
    assert json.loads(str(a[c.ATTR_RELEVANT_IDS])) == {"kb-returns": 1}
    assert a[c.LANGFUSE_TRACE_NAME] == "ragaudit.turn"  # the turn is the root of its trace
    assert a[c.LANGFUSE_TRACE_INPUT] == a[c.INPUT_VALUE]
    assert json.loads(str(a[c.METADATA])) == {"user_tag": "alpha"}
    assert root.status.status_code is StatusCode.UNSET

    r = spans["retrieval chroma"].attributes or {}
    assert r[c.OPENINFERENCE_SPAN_KIND] == "RETRIEVER"
    assert r[c.GEN_AI_OPERATION_NAME] == "retrieval"
    assert r[c.LANGFUSE_OBSERVATION_TYPE] == "retriever"
    assert r[c.GEN_AI_DATA_SOURCE_ID] == "chroma"
    assert r["retrieval.documents.0.document.id"] == "kb-returns"
    assert r["retrieval.documents.0.document.score"] == 0.91
    assert str(r["retrieval.documents.0.document.content"]).startswith("Items can be returned")
    assert json.loads(str(r["retrieval.documents.0.document.metadata"])) == {
        "rank": 1,
        "source": "return_policy.pdf",
        "section": "Returns",
    }
    assert r["retrieval.documents.1.document.id"] == "kb-shipping"
    assert [d["id"] for d in json.loads(str(r[c.GEN_AI_RETRIEVAL_DOCUMENTS]))] == [
        "kb-returns",
        "kb-shipping",
    ]

    g = spans["chat gpt-test"].attributes or {}
    assert g[c.OPENINFERENCE_SPAN_KIND] == "LLM"
    assert g[c.GEN_AI_OPERATION_NAME] == "chat"
    assert g[c.GEN_AI_REQUEST_MODEL] == g[c.LLM_MODEL_NAME] == "gpt-test"
    assert g[c.GEN_AI_PROVIDER_NAME] == "openai"
    assert (g[c.GEN_AI_USAGE_INPUT_TOKENS], g[c.GEN_AI_USAGE_OUTPUT_TOKENS]) == (40, 12)
    assert (g[c.LLM_TOKEN_COUNT_PROMPT], g[c.LLM_TOKEN_COUNT_COMPLETION], g[c.LLM_TOKEN_COUNT_TOTAL]) == (
        40,
        12,
        52,
    )
    assert g["llm.output_messages.0.message.content"] == "You can return items within 30 days [1]."
    assert g[c.LANGFUSE_OBSERVATION_TYPE] == "generation"


def test_judge_span_scores_events_and_link(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    recorder = SpanRecorder(provider)
    record_full(recorder)
    spans = by_name(exporter.get_finished_spans())
    root, judge = spans["ragaudit.turn"], spans["ragaudit.judge"]
    a = judge.attributes or {}
    assert a[c.OPENINFERENCE_SPAN_KIND] == "EVALUATOR"
    assert a[c.LANGFUSE_OBSERVATION_TYPE] == "evaluator"
    assert a["ragaudit.judge.faithfulness"] == 0.9
    assert a["ragaudit.judge.context_relevance"] == 0.8
    assert a["ragaudit.judge.answer_relevance"] == 1.0
    assert a[c.ATTR_JUDGE_REASON] == "The answer restates document [1]."
    assert a[c.ATTR_JUDGE_NAME] == "chat:gpt-judge"
    assert a["ragaudit.judge.usage.prompt_tokens"] == 300
    assert a[c.ATTR_JUDGE_LATENCY_S] == 0.25
    assert a[c.ATTR_TURN_ID] == "turn-1"
    assert judge.end_time is not None and judge.start_time is not None
    assert judge.end_time - judge.start_time == 250 * MS  # start defaults to end - latency

    # Child of the turn, and exactly one link to it (OpenInference: an annotation written after
    # the turn ended links to what it judges, whatever its parent).
    assert judge.parent is not None and judge.parent.span_id == root.context.span_id
    assert judge.context.trace_id == root.context.trace_id
    assert [(link.context.span_id, dict(link.attributes or {})) for link in judge.links] == [
        (root.context.span_id, {c.LINK_TYPE: c.LINK_TYPE_JUDGED_TURN, c.LINK_REF_TYPE: c.REF_TYPE_CHILD_OF})]

    events = [e for e in judge.events if e.name == "gen_ai.evaluation.result"]
    assert [(e.attributes or {})["gen_ai.evaluation.name"] for e in events] == [
        "faithfulness",
        "context_relevance",
        "answer_relevance",
    ]
    assert [(e.attributes or {})["gen_ai.evaluation.score.value"] for e in events] == [0.9, 0.8, 1.0]
    assert all(
        (e.attributes or {})["gen_ai.evaluation.explanation"] == a[c.ATTR_JUDGE_REASON] for e in events
    )
    assert judge.status.status_code is StatusCode.UNSET


def test_missing_scores_are_never_zero(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    recorder = SpanRecorder(provider)
    turn = make_turn(trace_id="0af7651916cd43dd8448eb211c80319c", span_id="b7ad6b7169203331")
    recorder.record_judgement(
        turn,
        Judgement(
            faithfulness=0.7, context_relevance=None, answer_relevance=None, reason="partial", judge="j"
        ),
    )
    recorder.record_judgement(turn, Judgement.failed("j", "TimeoutError: judge timed out after 60s"))
    partial, failed = exporter.get_finished_spans()

    pa = partial.attributes or {}
    assert pa["ragaudit.judge.faithfulness"] == 0.7
    assert "ragaudit.judge.context_relevance" not in pa
    assert "ragaudit.judge.answer_relevance" not in pa
    assert list(pa[c.ATTR_JUDGE_MISSING_SCORES]) == ["context_relevance", "answer_relevance"]  # type: ignore[arg-type]
    missing_events = [e.attributes or {} for e in partial.events][1:]
    for ev in missing_events:
        assert "gen_ai.evaluation.score.value" not in ev
        assert ev["gen_ai.evaluation.score.label"] == c.MISSING_SCORE_LABEL
        assert ev[c.ATTR_ERROR_TYPE] == c.ERROR_TYPE_MISSING_SCORE
    assert partial.status.status_code is StatusCode.UNSET
    assert json.loads(str(pa[c.OUTPUT_VALUE]))["context_relevance"] is None

    fa = failed.attributes or {}
    assert not any(k in fa for k in ("ragaudit.judge.faithfulness", "ragaudit.judge.context_relevance"))
    assert fa[c.ATTR_JUDGE_ERROR] == "TimeoutError: judge timed out after 60s"
    assert failed.status.status_code is StatusCode.ERROR
    evaluation = [e.attributes or {} for e in failed.events if e.name == "gen_ai.evaluation.result"]
    assert len(evaluation) == 3
    assert all("gen_ai.evaluation.score.value" not in ev for ev in evaluation)
    assert all(ev[c.ATTR_ERROR_TYPE] == c.ERROR_TYPE_JUDGE_ERROR for ev in evaluation)
    # both judge spans hang under the (remote-to-us) turn span
    for span in (partial, failed):
        assert span.parent is not None and f"{span.parent.span_id:016x}" == "b7ad6b7169203331"
        assert f"{span.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"


def test_turn_nests_under_current_span_without_attaching(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    recorder = SpanRecorder(provider)
    tracer = provider.get_tracer("host-app")
    with tracer.start_as_current_span("POST /ask") as request_span:
        handle = recorder.start_turn()
        assert trace.get_current_span() is request_span  # the turn was not made current
        recorder.end_turn(handle, make_turn(started_at=None, ended_at=None))
    spans = by_name(exporter.get_finished_spans())
    turn_span = spans["ragaudit.turn"]
    assert turn_span.parent is not None
    assert turn_span.parent.span_id == request_span.get_span_context().span_id
    assert c.LANGFUSE_TRACE_NAME not in (turn_span.attributes or {})  # the host owns the trace


def test_explicit_parent_context(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    recorder = SpanRecorder(provider)
    outer = provider.get_tracer("host-app").start_span("job")
    handle = recorder.start_turn(name="my.turn", parent=trace.set_span_in_context(outer))
    recorder.end_turn(handle, make_turn())
    outer.end()
    spans = by_name(exporter.get_finished_spans())
    assert spans["my.turn"].parent is not None
    assert spans["my.turn"].parent.span_id == outer.get_span_context().span_id


def test_judge_of_untraced_turn_is_its_own_root(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    recorder = SpanRecorder(provider)
    with provider.get_tracer("host-app").start_as_current_span("unrelated"):
        recorder.record_judgement(make_turn(), judgement())
    judge = by_name(exporter.get_finished_spans())["ragaudit.judge"]
    assert judge.parent is None
    assert judge.links == ()


def test_record_turn_returns_turn_with_its_ids(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    recorder = SpanRecorder(provider)
    traced = recorder.record_turn(make_turn(), judge_status="judged")
    root = by_name(exporter.get_finished_spans())["ragaudit.turn"]
    assert traced.trace_id == f"{root.context.trace_id:032x}"
    assert traced.span_id == f"{root.context.span_id:016x}"
    assert root.start_time == T0


def test_documents_without_retrievals_get_one_retrieval_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    SpanRecorder(provider).record_turn(make_turn(retrievals=(), generations=()))
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"ragaudit.turn", "retrieval"}
    attrs = spans["retrieval"].attributes or {}
    assert attrs["retrieval.documents.1.document.id"] == "kb-shipping"
    assert attrs[c.INPUT_VALUE] == "What is the return window?"


def test_error_turn_gets_error_status(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    documents = docs()
    turn = make_turn(
        answer=None,
        error="RuntimeError: model exploded",
        retrievals=(Retrieval("chroma", documents, "q", error="ConnectionError: store down"),),
        generations=(Generation(model="gpt-test", error="RuntimeError: model exploded"),),
    )
    SpanRecorder(provider).record_turn(turn)
    spans = by_name(exporter.get_finished_spans())
    root = spans["ragaudit.turn"]
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "RuntimeError: model exploded"
    # error.type: the exception's type the error names (the convention), not a fixed ragaudit value
    assert (root.attributes or {})[c.ATTR_ERROR_TYPE] == "RuntimeError"
    assert (spans["retrieval chroma"].attributes or {})[c.ATTR_ERROR_TYPE] == "ConnectionError"
    assert (root.attributes or {})[c.LANGFUSE_OBSERVATION_LEVEL] == "ERROR"
    assert c.OUTPUT_VALUE not in (root.attributes or {})
    assert spans["retrieval chroma"].status.status_code is StatusCode.ERROR
    assert spans["chat gpt-test"].status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in root.events)


SECRETS = ("return window", "returned within 30 days", "restates document", "Context: Items", "alpha")


@pytest.mark.parametrize("how", ["argument", "NO_CONTENT", "false", "0"])
def test_content_capture_off_keeps_only_ids_scores_and_sizes(
    how: str, provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "argument":
        recorder = SpanRecorder(provider, capture_content=False)
    else:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", how)
        recorder = SpanRecorder(provider)
    assert recorder.capture_content is False
    citation = Citation("kb-returns", 1, "You can return items within 30 days", "overlap")
    record_full(recorder, make_turn(citations=(citation,)))
    spans = exporter.get_finished_spans()
    text = all_strings(spans)
    for secret in SECRETS:
        assert secret not in text, secret
    named = by_name(spans)
    turn_attrs = named["ragaudit.turn"].attributes or {}
    assert turn_attrs[c.ATTR_CONTENT_CAPTURED] is False
    assert turn_attrs[c.ATTR_QUERY_CHARS] == len("What is the return window?")
    assert turn_attrs[c.ATTR_ANSWER_CHARS] == len("You can return items within 30 days [1].")
    assert json.loads(str(turn_attrs[c.ATTR_CITATIONS]))[0] == {
        "doc_id": "kb-returns",
        "rank": 1,
        "marker": None,
        "method": "overlap",
    }
    retrieval = named["retrieval chroma"].attributes or {}
    assert retrieval["retrieval.documents.0.document.id"] == "kb-returns"
    assert retrieval["retrieval.documents.0.document.score"] == 0.91
    assert "retrieval.documents.0.document.content" not in retrieval
    assert list(retrieval[c.ATTR_DOCUMENT_CHARS]) == [len(d.content) for d in docs()]  # type: ignore[arg-type]
    judge = named["ragaudit.judge"].attributes or {}
    assert judge["ragaudit.judge.faithfulness"] == 0.9
    assert judge[c.ATTR_JUDGE_REASON_CHARS] == len("The answer restates document [1].")
    assert c.ATTR_JUDGE_REASON not in judge


def test_capture_env_other_values_keep_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_AND_EVENT")
    assert SpanRecorder(trace.NoOpTracerProvider()).capture_content is True
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "no_content")
    assert SpanRecorder(trace.NoOpTracerProvider(), capture_content=True).capture_content is True


def test_long_text_is_cut_with_the_marker(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    long_answer = "x" * 500
    SpanRecorder(provider, max_attribute_chars=100).record_turn(make_turn(answer=long_answer))
    root = by_name(exporter.get_finished_spans())["ragaudit.turn"]
    value = str((root.attributes or {})[c.OUTPUT_VALUE])
    assert value == "x" * 100 + TRUNCATION_MARKER.format(n=400)
    assert (root.attributes or {})[c.ATTR_ANSWER_CHARS] == 500


def test_redact_applies_to_every_text(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    def redact(text: str) -> str:
        return text.replace("30 days", "[N days]").replace("return", "[verb]")

    recorder = SpanRecorder(provider, redact=redact)
    j = judgement(reason="Says 30 days, as the return policy does.")
    record_full(
        recorder, make_turn(citations=(Citation("kb-returns", 1, "return within 30 days", "overlap"),)), j
    )
    text = all_strings(exporter.get_finished_spans())
    assert "30 days" not in text
    assert "return window" not in text
    assert "[N days]" in text and "[verb]" in text


def test_failing_redact_withholds_text_and_logs_once(
    provider: TracerProvider, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    def redact(text: str) -> str:
        raise ValueError("redactor broken")

    recorder = SpanRecorder(provider, redact=redact)
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        recorder.record_turn(make_turn())
        recorder.record_turn(make_turn())
    text = all_strings(exporter.get_finished_spans())
    assert "return window" not in text
    assert "redact() failed" in text
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "redact" in r.getMessage()]
    assert len(warnings) == 1


def test_noop_provider_disables_everything() -> None:
    recorder = SpanRecorder(trace.NoOpTracerProvider())
    assert recorder.enabled is False
    handle = recorder.start_turn()
    assert (handle.trace_id, handle.span_id) == (None, None)
    turn = make_turn()
    recorder.end_turn(handle, turn)
    recorder.record_judgement(turn, judgement())
    assert recorder.record_turn(turn) is turn


def test_force_flush_pushes_batched_spans_out() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(memory, schedule_delay_millis=60_000))
    recorder = SpanRecorder(provider)
    recorder.record_turn(make_turn(retrievals=(), generations=(), documents=()))
    assert memory.get_finished_spans() == ()
    assert recorder.force_flush(10) is True
    assert [s.name for s in memory.get_finished_spans()] == ["ragaudit.turn"]
    assert SpanRecorder(trace.NoOpTracerProvider()).force_flush() is True
    provider.shutdown()


def test_sampled_out_turn_exports_nothing() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    recorder = SpanRecorder(provider)
    recorder.record_turn(make_turn())
    assert memory.get_finished_spans() == ()


def test_global_provider_is_followed_once_installed() -> None:
    # The global provider can be set once per process: check the unset -> set transition in a child.
    script = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from ragaudit.records import RagTurn
        from ragaudit.tracing import SpanRecorder

        recorder = SpanRecorder()
        turn = RagTurn(turn_id="t", query="q", answer="a")
        assert recorder.enabled is False
        handle = recorder.start_turn()
        assert handle.trace_id is None and handle.span_id is None
        assert recorder.record_turn(turn) is turn
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        trace.set_tracer_provider(provider)
        assert recorder.enabled is True
        traced = recorder.record_turn(turn)
        assert traced.trace_id is not None
        assert [s.name for s in memory.get_finished_spans()] == ["ragaudit.turn"]
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


class _ExplodingTracer(trace.Tracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("vendor tracer bug")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("vendor tracer bug")


class _ExplodingProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _ExplodingTracer()


class _LinklessTracer(trace.Tracer):
    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        if kwargs.get("links"):
            raise RuntimeError("vendor tracer cannot take links")
        return self.inner.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


class _LinklessProvider(trace.TracerProvider):
    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _LinklessTracer(self.inner.get_tracer(*args, **kwargs))


def test_a_broken_tracer_never_raises_into_the_host(caplog: pytest.LogCaptureFixture) -> None:
    exploding = SpanRecorder(_ExplodingProvider())
    assert exploding.enabled
    turn = make_turn()
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        handle = exploding.start_turn()
        assert (handle.trace_id, handle.span_id) == (None, None)
        exploding.end_turn(handle, turn)
        assert exploding.record_turn(turn) is turn
        exploding.record_judgement(turn, judgement())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # start_turn once (twice called), record_judgement once
    assert "start_turn" in warnings[0] and "record_judgement" in warnings[1]


def test_a_tracer_failing_midway_keeps_what_it_can(caplog: pytest.LogCaptureFixture) -> None:
    memory = InMemorySpanExporter()
    inner = TracerProvider(shutdown_on_exit=False)
    inner.add_span_processor(SimpleSpanProcessor(memory))
    recorder = SpanRecorder(_LinklessProvider(inner), judge_trace="separate")  # the judge span has a link
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        turn = recorder.record_turn(make_turn())
        recorder.record_judgement(turn, judgement())
        recorder.record_judgement(turn, judgement())
    assert sorted(s.name for s in memory.get_finished_spans()) == [
        "chat gpt-test",
        "ragaudit.turn",
        "retrieval chroma",
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "record_judgement" in warnings[0].getMessage()


def test_a_failure_mid_turn_still_ends_the_span(
    provider: TracerProvider, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = SpanRecorder(provider)
    handle = recorder.start_turn()
    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        recorder.end_turn(handle, make_turn(), retrieval_metrics={"ndcg@10": "not a number"})  # type: ignore[dict-item]
        recorder.end_turn(handle, make_turn())  # a second end is ignored
    assert [s.name for s in exporter.get_finished_spans()] == ["ragaudit.turn"]
    assert any("end_turn" in r.getMessage() for r in caplog.records)


def test_start_turn_does_not_touch_the_current_context(provider: TracerProvider) -> None:
    recorder = SpanRecorder(provider)
    before = otel_context.get_current()
    handle = recorder.start_turn()
    assert otel_context.get_current() is before
    recorder.end_turn(handle, make_turn())
    assert otel_context.get_current() is before


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attribute_chars": -1}, {"max_attribute_chars": 1.5}, {"redact": "not callable"}],
)
def test_bad_arguments_fail_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        SpanRecorder(trace.NoOpTracerProvider(), **kwargs)
    with pytest.raises(ConfigurationError, match="TracerProvider"):
        SpanRecorder(object())  # type: ignore[arg-type]


def test_span_limits_keep_kind_and_top_documents_under_the_sdks_default() -> None:
    """A retrieval of 50 documents under the SDK's default SpanLimits (128 attributes): the span kind
    and the top-ranked documents are kept, the rest is counted, and every string is capped."""
    from opentelemetry.sdk.trace import SpanLimits

    memory = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(), shutdown_on_exit=False)
    assert provider._span_limits.max_span_attributes == 128  # the SDK default this test is about
    provider.add_span_processor(SimpleSpanProcessor(memory))
    many = tuple(RetrievedDoc(id=f"doc-{i}", content="c" * 50, score=1 - i / 100, rank=i,
                              source=f"/data/{'deep/' * 400}{i}.md") for i in range(1, 51))
    SpanRecorder(provider, max_attribute_chars=2000).record_turn(
        make_turn(documents=many, retrievals=(Retrieval("chroma", many, "q"),),
                  metadata={"k": "v" * 5000, **{f"key{i}": i for i in range(100)}}),
        retrieval_metrics={f"metric@{i}": 0.5 for i in range(12)})
    spans = by_name(memory.get_finished_spans())
    retrieval = spans["retrieval chroma"]
    a = retrieval.attributes or {}
    assert retrieval.dropped_attributes == 0
    assert a[c.OPENINFERENCE_SPAN_KIND] == "RETRIEVER" and a[c.LANGFUSE_OBSERVATION_TYPE] == "retriever"
    ids = [a[c.document_keys(i).id] for i in range(20)]
    assert ids == [f"doc-{i}" for i in range(1, 21)]  # top ranks first
    assert c.document_keys(20).id not in a
    assert (a[c.ATTR_DOCUMENT_COUNT], a[c.ATTR_DOCUMENT_OMITTED]) == (50, 30)
    for key in (c.GEN_AI_RETRIEVAL_DOCUMENTS, c.LANGFUSE_OBSERVATION_OUTPUT, c.document_keys(0).metadata):
        assert len(str(a[key])) <= 2000 + 48, key
        assert str(a[key]).endswith("chars]"), key
    turn = spans["ragaudit.turn"].attributes or {}
    assert turn[c.OPENINFERENCE_SPAN_KIND] == "CHAIN" and turn[c.ATTR_DOCUMENT_COUNT] == 50
    assert len(turn[c.ATTR_DOCUMENT_IDS]) == 20
    for span in spans.values():
        assert span.dropped_attributes == 0, span.name
        for key, value in (span.attributes or {}).items():
            assert not isinstance(value, str) or len(value) <= 2000 + 48, (span.name, key)


@pytest.mark.parametrize(("metadata", "session", "user"), [
    ({"session_id": "s", "user_id": "u"}, "s", "u"),
    ({"langfuse_session_id": "lf", "session_id": "s", "langfuse_user_id": "lu", "user_id": "u"}, "lf", "lu"),
    ({"thread_id": "t-1"}, "t-1", None),
    ({"conversation_id": 17}, "17", None),
    ({"session_id": {"not": "an id"}, "user_id": True}, None, None),
])
def test_session_and_user_ids_from_turn_metadata(
        provider: TracerProvider, exporter: InMemorySpanExporter, metadata: dict[str, Any], session: str | None,
        user: str | None) -> None:
    SpanRecorder(provider, capture_content=False).record_turn(make_turn(metadata=metadata))
    a = by_name(exporter.get_finished_spans())["ragaudit.turn"].attributes or {}
    assert a.get(c.SESSION_ID) == session and a.get(c.GEN_AI_CONVERSATION_ID) == session
    assert a.get(c.USER_ID) == user
    assert not any(k.startswith(c.LANGFUSE_OBSERVATION_METADATA) for k in a)  # metadata is content


def test_judge_trace_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SpanRecorder(trace.NoOpTracerProvider()).judge_trace == "turn"
    monkeypatch.setenv("RAGAUDIT_JUDGE_TRACE", "separate")
    assert SpanRecorder(trace.NoOpTracerProvider()).judge_trace == "separate"
    assert SpanRecorder(trace.NoOpTracerProvider(), judge_trace="turn").judge_trace == "turn"
    with pytest.raises(ConfigurationError, match="judge_trace"):
        SpanRecorder(trace.NoOpTracerProvider(), judge_trace="elsewhere")  # type: ignore[arg-type]


def test_auditor_separate_judge_trace(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    from ragaudit import Auditor, FakeJudge

    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, tracer_provider=provider,
                 judge_trace="separate") as auditor:
        turn = auditor.recorder.record_turn(make_turn())
        auditor.submit(turn)
        assert auditor.force_flush(10)
    spans = by_name(exporter.get_finished_spans())
    judge, root = spans["ragaudit.judge"], spans["ragaudit.turn"]
    assert judge.parent is None and judge.context.trace_id != root.context.trace_id
    assert [(link.context.span_id, (link.attributes or {})[c.LINK_TYPE]) for link in judge.links] == [
        (root.context.span_id, c.LINK_TYPE_JUDGED_TURN)]
    assert (judge.attributes or {})[c.LANGFUSE_TRACE_NAME] == "ragaudit.judge"


@pytest.mark.parametrize(("host", "provider"), [
    ("api.openai.com", "openai"), ("127.0.0.1:8080", "openai"), ("my-proxy.internal:4000", "openai"),
    ("shop.openai.azure.com", "azure.ai.openai"), ("api.anthropic.com", "anthropic"),
    ("generativelanguage.googleapis.com", "gcp.gemini"), ("api.groq.com", "groq"), (None, "openai"),
])
def test_the_provider_of_an_endpoint_is_the_registrys_name(host: str | None, provider: str) -> None:
    assert c.provider_of_endpoint(host) == provider


@pytest.mark.parametrize(("error", "error_type"), [
    ("RuntimeError: model exploded", "RuntimeError"),
    ("openai.APIConnectionError: refused", "openai.APIConnectionError"),
    ("ragaudit could not build this turn: boom", c.ERROR_TYPE_OTHER), ("span dropped", c.ERROR_TYPE_OTHER),
    ("timeout: no judgement within 60s", "timeout"),
])
def test_error_type_is_the_exception_type_the_error_names(error: str, error_type: str) -> None:
    assert c.error_type_of(error) == error_type


def test_an_exceptions_type_name_leaves_private_modules_out() -> None:
    from ragaudit.content import exception_type_name
    from ragaudit.errors import ConfigurationError

    assert exception_type_name(ValueError("x")) == "ValueError"
    assert exception_type_name(ConfigurationError("x")) == "ragaudit.errors.ConfigurationError"
    import httpx
    import openai

    # defined in openai._exceptions, named where it is public
    refused = openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    assert exception_type_name(refused) == "openai.APIConnectionError"

    class Local(Exception):
        pass

    assert exception_type_name(Local()) == "tests.test_tracing_spans.Local"  # no <locals> in a type name


def test_evaluator_attributes_of_a_rule_judge_name_no_type() -> None:
    attrs = c.evaluator_attributes("lexical", None)
    assert attrs == {c.GEN_AI_EVALUATION_EVALUATOR_ID: "lexical"}
    llm = c.evaluator_attributes("chat", {"model": "m", "protocol_version": "ragaudit-judge/3", "prompt_hash": "ab"},
                                 {c.REFERENCE_SET_METADATA_KEY: "golden"})
    assert llm == {c.GEN_AI_EVALUATION_EVALUATOR_ID: "chat/m",
                   c.GEN_AI_EVALUATION_EVALUATOR_VERSION: "ragaudit-judge/3+ab",
                   c.GEN_AI_EVALUATION_EVALUATOR_TYPE: "llm_judge", c.GEN_AI_EVALUATION_REFERENCE_SET_ID: "golden"}
