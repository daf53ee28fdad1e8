"""Deprecated: renamed :mod:`ragaudit.turn_audit` (``judged`` was one letter from ``judges``).

Kept for one release; importing it warns.
"""

from __future__ import annotations

from ._deprecation import warn_deprecated
from .turn_audit import (
    JUDGED_MEASURES,
    JUDGED_PREFIX,
    RELEVANT_GRADE,
    CitationCheck,
    TurnAudit,
    answer_sentences,
    audit_turn,
    check_citations,
    citation_scores,
    judged_labels,
    judged_metrics,
)

__all__ = ["JUDGED_MEASURES", "JUDGED_PREFIX", "RELEVANT_GRADE", "CitationCheck", "TurnAudit", "answer_sentences",
           "audit_turn", "check_citations", "citation_scores", "judged_labels", "judged_metrics"]

warn_deprecated("ragaudit.judged", "ragaudit.turn_audit")
