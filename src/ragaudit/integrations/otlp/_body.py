"""An OTLP/HTTP request body, read within bounds: its size after decompression, its time, and the
worker's in-flight memory.

aiohttp's own decompression is off (``auto_decompress=False``): it inflates in 32 MiB pieces and
keeps reading a body it refused, so a 2 MB gzip bomb grew the worker by ~450 MB. Here the raw bytes
come off the socket in aiohttp's small reads (its stream pauses the socket past 64 KiB), each is
inflated with ``max_length`` set to what the limit still allows, and the first byte past the limit
stops the read: 413, and the connection is closed with the rest of the body unread. Every byte kept
is reserved from the worker's in-flight budget first (full: 503 and ``Retry-After``, the sender
retries), so many bodies being read at once are bounded too, not only each one.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from ._core import Worker

__all__ = ["BodyRefused", "Reservation", "read_body"]

_ENCODINGS = {"": None, "identity": None, "gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
_AUTO_HEADER = zlib.MAX_WBITS | 32  # a gzip or a zlib header, whichever the stream starts with
_DRAIN_BYTES = 256 * 1024  # read (and drop) this much of a refused body at most before closing, as Go's server
_DRAIN_S = 1.0


class BodyRefused(Exception):
    """A body not taken: the HTTP *status* to answer, the *counter* it goes to, and why."""

    def __init__(self, status: int, counter: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.counter = counter


class Reservation:
    """The bytes of one request held in the worker's in-flight budget until the request is done."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self.bytes = 0

    def take(self, n: int) -> None:
        if not self._worker.reserve_bytes(n):
            raise BodyRefused(503, "requests_refused_full",
                              f"in-flight memory full ({self._worker.max_inflight_bytes} bytes)")
        self.bytes += n

    def release(self) -> None:
        self._worker.release_bytes(self.bytes)
        self.bytes = 0


def _decoder(request: web.Request) -> zlib._Decompress | None:
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in _ENCODINGS:
        raise BodyRefused(415, "requests_unsupported_media_type",
                          f"unsupported content encoding {encoding!r}: send gzip or none")
    return None if _ENCODINGS[encoding] is None else zlib.decompressobj(_AUTO_HEADER)


async def read_body(request: web.Request, reservation: Reservation, limit: int, timeout_s: float) -> bytearray:
    """The decompressed body of *request*: at most *limit* bytes, read within *timeout_s*.

    Raises `BodyRefused` (413 past the limit, 408 past the time, 400 for a body that does
    not inflate, 415 for an encoding other than gzip/deflate, 503 when the in-flight budget is full).
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyRefused(413, "requests_too_large", f"request body of {declared} bytes over the limit of {limit}")
    inflater = _decoder(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    body = bytearray()
    raw = 0
    while True:
        remaining = deadline - loop.time()
        try:
            chunk = await asyncio.wait_for(request.content.readany(), max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise BodyRefused(408, "requests_timed_out", f"request body not read within {timeout_s:g}s") from None
        if not chunk:
            break
        raw += len(chunk)
        if raw > limit:
            raise BodyRefused(413, "requests_too_large", f"request body over the limit of {limit} bytes")
        if inflater is None:
            reservation.take(len(chunk))
            body += chunk
        else:
            inflater = _inflate(inflater, chunk, body, reservation, limit)
    if inflater is not None and not inflater.eof:
        raise BodyRefused(400, "requests_bad", "the body is labelled gzip but is not a whole gzip stream")
    return body


def _inflate(inflater: zlib._Decompress, data: bytes, body: bytearray, reservation: Reservation,
             limit: int) -> zlib._Decompress:
    """Inflate *data* onto *body*, never producing more than one byte past *limit*; returns the
    decompressor for the next chunk (a new one when a gzip member ended: concatenated members are
    one body, as ``gzip.decompress`` and Go's reader have it)."""
    while data:
        try:
            out = inflater.decompress(data, limit - len(body) + 1)
        except zlib.error as exc:
            raise BodyRefused(400, "requests_bad", f"the body is labelled gzip but does not inflate: {exc}") from exc
        if len(body) + len(out) > limit:
            raise BodyRefused(413, "requests_too_large", f"request body over the limit of {limit} bytes once "
                              "decompressed")
        reservation.take(len(out))
        body += out
        if inflater.eof:
            data = inflater.unused_data
            if data:
                inflater = zlib.decompressobj(_AUTO_HEADER)
        else:
            data = inflater.unconsumed_tail
    return inflater


async def refuse_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Answer *response* now and close the connection with the rest of the body unread.

    A little of the body is read and dropped first (at most 256 KiB, within a second), so that a
    sender still writing sees the answer rather than a reset; then the connection is closed."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DRAIN_S
    drained = 0
    try:
        while drained < _DRAIN_BYTES and not request.content.is_eof():
            chunk = await asyncio.wait_for(request.content.readany(), max(deadline - loop.time(), 0.001))
            if not chunk:
                break
            drained += len(chunk)
    except (asyncio.TimeoutError, ConnectionError):
        pass
    if request.transport is not None:
        request.transport.close()
    return response
