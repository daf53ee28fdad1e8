"""The HTTP clients a chat judge gives the ``openai`` SDK: one deadline per request (private).

**Which HTTP library.** The SDK is built on ``httpx`` up to 2.x and on ``httpx2`` from 3.0 (which
takes an ``httpx`` client only when ``httpx`` happens to be installed, and then mixes the two
libraries' stream types). `http_clients` asks the SDK which one through its public names --
the library ``openai.DefaultHttpxClient`` is a client of -- and builds the clients with the SDK's
own documented factories (``DefaultHttpx2Client``/``DefaultAsyncHttpx2Client`` on 3.x,
``DefaultHttpxClient``/``DefaultAsyncHttpxClient`` before), so ``httpx`` is never imported when the
SDK does not use it. The two libraries (and their ``httpcore``/``httpcore2``) share one public API, so
the code below is written once against whichever module is handed in.

**One deadline per request.** The SDK's ``timeout`` bounds each socket operation, so a server that
trickles its reply -- its headers as much as its body -- a byte at a time keeps a request going for
as long as it likes. The clients made here send through `DeadlineTransport` (an ``httpx``
transport on ``httpcore``'s connection pool, both public APIs), whose network backend gives every
socket operation at most what is left of the request's deadline: each HTTP request the SDK sends
(every retry is a request of its own) must be answered in full -- connect, write, headers and the
whole body -- within *seconds* of being sent; past that the operation fails as the phase's timeout
(``ReadTimeout`` while reading: the SDK's ``APITimeoutError``, retried by the SDK like any timeout).
One mechanism for the sync and the async client: a sync read cannot be interrupted from outside
without a thread of its own, so the bound is put on every read instead. The deadline travels in a
context variable the transport sets when the request starts: a sync request is read on its caller's
thread, an async one in its caller's task, so concurrent requests never see each other's deadline.

Where the environment names a proxy (``HTTPS_PROXY``, ...), the clients are the SDK's defaults
without this transport: ``httpx`` ignores environment proxies for a client given a transport of its
own, and reaching the endpoint matters more. Their requests are bounded by the SDK's per-operation
``timeout`` (*seconds*), not by one deadline per request.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import time
import urllib.request
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["DeadlineTransport", "http_clients"]

# The monotonic time the current request's answer is due (None: no deadline, e.g. pool upkeep).
_DUE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ragaudit_request_due", default=None)


def http_clients(sdk: ModuleType, seconds: float) -> tuple[Any, Any]:
    """``(make_sync, make_async)``: factories of the ``http_client`` for ``openai.OpenAI`` and
    ``openai.AsyncOpenAI`` with the SDK's defaults and one deadline of *seconds* per request."""
    name = _http_library(sdk)
    http, core = importlib.import_module(name), importlib.import_module(_CORE[name])
    if name == "httpx2" and hasattr(sdk, "DefaultHttpx2Client"):  # the names openai 3 documents
        sync_factory, async_factory = sdk.DefaultHttpx2Client, sdk.DefaultAsyncHttpx2Client
    else:  # the names openai 1.x and 2.x document
        sync_factory, async_factory = sdk.DefaultHttpxClient, sdk.DefaultAsyncHttpxClient
    limits = sdk.DEFAULT_CONNECTION_LIMITS

    def make_sync() -> Any:
        if _environment_proxies():
            return sync_factory()
        return sync_factory(transport=DeadlineTransport(http, core, seconds, limits, asynchronous=False))

    def make_async() -> Any:
        if _environment_proxies():
            return async_factory()
        return async_factory(transport=DeadlineTransport(http, core, seconds, limits, asynchronous=True))

    return make_sync, make_async


_CORE = {"httpx": "httpcore", "httpx2": "httpcore2"}  # each HTTP library's connection layer


def _environment_proxies() -> bool:
    """Whether the environment names a proxy (``HTTPS_PROXY``, ``ALL_PROXY``, ...; the system's
    settings on macOS and Windows): where ``httpx`` reads them from, ``urllib.request.getproxies``.

    ``httpx`` ignores them for a client given its own transport, so such a client is made without one.
    """
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))  # the ones httpx takes


def _http_library(sdk: ModuleType) -> str:
    """``"httpx"`` or ``"httpx2"``: the library of the client the SDK builds by default.

    ``openai.DefaultHttpxClient`` subclasses that library's ``Client`` in every major (``httpx2.Client``
    from 3.0). Not "does ``DefaultHttpx2Client`` exist": 2.x has it too, for an optional extra.
    """
    for cls in sdk.DefaultHttpxClient.__mro__:
        root = cls.__module__.partition(".")[0]
        if root in _CORE:
            return root
    raise ImportError(f"openai {getattr(sdk, '__version__', '?')}: no httpx or httpx2 client class found")


