"""Conversations judged as a whole: the Auditor's session tracker and its one judge call per session.

`OpenSessions` is an exporter of the export stage: every turn's record passes it, and the
turns of a session ([`session_id_of`][ragaudit.sessions.session_id_of]) are held in memory, bounded by
``max_sessions`` and ``max_session_turns`` (the oldest session, or a session's oldest turn, dropped and
counted; a session that lost turns is judged as partial and says what it missed). A session is due
when it has been idle for ``session_idle_s`` by the tracker's clock (injectable: tests move time
without sleeping), when the app calls ``Auditor.end_session(id)``, or at shutdown. A due session is
queued on the Auditor's judging loop like a turn, goes through the same cost control (budgets, rate,
pause), gets **one** judge call (`SessionJudge`), and its
[`SessionRecord`][ragaudit.SessionRecord] goes to every exporter that takes sessions
([`SessionExporter`][ragaudit.sessions.SessionExporter]) on the same export stage.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import _fork
from .._export import BaseExporter, ExportResult
from .._numbers import check_number
from ..content import ContentPolicy
from ..errors import ConfigurationError
from ..judges.base import SessionJudge
from ..records import AuditRecord, Judgement
from ..sessions import SessionEnd, SessionJudgement, SessionRecord, SessionRequest, SessionTurn, SessionVerdict
from ..sessions import session_id_of as _session_of
from ._judging import bounded_call

if TYPE_CHECKING:
    import concurrent.futures

    from opentelemetry.trace import TracerProvider

    from .._worker import BatchWorker
    from ..judges.base import RagJudge
    from ..records import RagTurn
    from ._governor import CostGate
    from ._session_part import SessionJudging
    from ._submitting import JudgingJob

__all__ = ["OpenSessions", "SessionJob", "SessionRuntime", "Sessions"]

SESSION_COUNTS: tuple[str, ...] = ("sessions_judged", "sessions_failed", "sessions_not_sent", "sessions_partial",
                                   "sessions_evicted", "session_turns_evicted", "sessions_pending")
"""The ``stats()`` keys of session judging (``sessions_open`` is added live)."""


@dataclass(frozen=True, slots=True)
class Sessions:
    """How an Auditor judges conversations as a whole (``Auditor(sessions=Sessions(...))``).

    A session is judged once it has been idle for *session_idle_s* seconds (by *clock*, a monotonic
    ``() -> seconds``; default `time.monotonic`), when the app ends it, or at shutdown. At most
    *max_sessions* sessions and *max_session_turns* turns per session are held; past that the oldest
    session (never judged, counted ``sessions_evicted``) or the session's oldest turn (counted
    ``session_turns_evicted``; the session is then judged as partial) is dropped.
    """

    session_idle_s: float = 300.0
    max_sessions: int = 1_000
    max_session_turns: int = 50
    clock: Callable[[], float] = field(default=time.monotonic)

    def __post_init__(self) -> None:
        check_number("Sessions.session_idle_s", self.session_idle_s, 0, low_open=True)
        for name in ("max_sessions", "max_session_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"Sessions.{name} must be an int >= 1, got {value!r}")
        if not callable(self.clock):
            raise ConfigurationError("Sessions.clock must be callable() -> seconds (monotonic)")


@dataclass(frozen=True, slots=True)
class _Seen:
    """One turn of an open session, as the session keeps it: its session view (no documents: a
    session holds at most ``max_session_turns`` of these, not the turns' evidence), when it started,
    how many user turns its history names, and its record's policy and provider."""

    started: tuple[int, int]
    turn: SessionTurn
    history_users: int
    policy: ContentPolicy
    provider: TracerProvider | None

    @classmethod
    def of(cls, record: AuditRecord) -> _Seen:
        t = record.turn
        return cls((t.started_at or 0, t.ended_at or 0), SessionTurn.from_record(record, 1),
                   sum(1 for role, _ in t.history if role == "user"), record.content_policy, record.tracer_provider)


@dataclass(slots=True)
class _Open:
    """One open session: its turns so far, what it missed, when a turn was last seen."""

    records: list[_Seen] = field(default_factory=list)
    missed: dict[str, int] = field(default_factory=dict)
    last_seen: float = 0.0

    def miss(self, reason: str, count: int = 1) -> None:
        self.missed[reason] = self.missed.get(reason, 0) + count


@dataclass(frozen=True, slots=True)
class SessionJob:
    """A due session, queued on the judging loop: its request, why it is due, its policy and provider."""

    request: SessionRequest
    ended: SessionEnd
    policy: ContentPolicy
    provider: TracerProvider | None


def _started(seen: _Seen) -> tuple[int, int]:
    return seen.started


class OpenSessions(BaseExporter):
    """The turns of open sessions, bounded (see the module docstring). Thread-safe, fork-safe."""

    def __init__(self, options: Sessions, due: Callable[[list[SessionJob]], None],
                 first: Callable[[], None] | None = None) -> None:
        self.options = options
        self._due = due
        self._first = first  # called once, with the first session turn (starts the idle checks)
        self._lock = _fork.lock()
        self._open: OrderedDict[str, _Open] = OrderedDict()  # least recently seen first
        self.counts = dict.fromkeys(("sessions_evicted", "session_turns_evicted"), 0)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        now = self.options.clock()
        seen = False
        with self._lock:
            for record in records:
                session_id = _session_of(record.turn.metadata)
                if session_id is not None:
                    self._add(session_id, now).records.append(_Seen.of(record))
                    self._cap(session_id)
                    seen = True
        if seen and self._first is not None:
            first, self._first = self._first, None
            first()
        self._due(self.take_idle(now))
        return ExportResult.SUCCESS

    def sampled_out(self, turn: RagTurn) -> None:
        """A turn of a session the sampler left out: the session is partial, by one turn."""
        session_id = _session_of(turn.metadata)
        if session_id is None:
            return
        with self._lock:
            self._add(session_id, self.options.clock()).miss("sampled_out")

    def _add(self, session_id: str, now: float) -> _Open:
        # Under the lock. A session seen for the first time with history had turns before this process saw it.
        session = self._open.get(session_id)
        if session is None:
            session = self._open[session_id] = _Open()
            while len(self._open) > self.options.max_sessions:
                self._open.popitem(last=False)
                self.counts["sessions_evicted"] += 1
        self._open.move_to_end(session_id)
        session.last_seen = now
        return session

    def _cap(self, session_id: str) -> None:
        session = self._open[session_id]
        while len(session.records) > self.options.max_session_turns:
            # the turn that started first (records come in the order they were judged, not asked)
            session.records.remove(min(session.records, key=_started))
            session.miss("evicted")
            self.counts["session_turns_evicted"] += 1

    def take_idle(self, now: float | None = None) -> list[SessionJob]:
        """The sessions idle for ``session_idle_s`` by the clock, taken out to be judged."""
        now = self.options.clock() if now is None else now
        with self._lock:
            idle = [sid for sid, s in self._open.items() if now - s.last_seen >= self.options.session_idle_s]
            return [job for sid in idle if (job := self._job(sid, "idle")) is not None]

    def take(self, session_id: str, ended: SessionEnd = "ended") -> SessionJob | None:
        """The open session *session_id*, taken out to be judged; None when there is none."""
        with self._lock:
            return self._job(str(session_id), ended)

    def take_all(self, ended: SessionEnd = "shutdown") -> list[SessionJob]:
        """Every open session, taken out to be judged."""
        with self._lock:
            return [job for sid in list(self._open) if (job := self._job(sid, ended)) is not None]

    def _job(self, session_id: str, ended: SessionEnd) -> SessionJob | None:
        session = self._open.pop(session_id, None)
        if session is None or not session.records:
            return None  # only sampled-out turns: nothing seen to judge
        records = sorted(session.records, key=_started)
        # The last turn's history says how many user turns came before it: those neither seen, sampled
        # out nor evicted here were never seen by this process (another replica, before a restart).
        expected = records[-1].history_users + 1
        known = len(records) + session.missed.get("sampled_out", 0) + session.missed.get("evicted", 0)
        if expected > known:
            session.miss("unseen", expected - known)
        turns = tuple(replace(r.turn, index=i) for i, r in enumerate(records, start=1))
        last = records[-1]
        return SessionJob(SessionRequest(session_id, turns, session.missed), ended, last.policy, last.provider)

    def after_fork(self) -> None:
        self._lock = _fork.lock()
        self._open.clear()
        self.counts = dict.fromkeys(self.counts, 0)


def _as_judgement(verdict: SessionVerdict) -> Judgement:
    """The verdict as cost control accounts a call (tokens, status, model)."""
    return Judgement(judge=verdict.judge, usage=verdict.usage, error=verdict.error, details=verdict.details,
                     identity=verdict.identity)


class SessionRuntime:
    """The Auditor's part for sessions: the tracker, the queue onto the judging loop, the judge call,
    the counts, the idle sweep. Made only with ``Auditor(sessions=...)``."""

    def __init__(self, options: Sessions, judge: RagJudge, cost: CostGate, timeout_s: float,
                 put: Callable[[SessionJob], bool], export: Callable[[SessionRecord], None],
                 sweep: Callable[[], None] | None = None) -> None:
        self.tracker = OpenSessions(options, self.queue, sweep)
        self._sweep = sweep
        self._judge = judge
        self._cost = cost
        self._timeout_s = timeout_s
        self._put = put
        self._export = export
        self._lock = _fork.lock()
        self.counts = dict.fromkeys(("sessions_judged", "sessions_failed", "sessions_not_sent",
                                     "sessions_partial", "sessions_pending"), 0)
        self._sweeper: concurrent.futures.Future[None] | None = None

    def queue(self, jobs: list[SessionJob]) -> None:
        """Queue due sessions for judging (a session that cannot be queued is counted failed)."""
        for job in jobs:
            with self._lock:
                self.counts["sessions_pending"] += 1
            if not self._put(job):
                with self._lock:
                    self.counts["sessions_pending"] -= 1
                    self.counts["sessions_failed"] += 1

    async def process(self, job: SessionJob, blocking: BatchWorker[Callable[[], None]] | None) -> None:
        """Judge *job*'s session (one call, after cost control) and hand its record to the exporters.
        Never raises: a session whose record could not be made is counted failed."""
        key, partial = "sessions_failed", False
        try:
            verdict = await self._verdict(job, blocking)
            judgement = SessionJudgement.of(job.request, verdict, job.ended)
            self._export(SessionRecord(job.request, judgement, job.policy, job.provider))
            key = "sessions_judged" if verdict.error is None else \
                "sessions_not_sent" if verdict.details.get("not_sent") else "sessions_failed"
            partial = judgement.partial
        finally:
            with self._lock:
                self.counts["sessions_pending"] -= 1
                self.counts[key] += 1
                self.counts["sessions_partial"] += partial

    async def _verdict(self, job: SessionJob, blocking: BatchWorker[Callable[[], None]] | None) -> SessionVerdict:
        judge = self._judge
        name = str(judge.name)
        if not isinstance(judge, SessionJudge):
            return SessionVerdict.failed(name, f"judge {name} does not judge sessions (no judge_session)")
        ticket = await self._cost.admit(self._timeout_s)  # reserves the largest call so far: no estimate
        if ticket.verdict != "ok":
            return SessionVerdict.failed(name, f"not sent: {ticket.verdict}", details={"not_sent": ticket.verdict})
        verdict = await bounded_call(name, lambda: judge.judge_session(job.request),
                                     lambda: judge.ajudge_session(job.request), SessionVerdict,
                                     SessionVerdict.failed, self._timeout_s, blocking)
        self._cost.settle(_as_judgement(verdict), ticket)
        return verdict

    def stats(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self.counts)
        return {**counts, **self.tracker.counts, "sessions_open": len(self.tracker)}

    def start_sweeping(self, judging: BatchWorker[JudgingJob], owner: SessionJudging) -> None:
        """Check for idle sessions every few seconds on the judging loop (started once; no thread)."""
        if self._sweeper is not None:
            return
        interval = min(5.0, self.tracker.options.session_idle_s / 4)
        ref = weakref.ref(owner)

        async def sweep() -> None:
            while True:
                await asyncio.sleep(interval)
                auditor = ref()
                if auditor is None or auditor.closed:
                    return
                auditor.check_sessions()
                del auditor

        try:
            self._sweeper = judging.run_coroutine(sweep())
        except RuntimeError:  # no loop (interpreter shutdown): sessions are still judged at shutdown
            self._sweeper = None

    def stop_sweeping(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()

    def after_fork(self) -> None:
        self._lock = _fork.lock()
        self.counts = dict.fromkeys(self.counts, 0)
        self._sweeper = None
        self.tracker.after_fork()
        self.tracker._first = self._sweep  # the child's loop is new: its idle checks start with its first turn
