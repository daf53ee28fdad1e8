"""The worker's own telemetry: where judge spans, evaluation log records and metrics go.

Standard OTLP/HTTP exporters of the OTel SDK, configured the standard way: an explicit base URL
(``--otlp-endpoint``; ``/v1/traces``, ``/v1/logs``, ``/v1/metrics`` are added) or, without one, the
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_{TRACES,LOGS,METRICS}_ENDPOINT`` and
``..._HEADERS`` variables, which the exporters read themselves. Every provider's resource says
``service.name=ragaudit-worker`` (the loop guard: the worker never judges those spans).

Judge span ids are derived from the judged trace (`TraceDerivedIds`): judging the same
trace again (a redelivery, a restart) writes a span with the same id, which backends store once.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...content import register_headers, register_url
from ...errors import ConfigurationError
from ...tracing import conventions as c

if TYPE_CHECKING:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry

__all__ = ["WORKER_SERVICE", "Outputs", "TraceDerivedIds", "TraceDerivedProvider", "build_outputs"]

WORKER_SERVICE = "ragaudit-worker"
"""``service.name`` of everything the worker sends; spans from it are never judged."""

_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_seed: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragaudit_worker_span_seed", default=None)


class TraceDerivedIds:
    """An OTel ``IdGenerator``: span ids from a seed set around a judge span's start, else random."""

    def __init__(self) -> None:
        self._random = random.SystemRandom()

    def generate_span_id(self) -> int:
        seed = _seed.get()
        if seed is None:
            return self._random.getrandbits(64) or 1
        return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        """Trace ids are random (the SDK asks when it starts a root span: a session span is one)."""
        return True


class _SeededTracer:
    """A tracer whose spans that name a turn (``ragaudit.turn.id``) get ids derived from it."""

    def __init__(self, inner: trace.Tracer) -> None:
        self._inner = inner

    def start_span(self, name: str, context: Context | None = None, *args: Any, **kwargs: Any) -> trace.Span:
        attributes = kwargs.get("attributes") or {}
        turn_id = attributes.get(c.ATTR_TURN_ID) if isinstance(attributes, Mapping) else None
        if not isinstance(turn_id, str):
            return self._inner.start_span(name, context, *args, **kwargs)
        token = _seed.set(f"{turn_id}\x1f{name}")
        try:
            return self._inner.start_span(name, context, *args, **kwargs)
        finally:
            _seed.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TraceDerivedProvider:
    """Wraps an SDK ``TracerProvider`` made with `TraceDerivedIds` (see the module docstring)."""

    def __init__(self, inner: TracerProvider) -> None:
        self._inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> _SeededTracer:
        return _SeededTracer(self._inner.get_tracer(*args, **kwargs))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._inner.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class Outputs:
    """The worker's providers (each ``force_flush`` / ``shutdown`` at stop)."""

    tracer_provider: TraceDerivedProvider
    logger_provider: LoggerProvider
    meter_provider: MeterProvider
    endpoint: str | None
    prometheus: CollectorRegistry | None = None
    """The prometheus_client registry /metrics serves (None: exporter not installed)."""

    def prometheus_text(self) -> tuple[bytes, str] | None:
        """The metrics in Prometheus's text format and its content type; None without the exporter."""
        if self.prometheus is None:
            return None
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.prometheus), CONTENT_TYPE_LATEST

    def force_flush(self, timeout_s: float) -> bool:
        ok = True
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            if provider is not None:
                try:
                    ok = bool(provider.force_flush(max(1, int(timeout_s * 1000)))) and ok
                except Exception:  # a dead endpoint: the exporters count what they lost
                    ok = False
        return ok

    def shutdown(self) -> None:
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            if provider is not None:
                try:
                    provider.shutdown()
                except Exception:
                    pass


def _url(endpoint: str | None, signal: str) -> str | None:
    return None if endpoint is None else endpoint.rstrip("/") + f"/v1/{signal}"


def check_endpoint(endpoint: str | None) -> None:
    """Refuse to start without anywhere to send judgements (the exporters would default to
    ``localhost:4318``, which is usually the worker itself)."""
    if endpoint is not None:
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigurationError(f"--otlp-endpoint must be an http(s) URL, got {endpoint!r}")
        return
    if not any(os.environ.get(name, "").strip() for name in _ENDPOINT_VARS):
        raise ConfigurationError(
            "ragaudit worker needs somewhere to send judgements: set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. the "
            "Collector's http://otel-collector:4318) or pass --otlp-endpoint")


def build_outputs(endpoint: str | None, headers: Mapping[str, str] | None = None, *,
                  metrics_interval_s: float = 10.0, resource: Mapping[str, str] | None = None) -> Outputs:
    """SDK providers with OTLP/HTTP exporters to *endpoint* (None: the ``OTEL_*`` variables)."""
    check_endpoint(endpoint)
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigurationError("ragaudit worker needs its extra: pip install 'ragaudit[worker]'") from exc
    from ...tracing.evaluation_logs import counted_log_exporter
    from ...tracing.setup import counted_exporter

    extra = dict(headers) if headers else None
    register_headers(extra)
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS"):
        register_headers(_parse_env_headers(os.environ.get(name)))
    register_url(endpoint)
    res = Resource.create({"service.name": WORKER_SERVICE, **dict(resource or {})})
    tracer_provider = TracerProvider(resource=res, id_generator=TraceDerivedIds(),  # type: ignore[arg-type]
                                     shutdown_on_exit=False)
    derived = TraceDerivedProvider(tracer_provider)
    # Failures are counted under the providers the judge spans and log records are written through
    # (the derived one, not the SDK's inside it): stats()["export_errors"] and /stats show them.
    spans_out = OTLPSpanExporter(endpoint=_url(endpoint, "traces"), headers=extra)
    tracer_provider.add_span_processor(BatchSpanProcessor(counted_exporter(spans_out, derived)))
    logger_provider = LoggerProvider(resource=res, shutdown_on_exit=False)
    logs_out = OTLPLogExporter(endpoint=_url(endpoint, "logs"), headers=extra)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(counted_log_exporter(logs_out, logger_provider)))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=_url(endpoint, "metrics"), headers=extra),
                                           export_interval_millis=max(1.0, metrics_interval_s * 1000))
    registry, pull = _prometheus_reader()
    meter_provider = MeterProvider(resource=res, metric_readers=[reader, *pull], shutdown_on_exit=False)
    return Outputs(derived, logger_provider, meter_provider, endpoint, registry)


def _prometheus_reader() -> tuple[CollectorRegistry | None, list[MetricReader]]:
    """A pull reader for ``/metrics`` with a registry of its own (never prometheus_client's global
    one: two workers in a process, or an app's own metrics, stay apart); none without the exporter."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
    except ImportError:  # an install without the worker extra's exporter: /metrics says so
        return None, []
    registry = CollectorRegistry(auto_describe=True)
    return registry, [PrometheusMetricReader(registry=registry)]


def _parse_env_headers(value: str | None) -> dict[str, str] | None:
    if not value:
        return None
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if sep:
            out[key.strip()] = val.strip()
    return out
