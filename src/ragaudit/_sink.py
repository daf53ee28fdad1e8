"""The older sink interface: [`JudgementSink`][ragaudit.auditor.JudgementSink] (``emit(turn, judgement)``) and its base
class.

Sinks are exporters of [`AuditRecord`][ragaudit.AuditRecord]s now ([`Exporter`][ragaudit.Exporter],
[`BaseExporter`][ragaudit.BaseExporter]); a sink of this interface still works (the Auditor adapts it), and
[`BaseJudgementSink`][ragaudit.auditor.BaseJudgementSink] is an exporter itself: its
[`export`][ragaudit.auditor.BaseJudgementSink.export] calls [`emit`][ragaudit.auditor.BaseJudgementSink.emit] for every
judged record. At the bottom floor so that tracing's sinks (Phoenix, Langfuse) derive from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._export import BaseExporter, ExportResult
from .records import AuditRecord, Judgement, RagTurn

if TYPE_CHECKING:
    from .tracing.spans import SpanRecorder

__all__ = ["BaseJudgementSink", "JudgementSink"]


@runtime_checkable
class JudgementSink(Protocol):
    """Somewhere judgements go (a trace backend's score API, a file, a queue).

    Every member the [`Auditor`][ragaudit.Auditor] uses is declared here;
    [`BaseJudgementSink`][ragaudit.auditor.BaseJudgementSink] gives each one but ``emit`` a default. ``emit`` is called
    on the Auditor's worker thread and must not block for long: a sink that talks to the network queues the item and
    sends it from a worker of its own. ``force_flush`` and ``shutdown`` follow the OpenTelemetry exporter convention;
    the Auditor runs them on a worker thread and stops waiting at its deadline.
    """

    def emit(self, turn: RagTurn, judgement: Judgement) -> None:
        """Take one judgement (queue it; do not block). Texts of *turn* and *judgement* are sent the
        way [`BaseJudgementSink.recorder`][ragaudit.auditor.BaseJudgementSink.recorder] records them (that turn's
        content policy)."""
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
        """Items that never reached the backend; the Auditor adds them to ``stats()["export_errors"]``."""
        ...


class BaseJudgementSink(BaseExporter):
    """Base class for sinks of the ``emit`` interface: implement [`emit`][ragaudit.auditor.BaseJudgementSink.emit];
    every other member has a default. An exporter: [`export`][ragaudit.auditor.BaseJudgementSink.export] emits every
    judged record."""

    _recorder: SpanRecorder | None = None

    def emit(self, turn: RagTurn, judgement: Judgement) -> None:
        raise NotImplementedError

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        """[`emit`][ragaudit.auditor.BaseJudgementSink.emit] each judged record's turn and judgement."""
        for record in records:
            if record.judgement is not None:
                self.emit(record.turn, record.judgement)
        return ExportResult.SUCCESS

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
        """The span recorder bound with [`bind_recorder`][ragaudit.auditor.BaseJudgementSink.bind_recorder] (None
        before). A record's own content policy is ``record.content_policy``: exporters read that instead."""
        return self._recorder

    @property
    def errors(self) -> int:
        """No delivery failures to report."""
        return 0
