"""The Auditor's export stage: every record to every exporter, in batches, on one BatchWorker.

The judging loop hands each finished [`AuditRecord`][ragaudit.AuditRecord] to `ExportStage`; its
worker thread gives batches of them to each exporter in turn (the judge span first: an exporter may
refer to it), then tells the Auditor they are delivered (so ``stats()`` counts a judgement once it is
recorded everywhere). File and network work never runs on the judging loop.

Also here: the exporter made of the Auditor's ``on_judgement`` argument (`OnJudgementExporter`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from .. import _fork
from .._export import BaseExporter, Exporter, ExportResult
from .._log import RateLimitedLog
from .._worker import BatchWorker
from ..content import ContentPolicy
from ..records import AuditRecord, Judgement, RagTurn
from ..sessions import SessionExporter, SessionRecord

__all__ = ["ExportStage", "OnJudgementExporter", "exporter_name"]

logger = logging.getLogger("ragaudit")

_EXPORT_BATCH = 64
_PACE_BATCH = 8
# A batch gathers for up to 50 ms (a flush cuts that short): woken once per record, the export
# thread took the interpreter from the judging loop at every judgement (benchmarks/judge_throughput.py).
_EXPORT_DELAY_S = 0.05

OnJudgement = Callable[[RagTurn, Judgement], None]
_R = TypeVar("_R", AuditRecord, SessionRecord)


def exporter_name(exporter: object) -> str:
    """A short name for log lines: a function's name, else the class name."""
    name = getattr(exporter, "__name__", None)  # a user's callable (on_judgement), not our object
    return name if isinstance(name, str) else type(exporter).__name__


class _Failures:
    """A count of failed deliveries with a rate-limited warning per kind (never raises)."""

    def __init__(self) -> None:
        self._lock = _fork.lock()
        self.count = 0
        self._log = RateLimitedLog()

    def add(self, target: object, exc: BaseException, policy: ContentPolicy, count: int = 1) -> None:
        with self._lock:
            self.count += count
        name = exporter_name(target)
        self._log.warning(f"export:{name}:{type(exc).__name__}", "ragaudit: exporter %s failed: %s", name,
                          policy.exception(exc))

    def reset(self) -> None:
        self._lock = _fork.lock()
        self.count = 0


class OnJudgementExporter(BaseExporter):
    """``Auditor(on_judgement=...)`` as an exporter: ``on_judgement(turn, judgement)`` per judged record;
    a raise is counted (``errors``) and logged, never passed on."""

    def __init__(self, callback: OnJudgement) -> None:
        self.callback = callback
        self._failures = _Failures()

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        ok = True
        for record in records:
            if record.judgement is None:
                continue
            try:
                self.callback(record.turn, record.judgement)
            except Exception as exc:
                ok = False
                self._failures.add(self.callback, exc, record.content_policy)
        return ExportResult.SUCCESS if ok else ExportResult.FAILURE

    @property
    def errors(self) -> int:
        return self._failures.count


class ExportStage:
    """Runs *exporters* over batches of records on one BatchWorker; *delivered(records)* is called
    after every exporter had them (also when one failed: its failure is counted, the others run)."""

    def __init__(self, exporters: Sequence[Exporter], delivered: Callable[[Sequence[AuditRecord]], None],
                 content: ContentPolicy, *, max_queue: int) -> None:
        self.exporters = tuple(exporters)
        self._delivered = delivered
        self._content = content
        self._failures = _Failures()
        # Paced (the host first): a batch goes to the exporters in slices of _PACE_BATCH records.
        # A judged session's record takes the same path, to the exporters that take sessions.
        self.worker: BatchWorker[AuditRecord | SessionRecord] = BatchWorker(
            "export", self.export_now, max_queue=max_queue, max_batch=_EXPORT_BATCH, delay_s=_EXPORT_DELAY_S,
            paced=True, pace_batch=_PACE_BATCH)

    def put(self, record: AuditRecord | SessionRecord) -> None:
        """Export *record* on the worker (or here and now, when the worker cannot take it)."""
        if not self.worker.put(record):
            self.export_now([record])

    def export_now(self, items: list[AuditRecord | SessionRecord]) -> None:
        """Give *items* to every exporter on this thread (sessions to those that take them), then
        report the turns' records delivered."""
        records = [r for r in items if isinstance(r, AuditRecord)]
        sessions = [r for r in items if isinstance(r, SessionRecord)]
        try:
            for exporter in self.exporters:
                if records:
                    self._run(exporter, exporter.export, records)
                if sessions and isinstance(exporter, SessionExporter):
                    self._run(exporter, exporter.export_sessions, sessions)
        finally:
            if records or not items:  # a batch of sessions only: no turn to count
                self._delivered(records)

    def _run(self, exporter: object, export: Callable[[list[_R]], object], batch: list[_R]) -> None:
        try:
            export(batch)
        except Exception as exc:
            policy = batch[0].content_policy if batch else self._content
            self._failures.add(exporter, exc, policy, count=len(batch))

    def count_failure(self, target: object, exc: BaseException, policy: ContentPolicy | None = None) -> None:
        """Count and log a failure of *target* outside an export (its flush, its shutdown)."""
        self._failures.add(target, exc, policy or self._content)

    @property
    def errors(self) -> int:
        """Failures counted here plus every exporter's own (a failing counter counts as none)."""
        total = self._failures.count
        for exporter in self.exporters:
            try:
                total += int(exporter.errors)
            except Exception:  # an exporter's counter must not break stats()
                continue
        return total

    def after_fork(self) -> None:
        self._failures.reset()
