"""``ragaudit calibrate``: agreement of judgements with human labels (`ragaudit.evaluation.calibration`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from ..errors import RagAuditError
from ..evaluation.calibration import PathLike, calibrate, judgement_rows, read_judgements, read_labels

__all__ = ["calibrate_command", "fit_command"]


def calibrate_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``ragaudit calibrate LABELS JUDGEMENTS [--threshold T] [--format table|json]``; with ``--grades``,
    graded human qrels against the judge's document grades (`ragaudit.cli.qrels.calibrate_grades_command`);
    with ``--fit``, a judge config fitted to the labels (`fit_command`).

    Prints the calibration table (or JSON) and returns 0. Bad input raises
    [`RagAuditError`][ragaudit.RagAuditError], which the command line reports with exit code 2.
    """
    if getattr(args, "html_out", None) and not args.fit:
        raise RagAuditError("--html draws the fit's before and after: use it with --fit")
    if args.grades:
        from .qrels import calibrate_grades_command

        return calibrate_grades_command(args)
    if args.more:
        raise RagAuditError("more than one judgements file is only read with --grades")
    out = out if out is not None else sys.stdout
    labels = read_labels(args.labels)
    judgements = read_judgements(args.judgements)
    if args.fit:
        return fit_command(args, labels, judgements, out)
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


def _judge_name(path: PathLike) -> str | None:
    """The judge most rows of the judgements file name (an audit log's ``judge``), None when none does."""
    names = Counter(row["judge"] for _, row in judgement_rows(path) if isinstance(row.get("judge"), str))
    return names.most_common(1)[0][0] if names else None


def fit_command(args: argparse.Namespace, labels: dict[str, dict[str, float]],
                judgements: dict[str, dict[str, float | None]], out: TextIO) -> int:
    """``ragaudit calibrate LABELS JUDGEMENTS --fit [--out PATH] [--html PAGE] [--holdout 0.3] [--seed N]
    [--target-precision P] [--max-examples K]``: fit (`ragaudit.evaluation.fit.fit_judge`), write the judge
    config to ``--out``, print the held-out agreement before and after (and draw it in ``--html``). No labels,
    no match, or too few labels: [`RagAuditError`][ragaudit.RagAuditError] saying so (and how many more of
    each class)."""
    from ..evaluation.fit import fit_judge, read_label_texts, read_texts

    texts = {**read_texts(args.judgements), **read_label_texts(args.labels)}
    result = fit_judge(labels, judgements, texts=texts, judge=_judge_name(args.judgements), holdout=args.holdout,
                       seed=args.seed, target_precision=args.target_precision, max_examples=args.max_examples,
                       threshold=args.threshold)
    try:
        result.config.save(args.out)
    except OSError as exc:
        raise RagAuditError(f"cannot write the judge config to {args.out!r}: {exc.strerror or exc}") from None
    html_out = getattr(args, "html_out", None)
    if html_out:
        from ..content import scrub
        from ..evaluation._fit_html import fit_page

        try:  # scrubbed of known secrets, as every report file is
            Path(html_out).write_text(scrub(fit_page(result.config)), encoding="utf-8")
        except OSError as exc:
            raise RagAuditError(f"cannot write the HTML page to {html_out!r}: {exc.strerror or exc}") from None
    if args.format == "json":
        data: dict[str, Any] = {**result.to_dict(), "out": str(args.out)}
        if html_out:
            data["html"] = str(html_out)
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        out.write(result.to_table() + f"\n\njudge config written to {args.out}\n"
                  + (f"before/after drawn in {html_out}\n" if html_out else ""))
    return 0
