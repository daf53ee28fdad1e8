"""Deprecated: renamed [`ragaudit.turn_audit`][ragaudit.turn_audit] (``judged`` was one letter from ``judges``).

Kept for one release with the names it had (``judged_metrics`` still keys its result
``judged_<metric>``; [`ragaudit.turn_audit`][ragaudit.turn_audit] has them as ``graded_*``); importing it warns.
"""

from __future__ import annotations

from ._compat import OLD_GRADED_PREFIX as JUDGED_PREFIX
from ._deprecation import warn_deprecated
from .turn_audit import GRADED_MEASURES as JUDGED_MEASURES
from .turn_audit import (
    RELEVANT_GRADE,
    CitationCheck,
    TurnAudit,
    _judged_metrics,
    answer_sentences,
    audit_turn,
    check_citations,
    citation_scores,
)
from .turn_audit import graded_labels as judged_labels

judged_metrics = _judged_metrics

__all__ = ["JUDGED_MEASURES", "JUDGED_PREFIX", "RELEVANT_GRADE", "CitationCheck", "TurnAudit", "answer_sentences",
           "audit_turn", "check_citations", "citation_scores", "judged_labels", "judged_metrics"]

warn_deprecated("ragaudit.judged", "ragaudit.turn_audit")
