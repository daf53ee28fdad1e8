"""The full audit on the judge span: document grades, judged metrics, citation checks, sentence events.

Kept apart from :mod:`ragaudit.tracing.spans` so the span recorder calls two small functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..judged import audit_turn
from ..records import Judgement, RagTurn
from . import conventions as c

__all__ = ["full_audit_attributes", "sentence_events"]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def full_audit_attributes(turn: RagTurn, judgement: Judgement, capture: bool,
                          text: Callable[[str], str]) -> dict[str, Any]:
    """The judge span's full-audit attributes; empty for a judgement without verdicts or grades."""
    if not judgement.sentences and not judgement.document_grades:
        return {}
    audit = audit_turn(turn, judgement)
    attrs: dict[str, Any] = {
        c.ATTR_SENTENCES_COUNT: len(judgement.sentences),
        c.ATTR_SENTENCES_UNSUPPORTED: audit.unsupported,
    }
    if judgement.document_grades:
        attrs[c.ATTR_DOCUMENT_GRADES] = _dumps([g.to_dict() for g in judgement.document_grades])
    for name, value in (audit.metrics or {}).items():
        attrs[c.retrieval_metric_key(name)] = float(value)
    if audit.citation_precision is not None:
        attrs[c.ATTR_CITATION_PRECISION] = audit.citation_precision
    if audit.citation_recall is not None:
        attrs[c.ATTR_CITATION_RECALL] = audit.citation_recall
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
    :data:`~ragaudit.tracing.conventions.MAX_SENTENCE_EVENTS`; and how many were left out."""
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
