"""Judges: the [`RagJudge`][ragaudit.RagJudge] protocol and its implementations.

Layout: ``base`` (the protocol, [`BaseRagJudge`][ragaudit.BaseRagJudge], [`FakeJudge`][ragaudit.FakeJudge]); ``llm/``
    the LLM endpoint
layer (OpenAI-compatible endpoint, the judge prompt, reply parsing); the judges (``chat``, ``geval``,
``rubric``, ``correctness``, ``pairwise``, ``lexical``, ``rules``); ``combinators/`` judges made of
judges (jury and consensus, tiered, cached); ``fitted`` a judge with thresholds and few-shot examples fitted to
labels; ``cost`` what a judge call
costs. Every judge is imported on first use, so ``import ragaudit.judges`` stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .base import BaseRagJudge, FakeJudge, JudgeError, RagJudge

if TYPE_CHECKING:  # for type checkers; `X as X` marks a re-export (tests/test_exports.py checks it matches)
    from .chat import ChatRagJudge as ChatRagJudge
    from .combinators.cache import CachedJudge as CachedJudge
    from .combinators.cache import MemoryCache as MemoryCache
    from .combinators.cache import SqliteCache as SqliteCache
    from .combinators.ensemble import ConsensusJudge as ConsensusJudge
    from .combinators.ensemble import JuryJudge as JuryJudge
    from .combinators.tiered import TieredJudge as TieredJudge
    from .correctness import CorrectnessJudge as CorrectnessJudge
    from .cost import CostEstimate as CostEstimate
    from .cost import estimate_cost as estimate_cost
    from .fitted import FittedJudge as FittedJudge
    from .geval import GEvalJudge as GEvalJudge
    from .lexical import LexicalJudge as LexicalJudge
    from .pairwise import PairwiseJudge as PairwiseJudge
    from .pairwise import PairwiseResult as PairwiseResult
    from .pairwise import TournamentResult as TournamentResult
    from .rubric import Criterion as Criterion
    from .rubric import RubricJudge as RubricJudge
    from .rules import RuleJudge as RuleJudge

# Each judge is imported on first use (name -> module, see ragaudit._lazy).
_EXPORTS = {
    # the judges
    "ChatRagJudge": ".chat",
    "CorrectnessJudge": ".correctness",
    "Criterion": ".rubric", "RubricJudge": ".rubric",
    "GEvalJudge": ".geval",
    "LexicalJudge": ".lexical",
    "PairwiseJudge": ".pairwise", "PairwiseResult": ".pairwise", "TournamentResult": ".pairwise",
    "RuleJudge": ".rules",
    # judges made of judges
    "CachedJudge": ".combinators.cache", "MemoryCache": ".combinators.cache", "SqliteCache": ".combinators.cache",
    "ConsensusJudge": ".combinators.ensemble", "JuryJudge": ".combinators.ensemble",
    "TieredJudge": ".combinators.tiered",
    # a judge fitted to labels (ragaudit calibrate --fit)
    "FittedJudge": ".fitted",
    # what a judge costs
    "CostEstimate": ".cost", "estimate_cost": ".cost",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["BaseRagJudge", "FakeJudge", "JudgeError", "RagJudge", "default_judge", *_EXPORTS]


def default_judge() -> RagJudge:
    """The judge used when none is given.

    [`ChatRagJudge`][ragaudit.ChatRagJudge] when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set (model from
    ``RAGAUDIT_JUDGE_MODEL``, default ``gpt-4o-mini``), else the offline
    [`LexicalJudge`][ragaudit.LexicalJudge].
    """
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from .chat import ChatRagJudge

        return ChatRagJudge(model=os.environ.get("RAGAUDIT_JUDGE_MODEL", "gpt-4o-mini"))
    from .lexical import LexicalJudge

    return LexicalJudge()
