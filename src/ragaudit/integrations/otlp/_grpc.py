"""OTLP/gRPC ``TraceService/Export`` for the worker (the ``worker-grpc`` extra: ``grpcio``).

The same ingest as OTLP/HTTP, on the same event loop (``grpc.aio``): partial success for spans with
invalid ids, ``UNAVAILABLE`` (retryable, as the OTLP spec has it) when the worker is full or stopping,
``UNAUTHENTICATED`` without the bearer token (metadata ``authorization: Bearer <token>``, what the
Collector's ``otlp`` exporter sends with ``headers:``), TLS with the same files as HTTP.

One owner of a port: grpcio sets ``SO_REUSEPORT`` by default, so a second worker on a taken port
listened too and the kernel split the traffic between the two, silently. ``grpc.so_reuseport=0``
makes the second one fail to bind, as the HTTP port does, and that is said as a configuration error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ._decode import spans_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from grpc import HandlerCallDetails, RpcMethodHandler
    from grpc.aio import Server, ServerInterceptor, ServicerContext
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    from ._core import Worker
    from ._security import BearerToken

__all__ = ["start_grpc"]


async def start_grpc(worker: Worker, host: str, port: int) -> tuple[Server, int]:
    """Start a ``grpc.aio`` server for *worker* on *host*:*port*; returns it and the port bound."""
    try:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    except ImportError as exc:
        raise ConfigurationError("OTLP/gRPC needs grpcio: pip install 'ragaudit[worker-grpc]'") from exc

    class TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        async def Export(self, request: ExportTraceServiceRequest,
                         context: ServicerContext) -> ExportTraceServiceResponse:
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

    interceptors = [] if worker.auth_token is None else [_bearer_check(worker.auth_token, worker, grpc)]
    server = grpc.aio.server(interceptors=interceptors,
                             options=[("grpc.max_receive_message_length", worker.max_request_bytes),
                                      ("grpc.so_reuseport", 0)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    address = f"{host}:{port}"
    try:
        if worker.tls is not None:
            credentials = grpc.ssl_server_credentials([worker.tls.pem_pair()])
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio >= 1.5x raises where older ones returned 0
        raise ConfigurationError(f"cannot listen for OTLP/gRPC on {address}: the port is taken or the address "
                                 f"is not this host's ({exc})") from exc
    if bound == 0:
        raise ConfigurationError(f"cannot listen for OTLP/gRPC on {address}: the port is taken or the address "
                                 "is not this host's")
    await server.start()
    return server, bound


def _bearer_check(token: BearerToken, worker: Worker, grpc: Any) -> ServerInterceptor:  # grpc: the untyped module
    """A server interceptor that answers ``UNAUTHENTICATED`` to a call without *token*, from the
    call's metadata alone: the request is never parsed."""

    async def deny(request: bytes, context: ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "ragaudit worker: a bearer token is required "
                            "(metadata authorization: Bearer <token>)")

    denied = grpc.unary_unary_rpc_method_handler(deny)  # no deserializer: the body stays bytes

    class BearerCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
        async def intercept_service(
            self, continuation: Callable[[HandlerCallDetails], Awaitable[RpcMethodHandler]],
            details: HandlerCallDetails,
        ) -> RpcMethodHandler:
            metadata = dict(details.invocation_metadata or ())
            if token.accepts(metadata.get("authorization")):
                return await continuation(details)
            worker.count("requests_unauthorized")
            return denied

    return BearerCheck()
