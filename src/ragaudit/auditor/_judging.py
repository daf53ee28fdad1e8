"""One judge call of the Auditor (a turn's or a session's): bounded by its deadline, contained whatever the
judge does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._worker import BatchWorker, call_on
from ..judges.base import RagJudge
from ..records import Judgement, JudgeRequest

__all__ = ["bounded_call", "judge_request"]

T = TypeVar("T")


class _JudgeRaised(Exception):
    """A SystemExit or KeyboardInterrupt from a judge, carried as an ordinary error."""


async def _contained(awaitable: Awaitable[T]) -> T:
    # asyncio re-raises SystemExit and KeyboardInterrupt out of the event loop, which would stop the
    # worker with every later turn stuck pending: a judge's own are turned into an error here.
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _JudgeRaised(f"{type(exc).__name__} raised by the judge: {exc}") from exc


async def judge_request(judge: RagJudge, request: JudgeRequest, timeout_s: float,
                        blocking: BatchWorker[Callable[[], None]] | None) -> Judgement:
    """*judge*'s judgement of *request* within *timeout_s*: on a thread of *blocking* for a sync judge,
    else on this loop. Never raises: a timeout, a raise or a wrong return type is a failed judgement."""
    return await bounded_call(str(judge.name), lambda: judge.judge(request), lambda: judge.ajudge(request),
                              Judgement, Judgement.failed, timeout_s, blocking)


async def bounded_call(judge_name: str, sync_call: Callable[[], T], async_call: Callable[[], Awaitable[T]],
                       kind: type[T], failed: Callable[..., T], timeout_s: float,
                       blocking: BatchWorker[Callable[[], None]] | None) -> T:
    """One judge call (a turn's judgement, a session's verdict) within *timeout_s*: *sync_call* on a
    thread of *blocking* when given, else *async_call* on this loop. Never raises: a timeout, a raise
    or a result that is no *kind* is ``failed(judge_name, error, latency_s=...)``."""
    started = time.perf_counter()
    try:
        if blocking is not None:
            future = call_on(blocking, sync_call)
            if future is None:
                raise RuntimeError("no thread to run the judge (interpreter shutdown)")
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        else:
            result = await asyncio.wait_for(_contained(async_call()), timeout_s)
        if not isinstance(result, kind):
            raise TypeError(f"judge returned {type(result).__name__}, not a {kind.__name__}")
        return result
    except asyncio.TimeoutError:
        return failed(judge_name, f"timeout: no judgement within {timeout_s:g}s",
                      latency_s=time.perf_counter() - started)
    except _JudgeRaised as exc:
        return failed(judge_name, str(exc), latency_s=time.perf_counter() - started)
    except Exception as exc:
        return failed(judge_name, f"{type(exc).__name__}: {exc}", latency_s=time.perf_counter() - started)
    except BaseException as exc:
        # A judge's CancelledError (a cancelled inner task), or a SystemExit from a sync judge's
        # thread, would otherwise end this task uncounted. Only a cancellation of this task
        # itself goes on.
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        if isinstance(exc, asyncio.CancelledError) and callable(cancelling) and cancelling():
            raise
        return failed(judge_name, f"{type(exc).__name__} raised by the judge: {exc}",
                      latency_s=time.perf_counter() - started)
