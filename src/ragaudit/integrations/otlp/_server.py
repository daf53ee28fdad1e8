"""The HTTP face of the worker: OTLP/HTTP ``POST /v1/traces`` and the operational endpoints, on aiohttp.

Why aiohttp: one well-kept package (aio-libs) that is both the server and nothing else we need —
no ASGI layer between the socket and the handler; it reads chunked request bodies (Node's OTLP
exporter sends no content-length) and shuts down gracefully (``AppRunner.cleanup`` waits for
requests in progress). uvicorn + starlette would be two packages for the same.

What a service on a network needs and aiohttp leaves to us is here and beside it: the bearer token
(checked before a byte of the body is read), the body read within its limits (``_body``: size after
decompression, time, in-flight memory), and the connection limits (``_guard``: header timeout, a
cap on connections). A refused request is answered and its connection closed with the body unread.

Responses follow the OTLP/HTTP spec: 200 with an ``ExportTraceServiceResponse`` in the request's
encoding (``partial_success`` with ``rejected_spans`` when some spans had invalid ids), 400 for a
body that does not decode (not retryable), 401 without the token, 408 for a body too slow, 413 for
one too large, 415 for another content type or encoding, and 503 with ``Retry-After`` when the
worker is full or stopping — the sender keeps the data and retries, so nothing is accepted that
would then be dropped uncounted.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ._body import BodyRefused, Reservation, read_body, refuse_and_close
from ._decode import DecodeError, encode_response
from ._guard import ConnectionGuard

if TYPE_CHECKING:
    from ._core import Worker

__all__ = ["HttpServer", "make_app"]

logger = logging.getLogger("ragaudit")

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
WORKER_KEY: web.AppKey[Worker] = web.AppKey("worker")
GUARD_KEY: web.AppKey[ConnectionGuard] = web.AppKey("guard")
_OPEN_PATHS = ("/healthz", "/readyz")  # probes (kubelet) carry no token; they say only "ok" or why not


def _retry_after(worker: Worker, reason: str) -> web.Response:
    return web.Response(status=503, text=f"ragaudit worker: {reason}; retry later",
                        headers={"Retry-After": str(worker.retry_after_s)})


@web.middleware
async def _guarded(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
    """Marks the connection busy (its header timer off) while a request runs, and checks the token."""
    guard = request.app[GUARD_KEY]
    guard.request_started(request.protocol)
    try:
        worker = request.app[WORKER_KEY]
        token = worker.auth_token
        if token is not None and request.path not in _OPEN_PATHS \
                and not token.accepts(request.headers.get("Authorization")):
            worker.count("requests_unauthorized")
            return await refuse_and_close(request, web.Response(
                status=401, text="ragaudit worker: a bearer token is required (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": 'Bearer realm="ragaudit-worker"'}))
        return await handler(request)
    finally:
        guard.request_done(request.protocol)


async def _traces(request: web.Request) -> web.StreamResponse:
    worker: Worker = request.app[WORKER_KEY]
    content_type = request.content_type
    if content_type not in (_PROTOBUF, _JSON):
        worker.count("requests_unsupported_media_type")
        return await refuse_and_close(request, web.Response(
            status=415, text=f"unsupported content type {content_type!r}: send {_PROTOBUF} or {_JSON}"))
    if not worker.accepting:
        worker.count("requests_refused_stopping")
        return await refuse_and_close(request, _retry_after(worker, "stopping"))
    json_body = content_type == _JSON
    reservation = Reservation(worker)
    try:
        try:
            body = await read_body(request, reservation, worker.max_request_bytes, worker.limits.body_timeout_s)
        except BodyRefused as exc:
            worker.count(exc.counter)
            refusal = _retry_after(worker, str(exc)) if exc.status == 503 else web.Response(
                status=exc.status, text=f"ragaudit worker: {exc}")
            return await refuse_and_close(request, refusal)
        try:
            spans, rejected = worker.decode(body, json_body=json_body)
        except DecodeError as exc:
            worker.count("requests_bad")
            return web.Response(status=400, text=str(exc))
        del body
    finally:
        reservation.release()  # the body is gone: its spans are charged by add_spans instead
    outcome = worker.add_spans(spans, rejected)
    if outcome.refused:
        return _retry_after(worker, outcome.message)
    return web.Response(status=200, body=encode_response(json_body, outcome.rejected, outcome.message),
                        content_type=content_type)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    worker: Worker = request.app[WORKER_KEY]
    ready, why = worker.ready()
    return web.json_response({"ready": ready, "reason": why}, status=200 if ready else 503)


async def _stats(request: web.Request) -> web.Response:
    worker: Worker = request.app[WORKER_KEY]
    return web.Response(text=json.dumps(worker.stats(), sort_keys=True), content_type="application/json")


async def _metrics(request: web.Request) -> web.Response:
    """Prometheus's scrape: the worker's own counters and the score metrics of the turns it judged."""
    worker: Worker = request.app[WORKER_KEY]
    found = worker.prometheus_text()
    if found is None:
        return web.Response(status=404, text="ragaudit worker: no Prometheus exporter: pip install 'ragaudit[worker]'")
    body, content_type = found
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type  # with its version parameter, which content_type= refuses
    return response


def make_app(worker: Worker, guard: ConnectionGuard) -> web.Application:
    """The aiohttp application serving *worker* (bodies are read by ``_body``, not by aiohttp)."""
    app = web.Application(middlewares=[_guarded])
    app[WORKER_KEY] = worker
    app[GUARD_KEY] = guard
    app.router.add_post("/v1/traces", _traces)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/metrics", _metrics)
    return app


class HttpServer:
    """The worker's OTLP/HTTP listener: aiohttp's runner behind the connection guard, TLS when asked."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.guard = ConnectionGuard(worker.limits, worker.count)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    @property
    def open_connections(self) -> int:
        return len(self.guard)

    async def start(self, host: str, port: int) -> int:
        """Listen on *host*:*port*; returns the port bound. Raises OSError when it cannot."""
        worker = self.worker
        limits = worker.limits
        # auto_decompress off: _body inflates within the limit. lingering_time 0: a refused body is
        # not read on (refuse_and_close drains a little itself, then closes).
        runner = self._runner = web.AppRunner(
            make_app(worker, self.guard), handle_signals=False, access_log=None,
            shutdown_timeout=min(5.0, worker.shutdown_timeout_s), auto_decompress=False, lingering_time=0,
            keepalive_timeout=limits.keepalive_timeout_s)
        await runner.setup()
        protocol = runner.server
        assert protocol is not None  # set by setup()
        ssl_context = worker.tls.ssl_context() if worker.tls is not None else None
        kwargs: dict[str, Any] = {"ssl": ssl_context, "reuse_address": True, "backlog": 128}
        if ssl_context is not None:
            kwargs["ssl_handshake_timeout"] = limits.header_timeout_s
        try:
            self._server = await asyncio.get_running_loop().create_server(
                self.guard.protocol_factory(protocol), host, port, **kwargs)
        except BaseException:
            await runner.cleanup()
            raise
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, let requests in progress finish (within the runner's shutdown timeout)."""
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
