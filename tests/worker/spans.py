"""Traces made with the real OTel SDK for the worker's unit tests, as an instrumented app makes them.

:func:`rag_trace` writes one RAG turn the way OpenInference's LangChain instrumentation does (a
CHAIN root, a RETRIEVER with ``retrieval.documents``, an LLM with ``llm.input_messages``);
:func:`genai_trace` the same turn with the OTel GenAI conventions only. :func:`encode` is the OTLP
protobuf body the SDK's exporter would send.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

DOCS = [("warranty-rule", "Warranty policy: warranty requests are answered within 2 days."),
        ("warranty-desk", "For warranty questions, call extension 100.")]
QUESTION = "What about warranty?"
ANSWER = "Warranty policy: warranty requests are answered within 2 days."


class SpanMaker:
    """An SDK provider whose finished spans are kept; ``take()`` returns and forgets them."""

    def __init__(self, service: str = "test-app") -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def take(self) -> list[ReadableSpan]:
        spans = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        return spans


def rag_trace(maker: SpanMaker, question: str = QUESTION, answer: str = ANSWER,
              docs: Sequence[tuple[str, str]] = DOCS, fail: bool = False, session: str | None = None
              ) -> list[ReadableSpan]:
    t = maker.tracer
    attrs: dict[str, Any] = {"openinference.span.kind": "CHAIN", "input.value": question}
    if session:
        attrs["session.id"] = session
    with t.start_as_current_span("RunnableSequence", attributes=attrs) as root:
        with t.start_as_current_span("VectorStoreRetriever", attributes={
                "openinference.span.kind": "RETRIEVER", "input.value": question,
                **{f"retrieval.documents.{i}.document.{k}": v for i, (doc_id, text) in enumerate(docs)
                   for k, v in (("id", doc_id), ("content", text))}}):
            pass
        context = "\n\n".join(text for _, text in docs)
        with t.start_as_current_span("ChatOpenAI", attributes={
                "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": f"Context:\n{context}\n\nQuestion: {question}",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": answer}) as llm:
            if fail:
                llm.set_status(Status(StatusCode.ERROR, "model overloaded"))
        if not fail:
            root.set_attribute("output.value", answer)
        else:
            root.set_status(Status(StatusCode.ERROR, "model overloaded"))
    return maker.take()


def genai_trace(maker: SpanMaker, question: str = QUESTION, answer: str = ANSWER,
                docs: Sequence[tuple[str, str]] = DOCS) -> list[ReadableSpan]:
    """The OTel GenAI conventions only (semantic-conventions ``gen-ai-spans.md``, ``gen-ai-agent-spans.md``)."""
    t = maker.tracer
    with t.start_as_current_span("invoke_agent support", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": "conv-7",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant",
                                                   "parts": [{"type": "text", "content": answer}]}])}):
        with t.start_as_current_span("retrieval kb", attributes={
                "gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": question,
                "gen_ai.retrieval.documents": json.dumps([{"id": i, "score": 0.9, "content": c} for i, c in docs])}):
            pass
        context = "\n\n".join(text for _, text in docs)
        with t.start_as_current_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.provider.name": "openai", "gen_ai.response.id": "chatcmpl-abc",
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                    {"type": "text", "content": f"{context}\n\n{question}"}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": answer}], "finish_reason": "stop"}])}):
            pass
    return maker.take()


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """The OTLP/HTTP protobuf body of *spans* (what ``OTLPSpanExporter`` posts)."""
    return bytes(encode_spans(list(spans)).SerializeToString())
