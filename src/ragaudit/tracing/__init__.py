"""Tracing: turns and judgements as OpenTelemetry spans, and JSONL span / audit files.

```python
from ragaudit import tracing
tracing.configure(endpoint="http://localhost:4318")   # or console=True, file="spans.jsonl", langfuse=True
```

Importing this package loads only the OpenTelemetry API. [`configure`][ragaudit.tracing.configure] and
[`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter] need the SDK (``pip install 'ragaudit[otlp]'``) and import it
on first use. Names of every span, attribute and event are in
[`ragaudit.tracing.conventions`][ragaudit.tracing.conventions].
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import conventions
from .files import AuditLog, read_audit_log, read_spans
from .spans import SpanRecorder, TurnHandle, content_capture_from_env

if TYPE_CHECKING:
    from .files import JsonlSpanExporter
    from .http_exporters import HttpExporter, LangfuseExporter, PhoenixExporter
    from .score_metrics import ScoreMetricsExporter
    from .setup import configure

__all__ = [
    "AuditLog",
    "HttpExporter",
    "JsonlSpanExporter",
    "LangfuseExporter",
    "PhoenixExporter",
    "ScoreMetricsExporter",
    "SpanRecorder",
    "TurnHandle",
    "configure",
    "content_capture_from_env",
    "conventions",
    "read_audit_log",
    "read_spans",
]


_LAZY = {"configure": ".setup", "JsonlSpanExporter": ".files", "HttpExporter": ".http_exporters",
         "LangfuseExporter": ".http_exporters", "PhoenixExporter": ".http_exporters",
         "ScoreMetricsExporter": ".score_metrics"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
