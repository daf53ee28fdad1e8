"""Fixtures of the reliability tests: a tracer provider exporting to memory *and* to a JSONL file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class Traced:
    """An SDK tracer provider whose spans go to an in-memory exporter and a JSONL span file."""

    def __init__(self, path: Path) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from ragaudit.tracing.files import JsonlSpanExporter

        self.path = path
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(path)))

    def spans(self, name: str | None = None) -> list[Any]:
        spans = list(self.memory.get_finished_spans())
        return spans if name is None else [s for s in spans if s.name == name]

    def file_spans(self) -> list[dict[str, Any]]:
        from ragaudit.tracing.files import read_spans

        return read_spans(self.path) if self.path.exists() else []


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    t = Traced(tmp_path / "spans.jsonl")
    yield t
    t.provider.shutdown()
