"""The judge extension point: the [`RagJudge`][ragaudit.RagJudge] protocol, [`BaseRagJudge`][ragaudit.BaseRagJudge],
[`FakeJudge`][ragaudit.FakeJudge], and `SessionJudge` for judges that also judge a whole conversation."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ClassVar, Protocol, TypeVar, Union, runtime_checkable

from .._worker import run_coroutine
from ..errors import ConfigurationError, JudgeError
from ..records import SCORE_NAMES, Judgement, JudgeRequest
from ..sessions import SessionRequest, SessionVerdict

__all__ = ["BaseRagJudge", "FakeJudge", "JudgeError", "RagJudge", "SessionJudge", "run_sync"]

T = TypeVar("T")


@runtime_checkable
class RagJudge(Protocol):
    """Anything that scores a RAG answer.

    A judge returns a [`Judgement`][ragaudit.Judgement] for a [`JudgeRequest`][ragaudit.JudgeRequest]; it does
    not raise for a failed judgement (it returns one with ``error`` set). ``name`` identifies the
    judge in records. Every member has a default on [`BaseRagJudge`][ragaudit.BaseRagJudge]; derive from it and
    override what differs.
    """

    name: str
    calls_per_judgement: int
    """Model calls one judgement costs, for cost estimates (0 for judges that call no model)."""
    timeout_s: float | None
    """The judge's own deadline for one request, in seconds (None: it sets none). Work done around
    a request on the judge's behalf, such as a cache lookup, is bounded by it too."""

    def judge(self, request: JudgeRequest) -> Judgement:
        """Judge *request*, blocking the calling thread."""
        ...

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* without blocking the event loop."""
        ...

    @property
    def blocking(self) -> bool:
        """True when judging blocks a thread (the Auditor then calls [`judge`][ragaudit.RagJudge.judge] on threads of
        its own)."""
        ...

    async def aclose_loop(self) -> None:
        """Close what the judge holds for the running event loop (async HTTP clients); the Auditor calls
        it on its loop at shutdown."""
        ...

    def config_key(self) -> str:
        """A string that identifies this judge's configuration (caches key on it)."""
        ...

    def close(self) -> None:
        """Release network clients and other resources. Safe to call twice."""
        ...


