"""The full audit in the trace: document grades, judged metrics, citation checks, sentence events.

Always on the judge span. A judgement that arrives before its turn span ends (inline judging, or a
judge faster than the turn's close) also puts the judged metrics and citation precision/recall on
the turn span and the grades on the retrieval spans; a background judgement arrives after those
spans have ended (the judge never holds the host's spans open), so it cannot. Kept apart from
:mod:`ragaudit.tracing.spans` so the span recorder calls a few small functions.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from .. import _fork
from ..judged import audit_turn
from ..records import Judgement, RagTurn
from . import conventions as c

__all__ = ["full_audit_attributes", "retrieval_grades", "sentence_events", "take_for_turn"]

_EARLY_MEMORY = 1024
_early_lock = _fork.lock()
# turn id -> (turn span attributes, doc id -> grade), for a turn span that has not ended yet
_early: OrderedDict[str, tuple[dict[str, Any], dict[str, int]]] = OrderedDict()


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
    turn_attrs: dict[str, Any] = {}
    if judgement.document_grades:
        attrs[c.ATTR_DOCUMENT_GRADES] = _dumps([g.to_dict() for g in judgement.document_grades])
    for name, value in (audit.metrics or {}).items():
        turn_attrs[c.retrieval_metric_key(name)] = float(value)
    if audit.citation_precision is not None:
        turn_attrs[c.ATTR_CITATION_PRECISION] = audit.citation_precision
    if audit.citation_recall is not None:
        turn_attrs[c.ATTR_CITATION_RECALL] = audit.citation_recall
    attrs.update(turn_attrs)
    grades = {g.doc_id: g.grade for g in judgement.document_grades if g.grade is not None}
    with _early_lock:
        _early[turn.turn_id] = (turn_attrs, grades)
        while len(_early) > _EARLY_MEMORY:
            _early.popitem(last=False)
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


def take_for_turn(turn_id: str) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The turn-span attributes and the grades of a judgement that arrived before the turn span
    ended, once (None when there is none: the usual background case)."""
    with _early_lock:
        return _early.pop(turn_id, None)


def retrieval_grades(documents: Any, grades: Mapping[str, int] | None) -> dict[str, Any]:
    """The retrieval span's grade attribute: a JSON list of the recorded documents' grades, in
    order, null where a document was not graded; empty without grades."""
    if not grades:
        return {}
    return {c.ATTR_RETRIEVAL_DOCUMENT_GRADES: _dumps([grades.get(d.id) for d in documents])}
