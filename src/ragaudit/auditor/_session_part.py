"""The Auditor's part for sessions (``Auditor(sessions=...)``): a part the Auditor owns, like its drain.

`SessionJudging` holds the session tracker (an exporter of the export stage, `ragaudit.auditor._sessions`) and does
the work of the public ``end_session`` and ``check_sessions``, the session counts of ``stats()``, what the turn
path asks of it (a sampled-out turn, a session's job on the judging loop) and the shutdown's part. The Auditor
makes it only with sessions; without, it has none and ``stats()`` has no session keys.

It is made before the judging and export workers (its tracker is one of the exporters they are built with), and
told them once, by `connect`, right after they are made; until then (in the Auditor's ``__init__`` only) a
session job is not queued but counted failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._fork import on_fork_in_child
from ..errors import ConfigurationError
from ._sessions import SessionJob, SessionRuntime, Sessions

if TYPE_CHECKING:
    from .._worker import BatchWorker
    from ..judges.base import RagJudge
    from ..records import RagTurn
    from ..sessions import SessionRecord
    from ._governor import CostGate
    from ._sessions import OpenSessions
    from ._submitting import JudgingJob

__all__ = ["SessionJudging", "Sessions", "session_tracking"]


def session_tracking(sessions: Sessions | bool | None) -> Sessions | None:
    """The tracking options *sessions* asks for (None: no sessions); a ConfigurationError for anything else."""
    if sessions is None or sessions is False:
        return None
    if sessions is not True and not isinstance(sessions, Sessions):
        raise ConfigurationError(f"sessions must be True or a Sessions, got {type(sessions).__name__}")
    return Sessions() if sessions is True else sessions


class SessionJudging:
    """Sessions judged as a whole, for the Auditor (see the module docstring). *closed*: whether the Auditor's
    shutdown has begun (the idle sweep stops then); *failed*: how a failure of ours is logged."""

    def __init__(self, options: Sessions, judge: RagJudge, cost: CostGate, timeout_s: float, *,
                 closed: Callable[[], bool], failed: Callable[[BaseException], None]) -> None:
        self._closed = closed
        self._failed = failed
        self._judging: BatchWorker[JudgingJob] | None = None
        self._blocking: BatchWorker[Callable[[], None]] | None = None
        self._export: Callable[[SessionRecord], None] | None = None
        self.part = SessionRuntime(options, judge, cost, timeout_s, self._put, self._export_record, self._sweep)
        on_fork_in_child(self.part.after_fork)

    @property
    def tracker(self) -> OpenSessions:
        """The session tracker: an exporter of the export stage, it sees every record."""
        return self.part.tracker

    @property
    def closed(self) -> bool:
        return self._closed()

    def connect(self, judging: BatchWorker[JudgingJob], blocking: BatchWorker[Callable[[], None]] | None,
                export: Callable[[SessionRecord], None]) -> None:
        """The Auditor's judging loop (and the worker of a sync judge) and its export stage's ``put``."""
        self._judging, self._blocking, self._export = judging, blocking, export

    def _put(self, job: SessionJob) -> bool:
        return self._judging is not None and self._judging.put(job)

    def _export_record(self, record: SessionRecord) -> None:
        if self._export is not None:
            self._export(record)

    def _sweep(self) -> None:  # the first session turn: check for idle sessions from now on
        if self._judging is not None:
            self.part.start_sweeping(self._judging, self)

    def end_session(self, session_id: str) -> bool:
        """See [`Auditor.end_session`][ragaudit.Auditor.end_session]. Never raises."""
        try:
            job = self.part.tracker.take(str(session_id))
            if job is not None:
                self.part.queue([job])
            return job is not None
        except Exception as exc:  # never into the host
            self._failed(exc)
            return False

    def check_sessions(self) -> int:
        """See [`Auditor.check_sessions`][ragaudit.Auditor.check_sessions] (also the idle sweep's call). Never
        raises."""
        try:
            jobs = self.part.tracker.take_idle()
            self.part.queue(jobs)
            return len(jobs)
        except Exception as exc:
            self._failed(exc)
            return 0

    async def process(self, job: SessionJob) -> None:
        """A session's job on the judging loop."""
        await self.part.process(job, self._blocking)

    def sampled_out(self, turn: RagTurn) -> None:
        """A turn the sampler left out: its session is partial by one turn."""
        self.part.tracker.sampled_out(turn)

    def stats(self) -> dict[str, int]:
        return self.part.stats()

    def end_all(self) -> None:
        """At shutdown: every open session is judged on what was seen (``ended="shutdown"``)."""
        self.part.stop_sweeping()
        self.part.queue(self.part.tracker.take_all("shutdown"))
