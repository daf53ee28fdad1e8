"""Judges: the :class:`RagJudge` protocol and its implementations.

Every judge is imported on first use, so ``import ragaudit.judges`` stays light.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from .base import BaseRagJudge, FakeJudge, JudgeError, RagJudge

if TYPE_CHECKING:
    from ..evaluation.calibration import ZScoreNormalizer, calibrate, consistency
    from .chat import ChatRagJudge
    from .combinators.cache import CachedJudge, MemoryCache, SqliteCache
    from .combinators.ensemble import ConsensusJudge, JuryJudge
    from .correctness import CorrectnessJudge
    from .cost import CostEstimate, estimate_cost
    from .geval import GEvalJudge
    from .lexical import LexicalJudge
    from .pairwise import PairwiseJudge, PairwiseResult, TournamentResult
    from .rubric import Criterion, RubricJudge
    from .rules import RuleJudge, TieredJudge

_LAZY = {
    "CachedJudge": ".combinators.cache", "MemoryCache": ".combinators.cache", "SqliteCache": ".combinators.cache",
    "ZScoreNormalizer": "..evaluation.calibration", "calibrate": "..evaluation.calibration",
    "consistency": "..evaluation.calibration",
    "ChatRagJudge": ".chat",
    "CorrectnessJudge": ".correctness",
    "CostEstimate": ".cost", "estimate_cost": ".cost",
    "ConsensusJudge": ".combinators.ensemble", "JuryJudge": ".combinators.ensemble",
    "GEvalJudge": ".geval",
    "LexicalJudge": ".lexical",
    "PairwiseJudge": ".pairwise", "PairwiseResult": ".pairwise", "TournamentResult": ".pairwise",
    "Criterion": ".rubric", "RubricJudge": ".rubric",
    "RuleJudge": ".rules", "TieredJudge": ".rules",
}

__all__ = [
    "BaseRagJudge",
    "CachedJudge",
    "ChatRagJudge",
    "ConsensusJudge",
    "CorrectnessJudge",
    "CostEstimate",
    "Criterion",
    "FakeJudge",
    "GEvalJudge",
    "JudgeError",
    "JuryJudge",
    "LexicalJudge",
    "MemoryCache",
    "PairwiseJudge",
    "PairwiseResult",
    "RagJudge",
    "RubricJudge",
    "RuleJudge",
    "SqliteCache",
    "TieredJudge",
    "TournamentResult",
    "ZScoreNormalizer",
    "calibrate",
    "consistency",
    "default_judge",
    "estimate_cost",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def default_judge() -> RagJudge:
    """The judge used when none is given.

    :class:`~ragaudit.ChatRagJudge` when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set (model from
    ``RAGAUDIT_JUDGE_MODEL``, default ``gpt-4o-mini``), else the offline
    :class:`~ragaudit.LexicalJudge`.
    """
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from .chat import ChatRagJudge

        return ChatRagJudge(model=os.environ.get("RAGAUDIT_JUDGE_MODEL", "gpt-4o-mini"))
    from .lexical import LexicalJudge

    return LexicalJudge()
