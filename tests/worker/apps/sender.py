"""A load sender for the worker's scale test: RAG turns as OpenInference spans, with the real OTel SDK
and its OTLP/HTTP protobuf exporter (no ragaudit code), counting what the exporter failed to send.

Usage: ``python -m tests.worker.apps.sender --turns N --name S`` (endpoint from
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). Each turn is one trace: a CHAIN root with the question, a
RETRIEVER with two documents (ids ``<turn>-a``, ``<turn>-b``) and an LLM call. Prints one JSON object:
``{"turns": {trace_id: question}, "failed": [trace ids in batches the exporter could not deliver],
"unsent": [trace ids the SDK never handed to the exporter]}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class CountingExporter(SpanExporter):
    """The OTLP exporter, remembering the traces of every batch it failed to deliver."""

    def __init__(self) -> None:
        self._inner = OTLPSpanExporter(timeout=30)
        self._lock = threading.Lock()
        self.failed: set[str] = set()
        self.attempted: set[str] = set()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.attempted.update(f"{s.context.trace_id:032x}" for s in spans)
        result = self._inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                self.failed.update(f"{s.context.trace_id:032x}" for s in spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--name", default="sender")
    args = parser.parse_args(argv)
    exporter = CountingExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"load-{args.name}"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000, schedule_delay_millis=100))
    tracer = provider.get_tracer("load")
    turns: dict[str, str] = {}
    for n in range(args.turns):
        turn = f"{args.name}-{n}"
        question = f"What is the policy for item {turn}?"
        answer = f"Item {turn} policy: returns within 30 days."
        docs: list[tuple[str, str]] = [(f"{turn}-a", answer + " Keep the receipt."),
                                       (f"{turn}-b", f"Item {turn} ships in two days.")]
        with tracer.start_as_current_span("RunnableSequence", attributes={
                "openinference.span.kind": "CHAIN", "input.value": question, "output.value": answer}) as root:
            with tracer.start_as_current_span("VectorStoreRetriever", attributes={
                    "openinference.span.kind": "RETRIEVER", "input.value": question,
                    **{f"retrieval.documents.{i}.document.{k}": v for i, (doc_id, text) in enumerate(docs)
                       for k, v in (("id", doc_id), ("content", text))}}):
                pass
            with tracer.start_as_current_span("ChatOpenAI", attributes={
                    "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": "\n\n".join(t for _, t in docs) + "\n\n" + question,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": answer}):
                pass
            turns[f"{root.get_span_context().trace_id:032x}"] = question
    provider.force_flush(600_000)  # the batch processor's shutdown alone gives up after 30 s
    provider.shutdown()
    # Turns the SDK dropped before they reached the exporter (its queue), counted here too.
    unsent = sorted(set(turns) - exporter.attempted)
    out: dict[str, Any] = {"turns": turns, "failed": sorted(exporter.failed), "unsent": unsent}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
