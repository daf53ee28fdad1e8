"""The sink extension point: :class:`JudgementSink` and :class:`BaseJudgementSink`.

At the bottom floor so that tracing's sinks (Phoenix, Langfuse) derive from the base class the
Auditor (a floor above) calls through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

from .records import Judgement, RagTurn

__all__ = ["BaseJudgementSink", "JudgementSink", "emitting_with"]

# The span recorder of the turn being emitted. Handlers with different content policies share one
# Auditor, and so its sinks: while a sink's emit() runs, this is the recorder (provider, policy) that
# turn is recorded with, which may be stricter than the one the sink was bound to.
_turn_recorder: ContextVar[Any] = ContextVar("ragaudit_turn_recorder", default=None)


@contextmanager
def emitting_with(recorder: Any) -> Iterator[None]:
    """While the block runs (the Auditor's calls of ``emit``), :attr:`BaseJudgementSink.recorder` is
    *recorder*: the span recorder of the turn being emitted."""
    token = _turn_recorder.set(recorder)
    try:
        yield
    finally:
        _turn_recorder.reset(token)


@runtime_checkable
class JudgementSink(Protocol):
    """Somewhere judgements go (a trace backend's score API, a file, a queue).

    Every member the :class:`~ragaudit.Auditor` uses is declared here; :class:`BaseJudgementSink`
    gives each one but ``emit`` a default. ``emit`` is called on the Auditor's worker thread and must
    not block for long: a sink that talks to the network queues the item and sends it from a worker
    of its own. ``force_flush`` and ``shutdown`` follow the OpenTelemetry exporter convention; the
    Auditor runs them on a worker thread and stops waiting at its deadline.
    """

    def emit(self, turn: RagTurn, judgement: Judgement) -> None:
        """Take one judgement (queue it; do not block). Texts of *turn* and *judgement* are sent the
        way :attr:`BaseJudgementSink.recorder` records them (that turn's content policy)."""
        ...

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Deliver what is queued within *timeout_s*; True when everything was delivered."""
        ...

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Deliver what is queued within *timeout_s*, then release resources. Never raises."""
        ...

    def bind_recorder(self, recorder: Any) -> None:
        """Called once by the Auditor with its span recorder (content capture, redaction, span ids)."""
        ...

    @property
    def errors(self) -> int:
        """Items that never reached the backend; the Auditor adds them to ``stats()["sink_errors"]``."""
        ...


class BaseJudgementSink:
    """Base class for sinks: implement :meth:`emit`; every other member has a default."""

    _recorder: Any = None

    def emit(self, turn: RagTurn, judgement: Judgement) -> None:
        raise NotImplementedError

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Nothing buffered: delivered."""
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Nothing to release."""

    def bind_recorder(self, recorder: Any) -> None:
        """Keep *recorder* (as ``self._recorder``)."""
        self._recorder = recorder

    @property
    def recorder(self) -> Any:
        """The span recorder texts go out as: during :meth:`emit`, the one the turn being emitted is
        recorded with (its integration handler's content policy and provider); else the one bound."""
        current = _turn_recorder.get()
        return current if current is not None else self._recorder

    @property
    def errors(self) -> int:
        """No delivery failures to report."""
        return 0
