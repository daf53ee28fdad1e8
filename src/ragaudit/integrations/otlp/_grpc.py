"""OTLP/gRPC ``TraceService/Export`` for the worker (the ``worker-grpc`` extra: ``grpcio``).

The same ingest as OTLP/HTTP, on the same event loop (``grpc.aio``): partial success for spans with
invalid ids, ``UNAVAILABLE`` (retryable, as the OTLP spec has it) when the worker is full or stopping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ._decode import spans_of

if TYPE_CHECKING:
    from ._core import Worker

__all__ = ["start_grpc"]


async def start_grpc(worker: Worker, host: str, port: int) -> tuple[Any, int]:
    """Start a ``grpc.aio`` server for *worker* on *host*:*port*; returns it and the port bound."""
    try:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    except ImportError as exc:
        raise ConfigurationError("OTLP/gRPC needs grpcio: pip install 'ragaudit[worker-grpc]'") from exc

    class TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        async def Export(self, request: Any, context: Any) -> Any:
            worker.count("requests")
            if not worker.accepting:
                worker.count("requests_refused_stopping")
                await context.abort(grpc.StatusCode.UNAVAILABLE, "ragaudit worker: stopping")
            spans, rejected = spans_of(request)
            outcome = worker.add_spans(spans, rejected)
            if outcome.refused:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"ragaudit worker: {outcome.message}")
            response = ExportTraceServiceResponse()
            if rejected:
                response.partial_success.rejected_spans = rejected
                response.partial_success.error_message = outcome.message
            return response

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", worker.max_request_bytes)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise ConfigurationError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    await server.start()
    return server, bound
