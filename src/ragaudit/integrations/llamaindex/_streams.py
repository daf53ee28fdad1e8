"""Following a streamed answer to its end: token generators wrapped so the turn closes when the
stream is consumed, fails, or is dropped half way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse

from ..._worker import BatchWorker, run_jobs
from .._common import report_failure
from ._state import STREAM_TURN, Turn

if TYPE_CHECKING:
    from types import TracebackType

    from ._collector import Collector

__all__ = ["AsyncStreamTap", "StreamTap", "stream_closer"]


def _stream_close_failed(exc: BaseException) -> None:
    report_failure("closing an abandoned LlamaIndex stream", exc)


# Closes the turns of streams the garbage collector dropped. A finalizer may run on any thread at
# any moment, even inside the host's own locks, so it only queues the job; one worker for the
# process, its thread started with the first stream (not from inside a finalizer).
stream_closer: BatchWorker[Callable[[], None]] = BatchWorker(
    "llamaindex-streams", run_jobs, max_queue=10_000, on_error=_stream_close_failed)


_STOPPED = (GeneratorExit, asyncio.CancelledError)  # the consumer stopped; nothing failed


class _Tap:
    """What both stream wrappers share: the turn they feed, the text so far, and closing it once."""

    # Until __init__ has run, a tap counts as done: __del__ of a half-made one closes nothing.
    _done = True

    def __init__(self, collector: Collector, turn: Turn, response: object) -> None:
        self._collector = collector
        self._turn = turn
        self._response: Any = response  # only until install(): a tap must not keep its response alive
        self._parts: list[str] = []
        self._done = False
        stream_closer.start()

    def install(self) -> None:
        """Put this tap in the response in place of its token generator."""
        self._response.response_gen = self
        del self._response

    def _took(self, item: object) -> None:
        if isinstance(item, str):
            self._parts.append(item)

    def _finish(self, state: str, error: BaseException | None, deferred: bool = False) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._collector.stream_ended(self._turn, "".join(self._parts), state, error, deferred)
        except Exception as exc:
            report_failure("closing a LlamaIndex stream", exc)

    def __del__(self) -> None:
        if not self._done:
            self._finish("abandoned", None, deferred=True)


class _Step:
    """One step of a wrapped stream: model calls made in it belong to the tap's turn, and its end
    (exhausted, failed, stopped by the consumer) closes the turn."""

    __slots__ = ("_tap", "_thrown", "_token")

    def __init__(self, tap: _Tap, thrown: BaseException | None = None) -> None:
        self._tap = tap
        self._thrown = thrown

    def __enter__(self) -> None:
        self._token = STREAM_TURN.set((self._tap._collector, self._tap._turn))

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        STREAM_TURN.reset(self._token)
        if exc is None:
            return
        if isinstance(exc, (StopIteration, StopAsyncIteration)):
            self._tap._finish("consumed", None)
        elif exc is self._thrown or isinstance(exc, _STOPPED):
            self._tap._finish("abandoned", None)
        else:
            self._tap._finish("error", exc)


class StreamTap(_Tap, Generator[str, None, None]):
    """Stands in for ``StreamingResponse.response_gen``: passes every token through, keeps the text,
    and closes the turn when the stream ends, fails, is closed, or is dropped unfinished."""

    def __init__(self, collector: Collector, turn: Turn, response: StreamingResponse) -> None:
        super().__init__(collector, turn, response)
        self._inner: Any = iter(response.response_gen)

    def send(self, value: object) -> str:
        if self._done:
            raise StopIteration
        with _Step(self):
            item = next(self._inner) if value is None else self._inner.send(value)
        self._took(item)
        return item

    def throw(self, typ: type[BaseException] | BaseException, val: object = None,  # type: ignore[override]
              tb: TracebackType | None = None) -> str:
        exc = typ if isinstance(typ, BaseException) else val if isinstance(val, BaseException) else typ()
        inner_throw = getattr(self._inner, "throw", None)
        if self._done or inner_throw is None:
            self._finish("abandoned", None)
            raise exc
        with _Step(self, thrown=exc):
            item = inner_throw(exc)
        self._took(item)
        return item

    def close(self) -> None:
        if self._done:
            return
        try:
            closer = getattr(self._inner, "close", None)
            if closer is not None:
                closer()
        finally:
            self._finish("abandoned", None)


class AsyncStreamTap(_Tap):
    """The async counterpart of `StreamTap`, for ``AsyncStreamingResponse.response_gen``."""

    def __init__(self, collector: Collector, turn: Turn, response: AsyncStreamingResponse) -> None:
        super().__init__(collector, turn, response)
        self._inner: AsyncIterator[str] = response.response_gen.__aiter__()

    def __aiter__(self) -> AsyncStreamTap:
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        with _Step(self):
            item = await self._inner.__anext__()
        self._took(item)
        return item

    async def aclose(self) -> None:
        if self._done:
            return
        try:
            closer = getattr(self._inner, "aclose", None)
            if closer is not None:
                await closer()
        finally:
            self._finish("abandoned", None)
