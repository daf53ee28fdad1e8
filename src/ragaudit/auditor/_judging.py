"""One judge call of the Auditor: bounded by its deadline, contained whatever the judge does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .._worker import BatchWorker, call_on
from ..judges.base import RagJudge
from ..records import Judgement, JudgeRequest

__all__ = ["judge_request"]


class _JudgeRaised(Exception):
    """A SystemExit or KeyboardInterrupt from a judge, carried as an ordinary error."""


async def _contained(awaitable: Awaitable[Any]) -> Any:
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
    judge_name = str(judge.name)
    started = time.perf_counter()
    try:
        if blocking is not None:
            future = call_on(blocking, lambda: judge.judge(request))
            if future is None:
                raise RuntimeError("no thread to run the judge (interpreter shutdown)")
            judgement = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        else:
            judgement = await asyncio.wait_for(_contained(judge.ajudge(request)), timeout_s)
        if not isinstance(judgement, Judgement):
            raise TypeError(f"judge returned {type(judgement).__name__}, not a Judgement")
        return judgement
    except asyncio.TimeoutError:
        return Judgement.failed(judge_name, f"timeout: no judgement within {timeout_s:g}s",
                                latency_s=time.perf_counter() - started)
    except _JudgeRaised as exc:
        return Judgement.failed(judge_name, str(exc), latency_s=time.perf_counter() - started)
    except Exception as exc:
        return Judgement.failed(judge_name, f"{type(exc).__name__}: {exc}",
                                latency_s=time.perf_counter() - started)
    except BaseException as exc:
        # A judge's CancelledError (a cancelled inner task), or a SystemExit from a sync judge's
        # thread, would otherwise end this task uncounted. Only a cancellation of this task
        # itself goes on.
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        if isinstance(exc, asyncio.CancelledError) and callable(cancelling) and cancelling():
            raise
        return Judgement.failed(judge_name, f"{type(exc).__name__} raised by the judge: {exc}",
                                latency_s=time.perf_counter() - started)

