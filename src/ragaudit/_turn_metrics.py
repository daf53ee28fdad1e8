"""Ground-truth retrieval metrics of one turn, for its span, its audit line and the exporters.

At the bottom floor so tracing (exporters), the auditor and the integrations all reach it without an
upward import.
"""

from __future__ import annotations

from collections.abc import Iterable

from .records import RagTurn

__all__ = ["DEFAULT_TURN_MEASURES", "turn_metrics"]

DEFAULT_TURN_MEASURES: tuple[str, ...] = ("recall@5", "precision@5", "mrr@10", "ndcg@10")
"""Retrieval metrics put on a turn's span and audit line when its ``relevant_ids`` are known."""


def turn_metrics(turn: RagTurn, measures: Iterable[str] = DEFAULT_TURN_MEASURES) -> dict[str, float] | None:
    """Retrieval metrics of *turn*'s documents against its ``relevant_ids``; None when unknown."""
    if turn.relevant_ids is None:
        return None
    from .metrics import score_ranking

    ranked = [doc.id for doc in sorted(turn.documents, key=lambda d: d.rank)]
    return score_ranking(ranked, turn.relevant_ids, tuple(measures))
