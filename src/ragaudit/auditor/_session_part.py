"""The Auditor's part for sessions (``Auditor(sessions=...)``), kept apart like its draining.

`SessionJudging` is a base class of the Auditor: it makes the session tracker (an exporter of
the export stage, `ragaudit.auditor._sessions`) and gives the public ``end_session`` and
``check_sessions``, the session counts of ``stats()``, the hooks the turn path calls (a sampled-out
turn, a session's job on the judging loop) and the shutdown's part. Without sessions every hook is a
no-op and ``stats()`` has no session keys.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .._export import Exporter
from .._fork import on_fork_in_child
from ..errors import ConfigurationError
from ._sessions import SessionJob, SessionRuntime, Sessions

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._worker import BatchWorker
    from ..records import RagTurn
    from ._exporting import ExportStage
    from ._governor import CostGate

__all__ = ["SessionJudging", "Sessions"]


class SessionJudging:
    """Sessions judged as a whole, for the Auditor (see the module docstring)."""

    judge: Any
    timeout_s: float
    _cost: CostGate
    _judging: BatchWorker[Any]
    _blocking: BatchWorker[Callable[[], None]] | None
    _export: ExportStage
    _sessions: SessionRuntime | None = None

    def _job_failed(self, exc: BaseException) -> None:
        raise NotImplementedError

    async def _process(self, job: Any) -> Any:
        raise NotImplementedError

    def _session_part(self, sessions: Sessions | bool | None) -> list[Exporter]:
        """Make the session part when *sessions* asks for it; its tracker joins the export stage."""
        if sessions is None or sessions is False:
            self._sessions = None
            return []
        if sessions is not True and not isinstance(sessions, Sessions):
            raise ConfigurationError(f"sessions must be True or a Sessions, got {type(sessions).__name__}")
        ref = weakref.ref(self)  # the export thread holds the tracker: never the Auditor itself

        def put(job: SessionJob) -> bool:
            auditor = ref()
            return auditor is not None and auditor._judging.put(job)

        def export(record: Any) -> None:
            auditor = ref()
            if auditor is not None:
                auditor._export.put(record)

        def sweep() -> None:  # the first session turn: check for idle sessions from now on
            auditor = ref()
            if auditor is not None and auditor._sessions is not None:
                auditor._sessions.start_sweeping(auditor._judging, auditor)

        part = SessionRuntime(Sessions() if sessions is True else sessions, self.judge, self._cost, self.timeout_s,
                              put, export, sweep)
        self._sessions = part
        on_fork_in_child(part.after_fork)
        return [part.tracker]

    def end_session(self, session_id: str) -> bool:
        """The app says the conversation *session_id* ended: it is judged now (one judge call, in the
        background) without waiting for ``session_idle_s``. True when such a session was open.
        Never blocks; raises only [`ConfigurationError`][ragaudit.ConfigurationError] when this Auditor was built
        without ``sessions=True`` (a call that could never do anything is a mistake in the app)."""
        if self._sessions is None:
            raise ConfigurationError("end_session() needs an Auditor that tracks sessions: "
                                     "Auditor(..., sessions=True) (or a Sessions)")
        try:
            job = self._sessions.tracker.take(str(session_id)) if self._sessions is not None else None
            if job is not None and self._sessions is not None:
                self._sessions.queue([job])
            return job is not None
        except Exception as exc:  # never into the host
            self._job_failed(exc)
            return False

    def check_sessions(self) -> int:
        """Judge every session idle for ``session_idle_s`` by the session clock; returns how many were
        due. The Auditor checks by itself every few seconds; call it after moving an injected clock.
        Never raises."""
        try:
            if self._sessions is None:
                return 0
            jobs = self._sessions.tracker.take_idle()
            self._sessions.queue(jobs)
            return len(jobs)
        except Exception as exc:
            self._job_failed(exc)
            return 0

    async def _judge_job(self, job: Any) -> None:
        """One job of the judging loop: a session's, or a turn's."""
        if isinstance(job, SessionJob):
            if self._sessions is not None:
                await self._sessions.process(job, self._blocking)
        else:
            await self._process(job)

    def _sampled_out(self, turn: RagTurn, job: Any) -> None:
        """A turn the sampler left out: kept for feedback, and its session is partial by one turn."""
        self._cost.retain(turn, job)
        if self._sessions is not None:
            self._sessions.tracker.sampled_out(turn)

    def _session_stats(self) -> dict[str, int]:
        return self._sessions.stats() if self._sessions is not None else {}

    def _end_sessions(self) -> None:
        """At shutdown: every open session is judged on what was seen (``ended="shutdown"``)."""
        if self._sessions is not None:
            self._sessions.stop_sweeping()
            self._sessions.queue(self._sessions.tracker.take_all("shutdown"))

    def _has_sessions(self) -> bool:
        return self._sessions is not None
