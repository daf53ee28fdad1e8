"""``ragaudit calibrate``: agreement of judgements with human labels (`ragaudit.evaluation.calibration`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ..errors import RagAuditError
from ..evaluation.calibration import calibrate, read_judgements, read_labels

__all__ = ["calibrate_command"]


def calibrate_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``ragaudit calibrate LABELS JUDGEMENTS [--threshold T] [--format table|json]``; with ``--grades``,
    graded human qrels against the judge's document grades (`ragaudit.cli.qrels.calibrate_grades_command`).

    Prints the calibration table (or JSON) and returns 0. Bad input raises
    [`RagAuditError`][ragaudit.RagAuditError], which the command line reports with exit code 2.
    """
    if args.grades:
        from .qrels import calibrate_grades_command

        return calibrate_grades_command(args)
    if args.more:
        raise RagAuditError("more than one judgements file is only read with --grades")
    out = out if out is not None else sys.stdout
    labels = read_labels(args.labels)
    judgements = read_judgements(args.judgements)
    report = calibrate(labels, judgements, threshold=args.threshold)
    if report.matched == 0:
        raise RagAuditError(
            f"no id is in both {args.labels!r} ({len(labels)} labelled) and {args.judgements!r} "
            f"({len(judgements)} judged): check that the label ids are the turn ids of the audit log or "
            "the row ids of the report"
        )
    if args.format == "json":
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out.write(report.to_table() + "\n")
    return 0
