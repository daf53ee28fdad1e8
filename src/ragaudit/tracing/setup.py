"""``configure()``: send ragaudit's spans somewhere (OTLP over HTTP or gRPC, the console, a JSONL file).

Needs the OpenTelemetry SDK and exporters (``pip install 'ragaudit[otlp]'``); they are imported when
[`configure`][ragaudit.tracing.configure] is called, never when [`ragaudit.tracing`][ragaudit.tracing] is imported.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as _trace_api

from .. import _fork
from .._worker import HostFirst, call_with_deadline, exit_deadline
from ..content import register_headers, register_url
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["LANGFUSE_DEFAULT_HOST", "PROTOCOLS", "configure", "counted_exporter", "langfuse_host", "spans_not_exported"]

_logger = logging.getLogger("ragaudit")

PROTOCOLS = ("http/protobuf", "grpc")
"""The OTLP protocols [`configure`][ragaudit.tracing.configure] accepts."""
LANGFUSE_DEFAULT_HOST = "https://cloud.langfuse.com"
_LANGFUSE_OTEL_PATH = "/api/public/otel"
_TRACES_PATH = "/v1/traces"
_EXTRA_HINT = "pip install 'ragaudit[otlp]'"
_HOST_KEYS = ("host.id", "host.ip", "host.name")
"""Resource attributes Jaeger's clock-skew adjuster derives a span's host from, in its order."""

# What configure() already attached to each provider, so calling it twice does not export twice.
_attached: weakref.WeakKeyDictionary[Any, set[tuple[str, ...]]] = weakref.WeakKeyDictionary()
_lock = _fork.lock()


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def langfuse_host(explicit: str | None = None) -> str:
    """The Langfuse host traces and scores go to: *explicit*, else ``$LANGFUSE_BASE_URL`` (the
    Langfuse SDK's current name), else ``$LANGFUSE_HOST`` (its older one), else Langfuse Cloud.

    [`configure`][ragaudit.tracing.configure] and [`LangfuseExporter`][ragaudit.tracing.LangfuseExporter] both use it,
    so scores land in the same project as their traces whichever variables are set.
    """
    return (explicit or _env("LANGFUSE_BASE_URL", "LANGFUSE_HOST") or LANGFUSE_DEFAULT_HOST).rstrip("/")


def _resolve_protocol(protocol: str | None) -> str:
    value = (
        protocol or _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOLS[0]
    )
    value = value.strip().lower()
    if value not in PROTOCOLS:
        raise ConfigurationError(
            f"unsupported OTLP protocol {value!r}: use one of {', '.join(PROTOCOLS)} "
            "(the Python OTLP exporters do not speak http/json)"
        )
    return value


def _parse_headers(headers: Mapping[str, str] | str | None) -> dict[str, str] | None:
    if headers is None:
        return None
    if isinstance(headers, str):
        # The OTel SDK's own parser of OTEL_EXPORTER_OTLP_HEADERS (URL-decoding, lower-case names; liberal
        # as the exporters call it). It skips an entry it cannot read with a logged warning; an explicit
        # argument that loses a header is a configuration error here, so each entry is read on its own.
        from opentelemetry.util.re import parse_env_headers

        out: dict[str, str] = {}
        for item in re.split(r"[ \t]*,[ \t]*", headers):
            if not item.strip():
                continue
            parsed = parse_env_headers(item, liberal=True)
            if not parsed:
                raise ConfigurationError(f"bad header {item.strip()!r}: expected key=value[,key=value...]")
            out.update(parsed)
        return out
    if not isinstance(headers, Mapping):
        raise ConfigurationError(
            f"headers must be a mapping or a 'k=v,k2=v2' string, got {type(headers).__name__}"
        )
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _traces_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(_TRACES_PATH) else base + _TRACES_PATH


def _langfuse_target(endpoint: str | None, headers: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    public_key = _env("LANGFUSE_PUBLIC_KEY")
    secret_key = _env("LANGFUSE_SECRET_KEY")
    missing = [
        name
        for name, value in (("LANGFUSE_PUBLIC_KEY", public_key), ("LANGFUSE_SECRET_KEY", secret_key))
        if not value
    ]
    if missing:
        raise ConfigurationError(
            f"configure(langfuse=True) needs {' and '.join(missing)} in the environment "
            "(the project's API keys from Langfuse's settings page)"
        )
    host = langfuse_host(endpoint)
    if _LANGFUSE_OTEL_PATH not in host:
        host += _LANGFUSE_OTEL_PATH
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode("ascii")
    merged = {"authorization": f"Basic {token}", "x-langfuse-ingestion-version": "4"}
    merged.update(headers or {})
    return _traces_url(host), merged


EXPORT_TIMEOUT_S = 5.0
"""Seconds one OTLP export request may take (the SDK's default is 10 s), unless
``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` / ``OTEL_EXPORTER_OTLP_TIMEOUT`` say otherwise."""
EXIT_TIMEOUT_S = 2.0
"""Seconds the exit hook gives the provider [`configure`][ragaudit.tracing.configure] created to shut down when no
Auditor set the exit deadline; with one, what is left of its ``exit_timeout_s`` (the Auditor's exit flush
already flushed the exporters), at least 0.1 s."""


def _export_timeout_s() -> float | None:
    # None: the exporter reads the OTEL_* variable itself (which it prefers to our default).
    if _env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        return None
    return EXPORT_TIMEOUT_S


_failed_lock = _fork.lock()
# Spans each provider's counted exporters failed to export, by provider, so that a flush is answered
# for the providers its writers use only (another Auditor's dead endpoint is not this one's failure).
# Weak keys: a provider the host drops takes its count with it.
_failed: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def spans_not_exported(provider: Any = None) -> int:
    """How many spans the exporters [`configure`][ragaudit.tracing.configure] (or the worker) added to *provider* failed
    to export so far; every provider's together when *provider* is None. A flush uses it to say
    truthfully whether its spans were delivered: the SDK's ``force_flush`` returns True even when
    the export failed."""
    with _failed_lock:
        if provider is None:
            return sum(_failed.values())
        return _failed.get(provider, 0)


_EXPORT_CHUNK = 64
_EXPORT_PAUSE_S = 0.01


def counted_exporter(exporter: Any, provider: Any) -> Any:
    """*exporter*, its failures counted under *provider* (see `spans_not_exported`) and its
    batches sent in chunks with the host let in between."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    owner = weakref.ref(provider)

    class CountedExporter(SpanExporter):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self._pacer = HostFirst()

        def _failed(self, count: int) -> None:
            target = owner()
            if target is None:  # the provider is gone: nobody can flush it any more
                return
            with _failed_lock:
                _failed[target] = _failed.get(target, 0) + count

        def export(self, spans: Any) -> Any:
            # The batch processor hands over up to 512 spans at once; encoding them is tens of ms
            # of interpreter time on its thread, taken from the host's threads. In chunks, with
            # the host let in between (the background's pacing), that cost is export latency.
            spans = list(spans)
            result = SpanExportResult.SUCCESS
            for start in range(0, len(spans), _EXPORT_CHUNK):
                if start:  # short pauses: the processor's queue (2048 spans) must keep draining
                    self._pacer.pace(0.0, None, _EXPORT_PAUSE_S)
                chunk = spans[start:start + _EXPORT_CHUNK]
                try:
                    outcome = self._inner.export(chunk)
                except Exception:
                    self._failed(len(spans) - start)
                    raise
                if outcome is not SpanExportResult.SUCCESS:
                    self._failed(len(chunk))
                    result = outcome
            return result

        def shutdown(self) -> None:
            self._inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self._inner.force_flush(timeout_millis))

    return CountedExporter(exporter)


def _shutdown_at_exit(provider: Any) -> None:
    """Shut *provider* down at exit within `EXIT_TIMEOUT_S`, whatever its endpoint does.

    The SDK's own exit hook (``shutdown_on_exit``) waits up to 30 s per processor, and its
    ``force_flush`` does not honour its timeout at all (a black-holed endpoint held exit for 49 s):
    the call runs on a worker thread instead, and is abandoned at the deadline.
    """
    import atexit

    ref = weakref.ref(provider)

    def shutdown() -> None:
        target = ref()
        if target is None:
            return
        budget = max(0.1, exit_deadline(EXIT_TIMEOUT_S) - time.monotonic())
        finished, _ = call_with_deadline(target.shutdown, budget)
        if not finished:
            print(f"ragaudit: the tracer provider did not shut down within {budget:.1f}s at exit; spans still "
                  "buffered were not exported", file=sys.stderr, flush=True)

    # Plain atexit runs after threading's exit hooks, so after the Auditors' exit flush.
    atexit.register(shutdown)


def _import_sdk() -> Any:
    try:
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.trace import export  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"tracing.configure() needs the OpenTelemetry SDK: {_EXTRA_HINT}") from exc
    return sdk_trace


def _otlp_factory(
    protocol: str, url: str | None, headers: dict[str, str] | None
) -> Callable[[], SpanExporter]:
    # The exporter's credentials (a Langfuse Basic token, an x-honeycomb-team header, a key in the
    # URL) are scrubbed from every text ragaudit records.
    register_headers(headers)
    register_url(url)
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError as exc:
            raise ConfigurationError(
                f"OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc: {_EXTRA_HINT}"
            ) from exc

        insecure = True if url is not None and url.startswith("http://") else None
        return lambda: GrpcExporter(endpoint=url, headers=headers, insecure=insecure, timeout=_export_timeout_s())
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    except ImportError as exc:
        raise ConfigurationError(
            f"OTLP over HTTP needs opentelemetry-exporter-otlp-proto-http: {_EXTRA_HINT}"
        ) from exc
    return lambda: HttpExporter(endpoint=url, headers=headers, timeout=_export_timeout_s())


def _exporters(
    endpoint: str | None,
    protocol: str | None,
    console: bool,
    file: str | os.PathLike[str] | None,
    headers: Mapping[str, str] | str | None,
    langfuse: bool,
) -> list[tuple[tuple[str, ...], Callable[[], SpanExporter]]]:
    """Validate everything before any global state is touched; return (dedupe key, factory) pairs."""
    if endpoint is not None and (not isinstance(endpoint, str) or not endpoint.strip()):
        raise ConfigurationError(f"endpoint must be a non-empty URL string, got {endpoint!r}")
    parsed_headers = _parse_headers(headers)
    out: list[tuple[tuple[str, ...], Callable[[], SpanExporter]]] = []
    if langfuse:
        if protocol is not None and protocol.strip().lower() != "http/protobuf":
            raise ConfigurationError("Langfuse accepts OTLP over HTTP only: use protocol='http/protobuf'")
        lf_url, lf_headers = _langfuse_target(endpoint, parsed_headers)
        out.append((("otlp", "http/protobuf", lf_url), _otlp_factory("http/protobuf", lf_url, lf_headers)))
    else:
        resolved = _resolve_protocol(protocol)
        url: str | None
        if resolved == "grpc":
            url = endpoint or _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
        elif endpoint is not None:
            url = _traces_url(endpoint)
        else:
            url = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            if url is None:
                base = _env("OTEL_EXPORTER_OTLP_ENDPOINT")
                url = _traces_url(base) if base is not None else None
        if url is not None:
            # headers=None lets the exporter read OTEL_EXPORTER_OTLP_(TRACES_)HEADERS itself.
            out.append((("otlp", resolved, url), _otlp_factory(resolved, url, parsed_headers)))
    if console:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        out.append((("console",), ConsoleSpanExporter))
    if file is not None:
        from .files import JsonlSpanExporter

        path = Path(file).expanduser().resolve()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.open("a", encoding="utf-8").close()
        except OSError as exc:
            raise ConfigurationError(f"cannot write the span file {str(path)!r}: {exc}") from exc
        out.append((("file", str(path)), lambda: JsonlSpanExporter(path)))
    return out


def _resource(service_name: str | None) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "ragaudit"}))
    if not any(key in resource.attributes for key in _HOST_KEYS):
        # Jaeger's clock-skew adjuster treats spans whose resource names no host as coming from
        # different hosts, and flags every child that does not fit inside its parent, as a judge
        # span that runs after its turn ended never does. With host.name set it compares only
        # spans of different hosts.
        try:
            hostname = socket.gethostname()
        except OSError:
            hostname = ""
        if hostname:
            resource = resource.merge(Resource({"host.name": hostname}))
    return resource


def _provider(sdk_trace: Any, service_name: str | None) -> TracerProvider:
    current = _trace_api.get_tracer_provider()
    if hasattr(current, "add_span_processor"):
        if service_name:
            _logger.info(
                "ragaudit: a tracer provider is already set; service_name=%r is ignored", service_name
            )
        return current  # type: ignore[return-value]
    provider = sdk_trace.TracerProvider(resource=_resource(service_name), shutdown_on_exit=False)
    _shutdown_at_exit(provider)
    if not isinstance(current, _trace_api.ProxyTracerProvider):
        _logger.warning(
            "ragaudit: the global tracer provider is a %s that cannot take exporters; configure() returns "
            "a separate provider: pass it as tracer_provider= to ragaudit",
            type(current).__name__,
        )
        return provider  # type: ignore[no-any-return]
    _trace_api.set_tracer_provider(provider)
    winner = _trace_api.get_tracer_provider()
    if winner is not provider and hasattr(winner, "add_span_processor"):
        return winner  # type: ignore[return-value]  # another thread set one first
    return provider  # type: ignore[no-any-return]


def configure(
    endpoint: str | None = None,
    protocol: str | None = None,
    service_name: str | None = None,
    console: bool = False,
    file: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | str | None = None,
    *,
    langfuse: bool = False,
) -> TracerProvider:
    """Export spans over OTLP, to the console and/or to a JSONL file, and return the tracer provider.

    Args:
        endpoint: the OTLP collector. For ``http/protobuf`` a base URL (``http://localhost:4318``;
            ``/v1/traces`` is appended unless present); for ``grpc`` host and port
            (``http://localhost:4317``). None: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is)
            or ``OTEL_EXPORTER_OTLP_ENDPOINT``; with neither set no OTLP exporter is added.
        protocol: ``http/protobuf`` or ``grpc``; None: ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``,
            else ``http/protobuf``.
        service_name: the ``service.name`` resource; None: ``OTEL_SERVICE_NAME``, else ``ragaudit``.
        console: also print each span to stdout.
        file: also append each span as a JSON line to this path (read with [`read_spans`][ragaudit.tracing.read_spans]).
        headers: extra OTLP headers, a mapping or ``"k=v,k2=v2"``; None: ``OTEL_EXPORTER_OTLP_HEADERS``.
        langfuse: export to Langfuse: ``$LANGFUSE_BASE_URL`` or ``$LANGFUSE_HOST`` (or *endpoint*;
            default https://cloud.langfuse.com) + ``/api/public/otel/v1/traces``, Basic auth from
            ``LANGFUSE_PUBLIC_KEY``/``LANGFUSE_SECRET_KEY``. The ``OTEL_EXPORTER_OTLP_*`` endpoint
            variables are not used then.

    Never replaces a tracer provider the application already set: if an SDK provider is installed
    globally, the exporters are added to it and it is returned; otherwise a new provider is created
    and installed. Every exporter runs behind a ``BatchSpanProcessor`` (the host's thread never
    waits on the network or the disk); the SDK flushes them at interpreter exit. Calling
    ``configure`` again with the same destination does not add it twice.

    Raises:
        ConfigurationError: bad protocol, endpoint or headers, missing Langfuse keys, or the SDK /
            exporter packages are not installed (``pip install 'ragaudit[otlp]'``).
    """
    sdk_trace = _import_sdk()
    wanted = _exporters(endpoint, protocol, console, file, headers, langfuse)
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _lock:
        provider = _provider(sdk_trace, service_name)
        done = _attached.setdefault(provider, set())
        for key, factory in wanted:
            if key in done:
                continue
            provider.add_span_processor(BatchSpanProcessor(counted_exporter(factory(), provider)))
            done.add(key)
    if not wanted:
        _logger.warning(
            "ragaudit: configure() found no destination (no endpoint, OTEL_EXPORTER_OTLP_ENDPOINT, "
            "console or file): spans are recorded but not exported"
        )
    return provider
