"""The OTel SDK setup of the test apps, as the instrumentations' READMEs write it (no ragaudit code).

``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is where the app sends (the worker); ``APP_ALSO_EXPORT_TO``,
when set, is a second OTLP/HTTP traces URL the same spans go to (what a Collector's fan-out to
Jaeger or Phoenix does), so a test can see the app's own spans next to the judgement.
"""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def tracer_provider(service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    also = os.environ.get("APP_ALSO_EXPORT_TO")
    if also:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=also)))
    return provider
