"""What the Auditor does with a submitted turn: one submit strategy per ``mode``, chosen once, and the judging of a
queued turn.

``Auditor(mode=...)`` names the strategy, as the user sees it (``mode="worker"`` also names the service that
judges then, ``ragaudit worker``):

- `_BackgroundSubmit` (``"background"``): cost control's filter (``judge_if``), sampling and the queue bound,
  then the turn is queued for the judging loop; the submit returns at once.
- `_InlineSubmit` (``"inline"``): the same decisions, then the turn is judged before the submit returns (for
  scripts and tests) and its record exported at once.
- `_ToWorker` (``"worker"``): nothing is judged here; a turn with a trace is counted ``to_worker`` (its spans
  carry it to ``ragaudit worker``, see `ragaudit.auditor._worker_mode`), one without is ``dropped``.

`TurnJudging` is the judging of one queued turn on the judging loop: cost control decides first (a turn it turns
away ends as a record with its counted reason), then the judge, then the one [`AuditRecord`][ragaudit.AuditRecord],
handed to the export stage the strategy's way. Every decision is counted in the `Ledger`, in one step with the
pending gauge.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from .._sampling import sampled
from ..records import AuditRecord, Judgement, JudgeRequest
from ..turn_audit import audit_record
from ._judging import judge_request
from ._sessions import SessionJob

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from opentelemetry.trace import TracerProvider

    from .._log import RateLimitedLog
    from .._worker import BatchWorker
    from ..content import ContentPolicy
    from ..judges.base import RagJudge
    from ..records import RagTurn
    from ._exporting import ExportStage
    from ._governor import CostGate
    from ._judge_health import JudgeFailureLog
    from ._ledger import Ledger
    from ._session_part import SessionJudging

__all__ = ["SUBMIT_STRATEGIES", "Job", "JudgingJob", "Submission", "SubmitStatus", "SubmitStrategy", "TurnJudging",
           "job_handler"]

SubmitStatus = Literal["queued", "judged", "failed", "dropped", "sampled_out", "filtered_out", "not_sent",
                       "to_worker"]
"""What [`Auditor.submit`][ragaudit.Auditor.submit] did with a turn: taken for judging (``"queued"``; inline, the
outcome, ``"judged"`` or ``"failed"``, as the record's status says it) or not, and why."""


@dataclass(frozen=True, slots=True)
class Submission:
    """What [`Auditor.submit_turn`][ragaudit.Auditor.submit_turn] did: the ``status``, the turn's
    ``ground_truth_metrics`` (computed once, for its span and its record) and, when it was judged before the call
    returned (inline mode), its ``record`` (for the turn span: graded metrics, grades)."""

    status: SubmitStatus
    ground_truth_metrics: Mapping[str, float] | None = None
    record: AuditRecord | None = None

    @property
    def accepted(self) -> bool:
        """The Auditor took the turn for judging (queued, or judged inline with or without an error)."""
        return self.status in ("queued", "judged", "failed")


@dataclass(frozen=True, slots=True)
class Job:
    """A submitted turn with what its record follows: the content *policy*, the tracer *provider*, the turn's
    ground-truth *metrics*."""

    turn: RagTurn
    policy: ContentPolicy
    provider: TracerProvider | None
    metrics: Mapping[str, float] | None


JudgingJob = Job | SessionJob
"""What the judging loop takes: a submitted turn, or a due session."""


class TurnJudging:
    """The judging of one queued turn (see the module docstring). *provider*: the Auditor's tracer provider, for a
    turn submitted without one; *deliver*: how a judged turn's record reaches the exporters (the strategy's)."""

    def __init__(self, ledger: Ledger, cost: CostGate, judge: RagJudge, export: ExportStage, *, timeout_s: float,
                 max_context_chars: int, blocking: BatchWorker[Callable[[], None]] | None,
                 failures: JudgeFailureLog, provider: TracerProvider | None,
                 deliver: Callable[[AuditRecord], None]) -> None:
        self._ledger = ledger
        self._cost = cost
        self._judge = judge
        self._export = export
        self.timeout_s = timeout_s
        self.max_context_chars = max_context_chars
        self._failures = failures
        self._provider = provider
        self._deliver = deliver
        self._blocking = blocking  # the worker of a sync judge (None: an async judge)

    async def process(self, job: Job) -> AuditRecord:
        """Judge *job*'s turn and hand its one record on; the record. A record that cannot be made is counted
        failed, never lost."""
        start_ns = time.time_ns()
        record: AuditRecord | None = None
        provider = job.provider or self._provider
        try:
            # Budgets, rate and pause decide first; a turn they turn away ends as a record with its
            # counted reason, never judged, never queued again.
            # The call and its estimated tokens and money are reserved before it is made, so calls
            # admitted together see each other's share of a budget (settled with the real usage).
            ticket = await self._cost.admit(self.timeout_s, lambda: JudgeRequest.from_turn(job.turn,
                                                                                           self.max_context_chars))
            if ticket.verdict != "ok":
                self._ledger.unqueue(ticket.verdict)
                record = audit_record(job.turn, None, job.policy, unjudged=ticket.verdict, tracer_provider=provider)
                self._export.put(record)
                return record
            judgement = await self._judged(job.turn)
            self._cost.settle(judgement, ticket)
            self._failures.note(judgement)
            # The one record of this turn: every derived value computed here, once.
            record = audit_record(job.turn, judgement, job.policy, judge_started_at=start_ns,
                                  tracer_provider=provider, ground_truth_metrics=job.metrics)
        finally:
            if record is None:  # could not even make the record: counted as failed, never lost
                self._ledger.delivered(())
        self._deliver(record)
        return record

    async def _judged(self, turn: RagTurn) -> Judgement:
        request = JudgeRequest.from_turn(turn, self.max_context_chars)
        return await judge_request(self._judge, request, self.timeout_s, self._blocking)


def job_handler(turns: TurnJudging, sessions: SessionJudging | None) -> Callable[[JudgingJob], Awaitable[None]]:
    """The judging loop's handler: a session's job to *sessions*, a turn's to *turns*."""

    async def handle(job: JudgingJob) -> None:
        if isinstance(job, SessionJob):
            if sessions is not None:
                await sessions.process(job)
        else:
            await turns.process(job)

    return handle


class SubmitStrategy(ABC):
    """What ``mode`` chooses: how a submitted turn is taken, how its record reaches the exporters, and whether
    admission decides sampling and the backlog's bound at hand-off. Every strategy is made with the ledger, cost
    control, the judging loop, the turn judging, the export stage, the session part (None without sessions), the
    queue bound and sampling, the log and *describe* (the ``stats()`` a drop's log line shows)."""

    samples_at_hand_off: ClassVar[bool]
    sheds_at_hand_off: ClassVar[bool]

    def __init__(self, ledger: Ledger, cost: CostGate, judging: BatchWorker[JudgingJob], turns: TurnJudging,
                 export: ExportStage, sessions: SessionJudging | None, *, sample_rate: float, max_queue: int,
                 log: RateLimitedLog, describe: Callable[[], Mapping[str, int]]) -> None:
        self._ledger = ledger
        self._cost = cost
        self._judging = judging
        self._turns = turns
        self._export = export
        self._sessions = sessions
        self.sample_rate = sample_rate
        self.max_queue = max_queue
        self._log = log
        self._describe = describe

    def _dropped(self, job: Job, reason: str) -> tuple[SubmitStatus, None]:
        if self._ledger.closed:
            reason = "auditor shut down"
        self._log.warning("dropped", "ragaudit: turn %s dropped (%s); stats=%s", job.turn.turn_id, reason,
                          self._describe())
        return "dropped", None

    @staticmethod
    @abstractmethod
    def delivery(export: ExportStage) -> Callable[[AuditRecord], None]:
        """How a judged turn's record reaches the exporters of *export*."""

    @abstractmethod
    def submit(self, job: Job, sample: bool) -> tuple[SubmitStatus, AuditRecord | None]:
        """Take *job* (*sample*: False for a turn past the sampler, after feedback), counted in the ledger. Never
        blocks except inline."""

    @abstractmethod
    def record_unjudged(self, make: Callable[[], AuditRecord]) -> None:
        """The record *make* gives, of a turn traced and not judged, to the exporters (where records are made)."""


class _JudgedHere(SubmitStrategy):
    """Turns judged in this process: ``judge_if``, sampling and the queue bound decide, then `_hand` takes it."""

    samples_at_hand_off: ClassVar[bool] = True

    def submit(self, job: Job, sample: bool) -> tuple[SubmitStatus, AuditRecord | None]:
        turn = job.turn
        selected = self._cost.selected(turn, job.policy) if sample else True
        ledger = self._ledger
        with ledger.lock:
            ledger.counts["submitted"] += 1
            if ledger.closed:
                ledger.counts["dropped"] += 1
                queued = False
            elif not selected:
                ledger.counts["filtered_out"] += 1
                return "filtered_out", None
            elif sample and not sampled(turn.turn_id, self.sample_rate):
                ledger.counts["sampled_out"] += 1
                self._sampled_out(job)
                return "sampled_out", None
            elif ledger.pending >= self.max_queue:
                ledger.counts["dropped"] += 1
                queued = False
            else:
                ledger.pending += 1
                queued = True
        if not queued:
            return self._dropped(job, f"queue full, Limits.max_queue={self.max_queue}")
        return self._hand(job)

    def _sampled_out(self, job: Job) -> None:
        """Kept for feedback; its session is partial by one turn."""
        self._cost.retain(job.turn, job)
        if self._sessions is not None:
            self._sessions.sampled_out(job.turn)

    @abstractmethod
    def _hand(self, job: Job) -> tuple[SubmitStatus, AuditRecord | None]:
        """Take the queued *job* (counted pending)."""

    def record_unjudged(self, make: Callable[[], AuditRecord]) -> None:
        self._export.put(make())


class _BackgroundSubmit(_JudgedHere):
    """``mode="background"``: queued for the judging loop; the backlog's bound applies at hand-off."""

    sheds_at_hand_off: ClassVar[bool] = True

    @staticmethod
    def delivery(export: ExportStage) -> Callable[[AuditRecord], None]:
        return export.put

    def _hand(self, job: Job) -> tuple[SubmitStatus, AuditRecord | None]:
        if not self._judging.put(job):
            self._ledger.unqueue()
            return "dropped", None
        return "queued", None


class _InlineSubmit(_JudgedHere):
    """``mode="inline"``: judged before the submit returns, its record exported at once."""

    sheds_at_hand_off: ClassVar[bool] = False

    @staticmethod
    def delivery(export: ExportStage) -> Callable[[AuditRecord], None]:
        return lambda record: export.export_now([record])

    def _hand(self, job: Job) -> tuple[SubmitStatus, AuditRecord | None]:
        try:
            record = self._judging.run_coroutine(self._turns.process(job)).result()
        except RuntimeError:  # no thread could be started (interpreter shutdown)
            self._ledger.unqueue()
            return "dropped", None
        if record.unjudged is not None:
            return "not_sent", record
        return ("judged" if record.status == "judged" else "failed"), record


class _ToWorker(SubmitStrategy):
    """``mode="worker"``: judged by ``ragaudit worker`` from the turn's trace, if it has one; nothing here."""

    samples_at_hand_off: ClassVar[bool] = False
    sheds_at_hand_off: ClassVar[bool] = False

    @staticmethod
    def delivery(export: ExportStage) -> Callable[[AuditRecord], None]:
        return export.put  # never reached: no turn is judged here

    def submit(self, job: Job, sample: bool) -> tuple[SubmitStatus, AuditRecord | None]:
        ledger = self._ledger
        with ledger.lock:
            ledger.counts["submitted"] += 1
            status: SubmitStatus = "to_worker" if job.turn.trace_id is not None and not ledger.closed else "dropped"
            ledger.counts[status] += 1
        if status == "dropped":
            return self._dropped(job, "mode='worker' and the turn has no trace for ragaudit worker: is tracing "
                                      "configured?")
        return status, None

    def record_unjudged(self, make: Callable[[], AuditRecord]) -> None:
        """Nothing: ragaudit worker makes the record, from the same trace."""


SUBMIT_STRATEGIES: Mapping[str, type[SubmitStrategy]] = {
    "background": _BackgroundSubmit, "inline": _InlineSubmit, "worker": _ToWorker}
"""The submit strategy of each ``mode``."""