class DeadlineTransport:
    """An ``httpx`` (or ``httpx2``) transport on ``httpcore``'s pool whose every socket operation
    ends by the request's deadline, *seconds* after the request was handed to the transport.

    Made for one kind of client (*asynchronous*): ``handle_request`` or ``handle_async_request``.
    """

    def __init__(self, http: ModuleType, core: ModuleType, seconds: float, limits: Any, *,
                 asynchronous: bool) -> None:
        self._http, self._core, self.seconds = http, core, seconds
        backend = (_AsyncBackend(core.AnyIOBackend(), core) if asynchronous
                   else _SyncBackend(core.SyncBackend(), core))
        pool = core.AsyncConnectionPool if asynchronous else core.ConnectionPool
        self._pool = pool(
            ssl_context=http.create_ssl_context(), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )

    # -- the httpx transport API (httpx.BaseTransport / AsyncBaseTransport) -------------------------

    def handle_request(self, request: Any) -> Any:
        core_request = self._start(request)
        try:
            response = self._pool.handle_request(core_request)
        except Exception as exc:
            raise self._mapped(exc, request) from exc
        return self._response(response, request, _body_types(self._http)[0])

    async def handle_async_request(self, request: Any) -> Any:
        core_request = self._start(request)
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            raise self._mapped(exc, request) from exc
        return self._response(response, request, _body_types(self._http)[1])

    def close(self) -> None:
        self._pool.close()

    async def aclose(self) -> None:
        await self._pool.aclose()

    def __enter__(self) -> DeadlineTransport:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    async def __aenter__(self) -> DeadlineTransport:
        return self

    async def __aexit__(self, *args: object) -> None:
        await self.aclose()

    # -- the request and its reply ----------------------------------------------------------------

    def _start(self, request: Any) -> Any:
        """The ``httpcore`` request for *request*, its deadline set and every timeout capped at it."""
        _DUE.set(time.monotonic() + self.seconds)
        timeouts = request.extensions.get("timeout")
        timeouts = dict(timeouts) if isinstance(timeouts, Mapping) else {}
        for phase in ("connect", "read", "write", "pool"):
            value = timeouts.get(phase)
            timeouts[phase] = self.seconds if not isinstance(value, (int, float)) else min(value, self.seconds)
        url = request.url
        return self._core.Request(
            method=request.method,
            url=self._core.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw, content=request.stream,
            extensions={**request.extensions, "timeout": timeouts},
        )

    def _response(self, response: Any, request: Any, body: Any) -> Any:
        return self._http.Response(status_code=response.status, headers=response.headers,
                                   stream=body(self, response.stream, request), extensions=response.extensions)

    def _mapped(self, exc: Exception, request: Any) -> Exception:
        """*exc* as the ``httpx`` exception of the same name (``httpcore.ReadTimeout`` ->
        ``httpx.ReadTimeout``), as httpx's own transport maps them; anything else unchanged."""
        if not isinstance(exc, self._core.TimeoutException | self._core.NetworkError | self._core.ProtocolError
                          | self._core.UnsupportedProtocol | self._core.ProxyError):
            return exc
        kind = getattr(self._http, type(exc).__name__, None)
        if not (isinstance(kind, type) and issubclass(kind, self._http.TransportError)):
            kind = self._http.TransportError
        mapped: Exception = kind(str(exc) or type(exc).__name__, request=request)
        return mapped


@functools.cache
def _body_types(http: ModuleType) -> tuple[type, type]:
    """The reply-body streams for *http*: ``httpx`` insists a response's stream is one of its own
    byte-stream types, so they subclass them (made on first use, once per module)."""

    class SyncBody(http.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, transport: DeadlineTransport, chunks: Any, request: Any) -> None:
            self._transport, self._chunks, self._request = transport, chunks, request

        def __iter__(self) -> Any:
            try:
                yield from self._chunks
            except Exception as exc:  # httpcore's errors as httpx's, as httpx's own transport does
                raise self._transport._mapped(exc, self._request) from exc

        def close(self) -> None:
            self._chunks.close()

    class AsyncBody(http.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, transport: DeadlineTransport, chunks: Any, request: Any) -> None:
            self._transport, self._chunks, self._request = transport, chunks, request

        async def __aiter__(self) -> Any:
            try:
                async for chunk in self._chunks:
                    yield chunk
            except Exception as exc:
                raise self._transport._mapped(exc, self._request) from exc

        async def aclose(self) -> None:
            await self._chunks.aclose()

    return SyncBody, AsyncBody


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """*timeout* capped at what is left of the current request's deadline; *expired* once it passed."""
    due = _DUE.get()
    if due is None:
        return timeout
    left = due - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _SyncBackend:
    """``httpcore``'s network backend with every connect, read and write bounded by the deadline."""

    def __init__(self, inner: Any, core: ModuleType) -> None:
        self._inner, self._core = inner, core

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> Any:
        stream = self._inner.connect_tcp(host, port, timeout=_left(timeout, self._core.ConnectTimeout),
                                         local_address=local_address, socket_options=socket_options)
        return _SyncStream(stream, self._core)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        stream = self._inner.connect_unix_socket(path, timeout=_left(timeout, self._core.ConnectTimeout),
                                                 socket_options=socket_options)
        return _SyncStream(stream, self._core)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _SyncStream:
    def __init__(self, inner: Any, core: ModuleType) -> None:
        self._inner, self._core = inner, core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, _left(timeout, self._core.ReadTimeout))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, self._core.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        stream = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, self._core.ConnectTimeout))
        return _SyncStream(stream, self._core)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncBackend:
    """Like `_SyncBackend`, for the async pool."""

    def __init__(self, inner: Any, core: ModuleType) -> None:
        self._inner, self._core = inner, core

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> Any:
        stream = await self._inner.connect_tcp(host, port, timeout=_left(timeout, self._core.ConnectTimeout),
                                               local_address=local_address, socket_options=socket_options)
        return _AsyncStream(stream, self._core)

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        stream = await self._inner.connect_unix_socket(path, timeout=_left(timeout, self._core.ConnectTimeout),
                                                       socket_options=socket_options)
        return _AsyncStream(stream, self._core)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _AsyncStream:
    def __init__(self, inner: Any, core: ModuleType) -> None:
        self._inner, self._core = inner, core

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = await self._inner.read(max_bytes, _left(timeout, self._core.ReadTimeout))
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _left(timeout, self._core.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> Any:
        stream = await self._inner.start_tls(ssl_context, server_hostname, _left(timeout, self._core.ConnectTimeout))
        return _AsyncStream(stream, self._core)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
