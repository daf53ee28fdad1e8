"""An exporter for the CLI test: writes each judged turn's id to ``$RAGAUDIT_TEST_SINK_FILE``."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ragaudit import BaseExporter, ExportResult
from ragaudit.records import AuditRecord


class FileSink(BaseExporter):
    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        with open(os.environ["RAGAUDIT_TEST_SINK_FILE"], "a") as f:
            for record in records:
                f.write(f"{record.turn.turn_id} {record.status}\n")
        return ExportResult.SUCCESS
