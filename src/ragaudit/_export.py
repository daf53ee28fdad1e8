"""The exporter extension point: [`Exporter`][ragaudit.Exporter], [`BaseExporter`][ragaudit.BaseExporter],
[`ExportResult`][ragaudit.ExportResult].

Shaped like OpenTelemetry's ``SpanExporter``: the [`Auditor`][ragaudit.Auditor] makes one
[`AuditRecord`][ragaudit.AuditRecord] per finished turn and hands batches of them, on a thread of
its own export worker (a `BatchWorker`), to every exporter: the judge span,
the audit log, Phoenix, Langfuse, ``on_judgement`` and any of yours. An exporter reads the record
and never recomputes a derived value; every text goes out through ``record.content_policy``.

At the bottom floor so tracing's exporters and the Auditor (a floor above) share it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .records import AuditRecord

__all__ = ["BaseExporter", "ExportResult", "Exporter"]


class ExportResult(enum.Enum):
    """What [`Exporter.export`][ragaudit.Exporter.export] did with a batch (as OpenTelemetry's ``SpanExportResult``)."""

    SUCCESS = 0
    FAILURE = 1


@runtime_checkable
class Exporter(Protocol):
    """Somewhere audit records go. Every member the Auditor calls is declared here.

    ``export`` is called on the Auditor's export thread, with records in the order their turns
    were judged; it must not block for long (an exporter that talks to the network queues and
    sends from a worker of its own). ``force_flush`` and ``shutdown`` return within *timeout_s*
    (the Auditor also abandons them at its deadline). ``errors`` counts items that never reached
    their destination; the Auditor adds it to ``stats()["export_errors"]``. Never raise into the
    Auditor: a raise from ``export`` is counted as one error per record of the batch.
    """

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        """Take a batch of records (unjudged ones included: skip what you do not record)."""
        ...

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Deliver what is buffered within *timeout_s*; True when everything was delivered."""
        ...

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Deliver what is buffered within *timeout_s*, then release resources. Never raises."""
        ...

    @property
    def errors(self) -> int:
        """Items given up on so far (counted once each)."""
        ...


class BaseExporter:
    """Base class for exporters: implement [`export`][ragaudit.BaseExporter.export]; every other member has a
    default."""

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        raise NotImplementedError

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Nothing buffered: delivered."""
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Nothing to release."""

    @property
    def errors(self) -> int:
        """No delivery failures of its own to report."""
        return 0
