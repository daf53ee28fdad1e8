"""The worker tests' exporters: :class:`FileExporter` for the CLI test (each judged turn's id to
``$RAGAUDIT_TEST_EXPORT_FILE``), :class:`Records` to keep the records in the test's own process."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from ragaudit import BaseExporter, ExportResult
from ragaudit.records import AuditRecord


class FileExporter(BaseExporter):
    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        with open(os.environ["RAGAUDIT_TEST_EXPORT_FILE"], "a") as f:
            for record in records:
                f.write(f"{record.turn.turn_id} {record.status}\n")
        return ExportResult.SUCCESS


class Records(BaseExporter):
    """The worker's audit records, kept."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.records: list[AuditRecord] = []

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        with self._lock:
            self.records.extend(records)
        return ExportResult.SUCCESS
