"""Connection limits for the worker's HTTP face: header timeout and a cap on open connections.

aiohttp has no header read timeout (a client trickling header bytes holds its connection for as
long as it likes) and no cap on connections (each takes a file descriptor until the process runs
out, and then a real exporter's POST cannot connect). Each connection's protocol (aiohttp's
``RequestHandler``) is wrapped here: a timer runs from a request's first byte (and from the
connection's start) until aiohttp hands the request to the application, and closes the connection
when it fires; the number of open connections is capped, and a new connection past the cap closes
the oldest one that is idle or still sending headers, so slow clients cannot crowd out a fast one.

All of it runs on the event loop's thread (asyncio protocols), so nothing here takes a lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ._security import ConnectionLimits

__all__ = ["ConnectionGuard"]


class _Conn(asyncio.Protocol):
    """One connection: aiohttp's protocol inside, its header timer and state beside it."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.BaseTransport | None = None
        self.in_request = False
        self.started = False  # aiohttp's handler was given the connection (it was admitted)
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol, delegated to aiohttp's handler --------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if not self.guard.admit(self):
            transport.close()
            return
        self._start_timer()
        self.started = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.in_request and self.timer is None:
            self._start_timer()  # the first byte of a request on a kept-alive connection
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.guard.forget(self)
        if self.started:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- the header timer ---------------------------------------------------------------------------

    def _start_timer(self) -> None:
        self._cancel_timer()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.limits.header_timeout_s, self._headers_too_slow)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _headers_too_slow(self) -> None:
        self.timer = None
        if not self.in_request:
            self.guard.count("connections_closed_header_timeout")
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def request_started(self) -> None:
        self.in_request = True
        self._cancel_timer()

    def request_done(self) -> None:
        self.in_request = False  # idle now: aiohttp's keep-alive timeout closes it if nothing follows


class ConnectionGuard:
    """The open connections of one HTTP server, within
    [`ConnectionLimits`][ragaudit.integrations.otlp.ConnectionLimits].

    `protocol_factory` wraps aiohttp's (``runner.server``); the application's middleware
    calls `request_started` / `request_done` with ``request.protocol``.
    """

    def __init__(self, limits: ConnectionLimits, count: Callable[[str], None]) -> None:
        self.limits = limits
        self.cap = limits.connection_cap()
        self.count = count
        self._open: dict[asyncio.BaseProtocol, _Conn] = {}  # aiohttp's handler -> its connection, oldest first

    def __len__(self) -> int:
        return len(self._open)

    def protocol_factory(self, make_inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Conn(self, make_inner())

    def admit(self, conn: _Conn) -> bool:
        if len(self._open) >= self.cap:
            victim = next((c for c in self._open.values() if not c.in_request), None)
            if victim is None:
                self.count("connections_refused")
                return False
            self.count("connections_evicted")
            self._forget_and_close(victim)
        self._open[conn.inner] = conn
        return True

    def _forget_and_close(self, conn: _Conn) -> None:
        # Closed now, and not counted against the cap while its transport finishes closing.
        self._open.pop(conn.inner, None)
        conn.close()

    def forget(self, conn: _Conn) -> None:
        self._open.pop(conn.inner, None)

    def request_started(self, handler: asyncio.BaseProtocol) -> None:
        conn = self._open.get(handler)
        if conn is not None:
            conn.request_started()

    def request_done(self, handler: asyncio.BaseProtocol) -> None:
        conn = self._open.get(handler)
        if conn is not None:
            conn.request_done()