@runtime_checkable
class SessionJudge(Protocol):
    """A judge that also judges a whole conversation in one call (``Auditor(sessions=True)``):
    [`ChatRagJudge`][ragaudit.ChatRagJudge] (its ``session_protocol``) and [`FakeJudge`][ragaudit.FakeJudge] (its
    *session* function). Like [`RagJudge.judge`][ragaudit.RagJudge.judge], it never raises for a failed verdict: it
    returns one with ``error`` set."""

    name: str

    def judge_session(self, request: SessionRequest) -> SessionVerdict:
        """The verdict on the conversation of *request*, blocking the calling thread."""
        ...

    async def ajudge_session(self, request: SessionRequest) -> SessionVerdict:
        """The verdict on the conversation of *request*, without blocking the event loop."""
        ...


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* to completion from synchronous code, even inside a running event loop.

    It runs on one private event loop for the process (a fresh ``asyncio.run`` per call would break
    async clients bound to their first loop, and cannot run inside a thread that already has a
    running loop), kept by ragaudit's batch worker, so it is there again in a forked child.
    """
    return run_coroutine(coro)


class BaseRagJudge:
    """Base class for judges: implement **one** of [`judge`][ragaudit.BaseRagJudge.judge] or
    [`ajudge`][ragaudit.BaseRagJudge.ajudge].

    The other one is derived: ``ajudge`` runs a sync ``judge`` in a worker thread, and ``judge``
    runs an async ``ajudge`` on a private event loop. A subclass that overrides neither is rejected
    when the class is defined.
    """

    name: str = "judge"
    calls_per_judgement: int = 1
    """Model calls one judgement costs (cost estimates assume calls the size of the three-score prompt)."""
    timeout_s: float | None = None
    """The judge's deadline for one request; None by default (the Auditor's own deadline still holds)."""
    _abstract_judge: ClassVar[bool] = False
    # True on an intermediate base class that leaves judge()/ajudge() to its own subclasses.

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        derived_both = cls.judge is BaseRagJudge.judge and cls.ajudge is BaseRagJudge.ajudge
        if derived_both and not inspect.isabstract(cls) and not cls._abstract_judge:
            raise TypeError(f"{cls.__name__} must implement judge() or ajudge()")

    def judge(self, request: JudgeRequest) -> Judgement:
        """Judge *request*, blocking the calling thread."""
        return run_sync(self.ajudge(request))

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* without blocking the event loop."""
        return await asyncio.to_thread(self.judge, request)

    @property
    def blocking(self) -> bool:
        """True when judging blocks a thread (a sync-only judge).

        The [`Auditor`][ragaudit.Auditor] runs blocking judges in worker threads of its own, so they
        never stall its event loop and still run during interpreter exit.
        """
        return type(self).ajudge is BaseRagJudge.ajudge

    async def aclose_loop(self) -> None:
        """Close what this judge holds for the running event loop. Default: nothing to close."""

    def config_key(self) -> str:
        """A string that identifies this judge's configuration (used by caches)."""
        return self.name

    def close(self) -> None:
        """Release network clients and other resources. Safe to call twice."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


FakeResult = Union[Judgement, Mapping[str, Any]]  # noqa: UP007 - runtime alias on 3.10
FakeFn = Callable[[JudgeRequest], FakeResult | Awaitable[FakeResult]]
FakeSessionResult = Union[SessionVerdict, Mapping[str, Any]]  # noqa: UP007 - runtime alias on 3.10
FakeSessionFn = Callable[[SessionRequest], FakeSessionResult]
_SESSION_KEYS = {"resolved", "resolved_turn", "contradictions", "repeated", "reason", "error", "usage", "details"}


class FakeJudge(BaseRagJudge):
    """A judge backed by a plain function, for tests (like httpx's ``MockTransport``).

    *fn* takes the [`JudgeRequest`][ragaudit.JudgeRequest] and returns a [`Judgement`][ragaudit.Judgement] or a
    mapping with any of ``faithfulness``, ``context_relevance``, ``answer_relevance``, ``reason``
    (missing scores are None). It may be ``async``. An exception from *fn* becomes a judgement with
    ``error`` set, as for any real judge.

    >>> judge = FakeJudge(lambda req: {"faithfulness": 1.0, "reason": "fine"})

    *session* (optional) judges whole conversations (a `SessionJudge`): it takes the
    [`SessionRequest`][ragaudit.SessionRequest] and returns a [`SessionVerdict`][ragaudit.SessionVerdict]
    or a mapping with any of ``resolved``, ``resolved_turn``, ``contradictions`` (``(turn, sentence,
    later_turn, later_sentence)`` tuples; the texts come from the request), ``repeated`` (``(turn,
    repeats)``), ``reason``; ``session_calls`` counts its calls. Without it a session verdict has
    ``error`` set.
    """

    calls_per_judgement = 0  # a function, no model

    def __init__(self, fn: FakeFn, name: str = "fake", *, session: FakeSessionFn | None = None) -> None:
        if not callable(fn):
            raise ConfigurationError(f"FakeJudge needs a callable, got {type(fn).__name__}")
        if session is not None and not callable(session):
            raise ConfigurationError(f"FakeJudge(session=...) needs a callable, got {type(session).__name__}")
        self._fn = fn
        self._session = session
        self.name = name
        self.calls = 0
        self.session_calls = 0

    def judge_session(self, request: SessionRequest) -> SessionVerdict:
        if self._session is None:
            return SessionVerdict.failed(self.name, "FakeJudge was given no session function")
        self.session_calls += 1
        started = time.perf_counter()
        try:
            return self._session_verdict(self._session(request), request, started)
        except Exception as exc:  # a test double reports, like a real judge, instead of raising
            return SessionVerdict.failed(self.name, f"{type(exc).__name__}: {exc}",
                                         latency_s=time.perf_counter() - started)

    async def ajudge_session(self, request: SessionRequest) -> SessionVerdict:
        return self.judge_session(request)

    def _session_verdict(self, result: FakeSessionResult, request: SessionRequest, started: float) -> SessionVerdict:
        if isinstance(result, SessionVerdict):
            return result
        if not isinstance(result, Mapping) or set(result) - _SESSION_KEYS:
            raise JudgeError(f"FakeJudge session function must return a SessionVerdict or a mapping of "
                             f"{sorted(_SESSION_KEYS)}, got {result!r}")
        fields = dict(result)
        pairs = [request.contradiction(*pair) for pair in fields.pop("contradictions", ())]
        repeats = [request.repetition(*pair) for pair in fields.pop("repeated", ())]
        if None in pairs or None in repeats:
            raise JudgeError("FakeJudge session function named turns or sentences the session does not have")
        return SessionVerdict(judge=self.name, latency_s=time.perf_counter() - started,
                              contradictions=pairs, repeated=repeats, **fields)  # type: ignore[arg-type]

    def _convert(self, result: FakeResult, started: float) -> Judgement:
        latency = time.perf_counter() - started
        if isinstance(result, Judgement):
            return result
        if not isinstance(result, Mapping):
            raise JudgeError(f"FakeJudge function returned {type(result).__name__}, not a Judgement or mapping")
        unknown = set(result) - {*SCORE_NAMES, "reason", "error", "details", "usage"}
        if unknown:
            raise JudgeError(f"FakeJudge function returned unknown keys: {sorted(unknown)}")
        return Judgement(judge=self.name, latency_s=latency, **dict(result))

    @property
    def blocking(self) -> bool:
        return not inspect.iscoroutinefunction(self._fn)

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        if self.blocking:
            return await asyncio.to_thread(self.judge, request)
        self.calls += 1
        started = time.perf_counter()
        try:
            result = self._fn(request)
            if inspect.isawaitable(result):
                result = await result
            return self._convert(result, started)
        except Exception as exc:  # a test double reports, like a real judge, instead of raising
            return Judgement.failed(self.name, f"{type(exc).__name__}: {exc}",
                                    latency_s=time.perf_counter() - started)

    def judge(self, request: JudgeRequest) -> Judgement:
        if inspect.iscoroutinefunction(self._fn):
            return run_sync(self.ajudge(request))
        self.calls += 1
        started = time.perf_counter()
        try:
            return self._convert(self._fn(request), started)  # type: ignore[arg-type]
        except Exception as exc:
            return Judgement.failed(self.name, f"{type(exc).__name__}: {exc}",
                                    latency_s=time.perf_counter() - started)
