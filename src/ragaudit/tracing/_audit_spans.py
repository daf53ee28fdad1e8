"""The full audit in the trace: document grades, graded metrics, citation checks, sentence events.

Always on the judge span, read from the turn's [`AuditRecord`][ragaudit.AuditRecord] (computed once). A
turn judged before its span ends (inline judging: the record is handed to ``end_turn``) also gets
the graded metrics and citation precision/recall on the turn span and the grades on the retrieval
spans; a background judgement arrives after those spans have ended (the judge never holds the
host's spans open), so it cannot. Kept apart from
`ragaudit.tracing.spans` so the span recorder calls a few small functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..records import AuditRecord, Judgement
from . import conventions as c

__all__ = ["full_audit_attributes", "record_grades", "retrieval_grades", "sentence_events", "turn_audit_attributes"]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def turn_audit_attributes(record: AuditRecord | None) -> dict[str, Any]:
    """The turn span's share of a full audit: graded metrics and citation precision/recall (empty
    without a record or without a full audit)."""
    audit = record.audit if record is not None else None
    if audit is None:
        return {}
    attrs: dict[str, Any] = {}
    for name, value in (audit.metrics or {}).items():
        attrs[c.retrieval_metric_key(name)] = float(value)
    if audit.citation_precision is not None:
        attrs[c.ATTR_CITATION_PRECISION] = audit.citation_precision
    if audit.citation_recall is not None:
        attrs[c.ATTR_CITATION_RECALL] = audit.citation_recall
    return attrs


def record_grades(record: AuditRecord | None) -> dict[str, int] | None:
    """Doc id -> the judge's grade, for the retrieval spans of a turn judged before they end."""
    if record is None or record.judgement is None or not record.judgement.document_grades:
        return None
    return {g.doc_id: g.grade for g in record.judgement.document_grades if g.grade is not None}


def full_audit_attributes(record: AuditRecord, capture: bool, text: Callable[[str], str]) -> dict[str, Any]:
    """The judge span's full-audit attributes; empty for a judgement without verdicts or grades."""
    judgement = record.judgement
    audit = record.audit
    if judgement is None or audit is None:
        return {}
    attrs: dict[str, Any] = {
        c.ATTR_SENTENCES_COUNT: len(judgement.sentences),
        c.ATTR_SENTENCES_UNSUPPORTED: audit.unsupported,
    }
    if judgement.document_grades:
        attrs[c.ATTR_DOCUMENT_GRADES] = _dumps([g.to_dict() for g in judgement.document_grades])
    attrs.update(turn_audit_attributes(record))
    if audit.citation_checks:
        checks = []
        for check in audit.citation_checks:
            entry = check.to_dict()
            entry["marker"] = text(check.marker) if capture and check.marker is not None else None
            checks.append(entry)
        attrs[c.ATTR_CITATION_CHECKS] = _dumps(checks)
    return attrs


def sentence_events(judgement: Judgement, capture: bool,
                    text: Callable[[str], str]) -> tuple[list[dict[str, Any]], int]:
    """One event's attributes per sentence, unsupported and contradicted ones first, at most
    `MAX_SENTENCE_EVENTS`; and how many were left out."""
    ordered = sorted(judgement.sentences, key=lambda s: (not s.problem, s.index))
    events = []
    for sentence in ordered[: c.MAX_SENTENCE_EVENTS]:
        event: dict[str, Any] = {
            c.ATTR_SENTENCE_INDEX: sentence.index,
            c.ATTR_SENTENCE_VERDICT: sentence.verdict or c.MISSING_SCORE_LABEL,
            c.ATTR_SENTENCE_SUPPORTING_DOC_IDS: list(sentence.supporting_doc_ids),
        }
        if capture:
            event[c.ATTR_SENTENCE_TEXT] = text(sentence.text)
        events.append(event)
    return events, max(0, len(ordered) - c.MAX_SENTENCE_EVENTS)


def retrieval_grades(documents: Any, grades: Mapping[str, int] | None) -> dict[str, Any]:
    """The retrieval span's grade attribute: a JSON list of the recorded documents' grades, in
    order, null where a document was not graded; empty without grades."""
    if not grades:
        return {}
    return {c.ATTR_RETRIEVAL_DOCUMENT_GRADES: _dumps([grades.get(d.id) for d in documents])}
