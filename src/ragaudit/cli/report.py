"""``ragaudit report``: the audit view of logged turns, flagged and lowest-scored first, with citations."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from .._text import EscapingWriter
from ..errors import ConfigurationError
from ..evaluation._fit_html import fit_dimensions
from ..evaluation.audit_log import report_from_audit_log
from ..evaluation.report import DIAGNOSES, EvaluationReport, RowResult
from ._shared import gate, parse_fail_under, write_outputs

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from ..judges.fitted import JudgeConfig

__all__ = ["report_command"]


def _print_audit(report: EvaluationReport, limit: int, out: SupportsWrite[str] | None = None) -> None:
    # Every line can carry recorded (untrusted) text: control characters are shown, not obeyed.
    out = EscapingWriter(out or sys.stdout)
    total = len(report.rows)
    print(f"{total} turns in the log · judge {report.judge} · flagged sentences first, then lowest scores"
          + (f" (showing {min(limit, total)})" if limit < total else ""), file=out)
    print("", file=out)
    print("mean " + " · ".join(f"{name} {s.mean:.3f} (n={s.n}, missing={s.missing})" if s.mean is not None
                               else f"{name} – (n=0, missing={s.missing})"
                               for name, s in report.aggregate.items()), file=out)
    if report.usage:  # what judging these turns cost, totalled over the log
        print("judge usage " + ", ".join(f"{k} {v:,}" for k, v in sorted(report.usage.items())), file=out)
    shares = report.diagnosis_shares
    print("diagnosis " + ", ".join(f"{d} {shares[d]:.0%}" for d in DIAGNOSES if report.diagnosis_counts[d]),
          file=out)
    _print_problem_sentences(report, limit, out)
    for i, row in enumerate(report.rows[:limit], start=1):
        low = row.min_score()
        scores = "  ".join(f"{n}={v:.2f}" if v is not None else f"{n}=invalid({row.invalid_scores[n]})"
                           if n in row.invalid_scores else f"{n}=–" for n, v in row.scores().items())
        print("", file=out)
        print(f"{i:>3}. min {low:.2f}" if low is not None else f"{i:>3}. min –", f"[{row.diagnosis}]",
              f"turn {row.id}", file=out)
        print(f"     {scores}", file=out)
        if row.retrieval_metrics:
            print("     " + "  ".join(f"{k}={v:.2f}" for k, v in row.retrieval_metrics.items()), file=out)
        if row.graded_metrics or row.document_grades:
            grades = " ".join("–" if g.get("grade") is None else str(g.get("grade")) for g in row.document_grades)
            graded = "  ".join(f"{k}={v:.2f}" for k, v in row.graded_metrics.items())
            print(f"     grades by rank: {grades or '–'}  {graded}", file=out)
        if row.citation_checks:
            print(f"     citation precision {_num(row.citation_precision)}, recall {_num(row.citation_recall)}",
                  file=out)
        print(f"     Q: {_one_line(row.question)}", file=out)
        print(f"     A: {_one_line(row.answer)}", file=out)
        if row.citations:
            for c in row.citations:
                source = f" ({c['source']})" if c.get("source") else ""
                print(f"     cites [{c.get('rank')}] {c['doc_id']}{source} via {c.get('method')}", file=out)
        else:
            print("     cites nothing", file=out)
        if row.judge_error:
            print(f"     judge error: {_one_line(row.judge_error)}", file=out)
        print(f"     reason: {_one_line(row.reason)}", file=out)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _sentence_citations(row: RowResult, index: object) -> str:
    sources = dict(zip(row.doc_ids, row.doc_sources))
    parts = []
    for check in row.citation_checks:
        if check.get("sentence") == index:
            holds = check.get("holds")
            verdict = "holds" if holds else "does NOT hold" if holds is False else "not checked"
            source = sources.get(str(check.get("doc_id")))
            parts.append(f"[{check.get('rank')}] {check.get('doc_id')}" + (f" ({source})" if source else "")
                         + f": {verdict}")
    return "cites " + ", ".join(parts) if parts else "cites nothing"


def _print_problem_sentences(report: EvaluationReport, limit: int, out: SupportsWrite[str]) -> None:
    """The sentences judged unsupported or contradicted, and the citations that do not hold, first."""
    lines: list[str] = []
    for row in report.rows:
        for sentence in row.problem_sentences:
            index = sentence.get("index")
            lines.append(f"  turn {row.id[:8]} S{index} {sentence.get('verdict')}: "
                         f"{_one_line(sentence.get('text'), 140)} -- {_sentence_citations(row, index)}")
        problems = {s.get("index") for s in row.problem_sentences}
        for check in row.failing_citations:
            if check.get("sentence") not in problems:
                lines.append(f"  turn {row.id[:8]} S{check.get('sentence')} ({check.get('verdict')}) cites "
                             f"[{check.get('rank')}] {check.get('doc_id')}, which does not support it")
    if not lines:
        if any(row.sentences for row in report.rows):
            print("no unsupported or contradicted sentence, no citation that does not hold", file=out)
        return
    print(f"{len(lines)} unsupported or contradicted sentence(s) and wrong citation(s)"
          + (f" (showing {limit})" if len(lines) > limit else "") + ":", file=out)
    for line in lines[:limit]:
        print(line, file=out)


def _one_line(text: str | None, limit: int = 200) -> str:
    if text is None:
        return "(not recorded)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _judge_config(args: argparse.Namespace) -> JudgeConfig | None:
    """``--judge-config``, read and checked before anything is printed; errors name the file."""
    path = getattr(args, "judge_config", None)
    if path is None:
        return None
    if not args.html_out:
        raise ConfigurationError("--judge-config is drawn in the HTML report: add --html PATH")
    from ..judges.fitted import JudgeConfig

    config = JudgeConfig.load(path)
    try:
        fit_dimensions(config)
    except ConfigurationError as exc:
        raise ConfigurationError(f"judge config {str(path)!r}: {exc}") from None
    return config


def report_command(args: argparse.Namespace) -> int:
    """``ragaudit report [AUDIT.jsonl] [--html out.html [--judge-config judge-config.json]] [--json out.json]
    [--limit N] [--fail-under ...]``."""
    thresholds = parse_fail_under(args.fail_under or [])
    if args.limit < 1:
        raise ConfigurationError(f"--limit must be >= 1, got {args.limit}")
    judge_config = _judge_config(args)
    if not os.path.exists(args.audit_log):
        raise ConfigurationError(f"audit log {args.audit_log!r} not found (the Auditor writes ./ragaudit-audit.jsonl "
                                 "by default, in the directory the app runs in; pass its path)")
    report = report_from_audit_log(args.audit_log)
    _print_audit(report, args.limit)
    write_outputs(report, args, judge_config)
    return gate(report, thresholds)
