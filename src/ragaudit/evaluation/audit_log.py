"""An [`EvaluationReport`][ragaudit.EvaluationReport] read back from the Auditor's audit log."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from .._compat import current_audit_line
from .._jsonl import read_jsonl
from ..errors import RagAuditError
from ..records import SCORE_NAMES
from .report import EvaluationReport, RowResult, diagnose

__all__ = ["read_audit_entries", "report_from_audit_log", "row_from_audit"]


def _float_or_none(value: object) -> float | None:
    """A logged score in [0, 1]; None for anything else (never clamped: a 7 is not a 1.0)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if 0.0 <= value <= 1.0 else None


def _invalid_scores(entry: Mapping[str, Any]) -> dict[str, str]:
    """The scores of *entry* logged with a value that is not a score in [0, 1] (None is no value)."""
    return {name: repr(entry[name])[:40] for name in SCORE_NAMES
            if entry.get(name) is not None and _float_or_none(entry[name]) is None}


def row_from_audit(entry: Mapping[str, Any], index: int, threshold: float = 0.5) -> RowResult:
    """The [`RowResult`][ragaudit.evaluation.RowResult] of one checked audit-log line (*index*: its 0-based line)."""
    documents = [d for d in entry.get("documents") or () if isinstance(d, Mapping)]
    sources = {str(d.get("id")): d.get("source") for d in documents}
    citations: list[dict[str, Any]] = []
    for c in entry.get("citations") or ():
        if isinstance(c, Mapping) and c.get("doc_id"):
            doc_id = str(c["doc_id"])
            citations.append({"doc_id": doc_id, "rank": c.get("rank"), "source": sources.get(doc_id),
                              "method": c.get("method"), "marker": c.get("marker")})
    raw_metrics = entry.get("retrieval_metrics") or {}
    metrics = {str(k): float(v) for k, v in raw_metrics.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(float(v))}
    faithfulness = _float_or_none(entry.get("faithfulness"))
    context_relevance = _float_or_none(entry.get("context_relevance"))
    answer_relevance = _float_or_none(entry.get("answer_relevance"))
    recall = next((v for k, v in metrics.items() if k.startswith("recall")), None)
    usage = {str(k): int(v) for k, v in (entry.get("usage") or {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    relevant = entry.get("relevant_ids")
    has_truth = isinstance(relevant, Mapping) and any(
        isinstance(v, (int, float)) and v >= 1 for v in relevant.values())
    return RowResult(
        id=str(entry.get("turn_id") or f"line-{index + 1}"),
        question=_str_or_none(entry.get("query")),
        answer=_str_or_none(entry.get("answer")),
        doc_ids=tuple(str(d.get("id")) for d in documents),
        doc_sources=tuple(_str_or_none(d.get("source")) for d in documents),
        cited_ids=tuple(str(c["doc_id"]) for c in citations),
        citations=tuple(citations),
        faithfulness=faithfulness,
        context_relevance=context_relevance,
        answer_relevance=answer_relevance,
        retrieval_metrics=metrics,
        has_ground_truth=has_truth,
        diagnosis=diagnose(faithfulness=faithfulness, context_relevance=context_relevance,
                           answer_relevance=answer_relevance, recall=recall, threshold=threshold),
        reason=_str_or_none(entry.get("reason")),
        judge_error=_str_or_none(entry.get("error")),
        trace_id=_str_or_none(entry.get("trace_id")),
        timestamp=_str_or_none(entry.get("ts")),
        usage=usage,
        invalid_scores=_invalid_scores(entry),
        **_full_audit_from_entry(entry),
    )


def _full_audit_from_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The full-audit fields of an audit-log line (absent keys in older logs give empty values; a
    0.1.0 line's ``judged_metrics`` was read as ``graded_metrics`` with the line)."""
    def dicts(key: str) -> tuple[Mapping[str, Any], ...]:
        return tuple(x for x in entry.get(key) or () if isinstance(x, Mapping))

    graded = entry.get("graded_metrics") or {}
    return {
        "sentences": dicts("sentences"),
        "document_grades": dicts("document_grades"),
        "citation_checks": dicts("citation_checks"),
        "graded_metrics": {str(k): float(v) for k, v in graded.items() if isinstance(v, (int, float))
                           and not isinstance(v, bool) and math.isfinite(float(v))},
        "citation_precision": _float_or_none(entry.get("citation_precision")),
        "citation_recall": _float_or_none(entry.get("citation_recall")),
    }


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _lowest_first(row: RowResult) -> tuple[int, int, float]:
    """Turns with an unsupported/contradicted sentence or a failing citation first, then lowest score."""
    flagged = 0 if row.problem_sentences or row.failing_citations else 1
    low = row.min_score()
    return (flagged, 1, 0.0) if low is None else (flagged, 0, low)


# The types each key of an audit line must have (null is always allowed): a line written by hand or
# by another tool that breaks them is named, not half-read (a number where a list belongs raised
# TypeError from deep inside the report).
_TEXT = ("ts", "turn_id", "trace_id", "span_id", "query", "answer", "judge", "judge_status", "reason", "error")
_NUMBERS = ("faithfulness", "context_relevance", "answer_relevance", "citation_precision", "citation_recall",
            "latency_s")
_LISTS_OF_OBJECTS = ("documents", "citations", "sentences", "document_grades", "citation_checks")
_OBJECTS = ("retrieval_metrics", "usage", "graded_metrics")


def _check_line(entry: Mapping[str, Any], where: str) -> None:
    def wrong(key: str, expected: str) -> RagAuditError:
        return RagAuditError(f"{where}: {key!r} is {_kind(entry[key])}; expected {expected} or null")

    for key in _TEXT:
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise wrong(key, "a string")
    for key in _NUMBERS:
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise wrong(key, "a number")
    for key in _LISTS_OF_OBJECTS:
        value = entry.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(x, dict) for x in value)):
            raise wrong(key, "a list of objects")
    for key in _OBJECTS:
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            raise wrong(key, "an object")
    if entry.get("relevant_ids") is not None and not isinstance(entry["relevant_ids"], (dict, list)):
        raise wrong("relevant_ids", "an object or a list")


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list of objects" if value and all(isinstance(x, dict) for x in value) else "a list"
    return "a string" if isinstance(value, str) else "an object" if isinstance(value, dict) else type(value).__name__


def read_audit_entries(path: str | os.PathLike[str]) -> tuple[list[tuple[int, dict[str, Any]]], list[dict[str, Any]]]:
    """``([(line number, turn line), ...], [session line, ...])`` of an audit log, every turn line checked.

    The one reader of audit logs for reports and the review queue: a cut-off last line (its writer was
    interrupted) is skipped with a warning; any other line that is not a JSON object with the audit log's
    types raises [`RagAuditError`][ragaudit.RagAuditError] naming the line.
    """
    where = f"audit log {os.fspath(path)!r}"
    entries = [(number, current_audit_line(entry))
               for number, entry in read_jsonl(path, "audit log", error=RagAuditError, cut_tail=True)]
    sessions = [entry for _, entry in entries if entry.get("kind") == "session"]
    turns = [(number, entry) for number, entry in entries if entry.get("kind") != "session"]
    for number, entry in turns:
        _check_line(entry, f"{where} line {number}")
    return turns, sessions


def report_from_audit_log(path: str | os.PathLike[str], *, threshold: float = 0.5) -> EvaluationReport:
    """An [`EvaluationReport`][ragaudit.EvaluationReport] of the turns in an audit log, flagged turns first, then lowest
    score.

    Turns with an unsupported or contradicted sentence, or a citation that does not hold, come
    first; then by the minimum of the three scores; turns with no score at all come last. A cut-off
    last line (its writer was interrupted) is skipped with a warning; any other line that is not a
    JSON object with the audit log's types raises [`RagAuditError`][ragaudit.RagAuditError] naming the line.
    """
    entries, sessions = read_audit_entries(path)
    rows = [row_from_audit(entry, number - 1, threshold) for number, entry in entries]
    rows.sort(key=_lowest_first)
    judges = sorted({str(e["judge"]) for _, e in entries if e.get("judge")})
    return EvaluationReport.from_rows(rows, judge=", ".join(judges) or "unknown", threshold=threshold,
                                      title=f"ragaudit audit report: {os.path.basename(os.fspath(path))}",
                                      sessions=sessions)
