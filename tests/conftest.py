"""Shared test fixtures. Keep this file small and generic: add fixtures by appending."""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.app_servers import app_server, judge_server  # noqa: F401  (fixtures of the app matrices)
from tests.support.judges import close_all
from tests.support.llm_server import LLMServer
from tests.support.redis_server import redis  # noqa: F401  (a fixture: a redis-server of the test's own)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    ["a", "an", "the", "of", "to", "and", "or", "in", "on", "for", "is", "are", "what", "about", "how", "do",
     "does", "tell", "me", "my", "i"]
)


def hash_embedding(text: str, dim: int = 512) -> list[float]:
    """A deterministic bag-of-words embedding (hashed lower-case words, stopwords dropped, L2-normed).

    No model, no download: texts that share words are near, texts that share none are orthogonal.
    """
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        if word not in _STOP:
            vec[zlib.crc32(word.encode()) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


@pytest.fixture
def embed() -> Callable[[str], list[float]]:
    """:func:`hash_embedding`, for vector stores that take an embedding function."""
    return hash_embedding


@pytest.fixture
def memory_exporter() -> Iterator[object]:
    """An OTel SDK ``InMemorySpanExporter`` (cleared after the test)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture
def memory_provider(memory_exporter: object) -> Iterator[object]:
    """An SDK ``TracerProvider`` exporting synchronously to :func:`memory_exporter` (not made global)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory_exporter))  # type: ignore[arg-type]
    yield provider
    provider.shutdown()


@pytest.fixture
def audit_log_path(tmp_path: Path) -> Path:
    """Where a test's Auditor writes its JSONL audit log."""
    return tmp_path / "ragaudit-audit.jsonl"


@pytest.fixture(scope="module")
def module_server() -> Iterator[LLMServer]:
    """One loopback :class:`LLMServer` per test module (override it in a module to give the server a rule)."""
    with LLMServer() as srv:
        yield srv


@pytest.fixture
def srv(module_server: LLMServer) -> LLMServer:
    """:func:`module_server`, reset to its constructor's settings (no queued replies, faults or requests)."""
    module_server.reset()
    return module_server


@pytest.fixture(autouse=True)
def _close_opened_judges() -> Iterator[None]:
    """Close the judges a test made with ``tests.support.judges.open_judge`` / ``closing``."""
    yield
    close_all()
