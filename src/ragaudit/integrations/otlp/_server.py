"""The HTTP face of the worker: OTLP/HTTP ``POST /v1/traces`` and the operational endpoints, on aiohttp.

Why aiohttp: one well-kept package (aio-libs) that is both the server and nothing else we need —
no ASGI layer between the socket and the handler; it reads chunked request bodies (Node's OTLP
exporter sends no content-length) and decompresses ``Content-Encoding: gzip`` itself, bounds the
body size (``client_max_size``, answered 413), and shuts down gracefully (``AppRunner.cleanup``
waits for requests in progress). uvicorn + starlette would be two packages for the same.

Responses follow the OTLP/HTTP spec: 200 with an ``ExportTraceServiceResponse`` in the request's
encoding (``partial_success`` with ``rejected_spans`` when some spans had invalid ids), 400 for a
body that does not decode (not retryable), 415 for another content type, and 503 with
``Retry-After`` when the worker is full or stopping — the sender keeps the data and retries, so
nothing is accepted that would then be dropped uncounted.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from ._decode import DecodeError, encode_response

if TYPE_CHECKING:
    from ._core import Worker

__all__ = ["make_app"]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
WORKER_KEY: web.AppKey[Worker] = web.AppKey("worker")


def _retry_after(worker: Worker, reason: str) -> web.Response:
    return web.Response(status=503, text=f"ragaudit worker: {reason}; retry later",
                        headers={"Retry-After": str(worker.retry_after_s)})


async def _traces(request: web.Request) -> web.Response:
    worker: Worker = request.app[WORKER_KEY]
    content_type = request.content_type
    if content_type not in (_PROTOBUF, _JSON):
        worker.count("requests_unsupported_media_type")
        return web.Response(status=415, text=f"unsupported content type {content_type!r}: send {_PROTOBUF} or "
                            f"{_JSON}")
    if not worker.accepting:
        worker.count("requests_refused_stopping")
        return _retry_after(worker, "stopping")
    body = await request.read()
    json_body = content_type == _JSON
    try:
        outcome = worker.ingest(body, json_body=json_body)
    except DecodeError as exc:
        worker.count("requests_bad")
        return web.Response(status=400, text=str(exc))
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


def make_app(worker: Worker, max_request_bytes: int) -> web.Application:
    """The aiohttp application serving *worker*."""
    app = web.Application(client_max_size=max_request_bytes)
    app[WORKER_KEY] = worker
    app.router.add_post("/v1/traces", _traces)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/stats", _stats)
    return app
