"""ragaudit: make every answer of a RAG pipeline auditable.

One callback (LangChain) or one call (LlamaIndex) gives every answer, in one OpenTelemetry trace, the
documents retrieved for it, the ones it cites, three judge scores with the judge's reason and, where
ground truth is known, retrieval metrics. Importing this package loads no framework and no OTel SDK;
the heavier names are imported on first use.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, JudgeError, MetricError, RagAuditError
from .judges.base import BaseRagJudge, FakeJudge, RagJudge
from .records import (
    Citation,
    DocumentGrade,
    Generation,
    Judgement,
    JudgeRequest,
    RagTurn,
    Retrieval,
    RetrievedDoc,
    SentenceVerdict,
    ToolCall,
)

__version__ = "0.1.0"

__all__ = [
    "Auditor",
    "BaseRagJudge",
    "CachedJudge",
    "ChatRagJudge",
    "Citation",
    "ConfigurationError",
    "ConsensusJudge",
    "CorrectnessJudge",
    "CostEstimate",
    "Criterion",
    "DocumentGrade",
    "EvaluationReport",
    "FakeJudge",
    "GEvalJudge",
    "Generation",
    "JudgeError",
    "JudgeRequest",
    "Judgement",
    "JuryJudge",
    "LexicalJudge",
    "MemoryCache",
    "MetricError",
    "PairwiseJudge",
    "RagAuditError",
    "RagJudge",
    "RagTurn",
    "Retrieval",
    "RetrievedDoc",
    "RubricJudge",
    "RuleJudge",
    "SentenceVerdict",
    "SqliteCache",
    "TieredJudge",
    "ToolCall",
    "__version__",
    "assert_rag_quality",
    "calibrate",
    "default_judge",
    "estimate_cost",
    "evaluate",
    "metrics",
    "tracing",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "Auditor": ("ragaudit.auditor", "Auditor"),
    "ChatRagJudge": ("ragaudit.judges.chat", "ChatRagJudge"),
    "LexicalJudge": ("ragaudit.judges.lexical", "LexicalJudge"),
    "default_judge": ("ragaudit.judges", "default_judge"),
    "RubricJudge": ("ragaudit.judges.rubric", "RubricJudge"),
    "Criterion": ("ragaudit.judges.rubric", "Criterion"),
    "CorrectnessJudge": ("ragaudit.judges.correctness", "CorrectnessJudge"),
    "RuleJudge": ("ragaudit.judges.rules", "RuleJudge"),
    "TieredJudge": ("ragaudit.judges.rules", "TieredJudge"),
    "CachedJudge": ("ragaudit.judges.combinators.cache", "CachedJudge"),
    "MemoryCache": ("ragaudit.judges.combinators.cache", "MemoryCache"),
    "SqliteCache": ("ragaudit.judges.combinators.cache", "SqliteCache"),
    "estimate_cost": ("ragaudit.judges.cost", "estimate_cost"),
    "CostEstimate": ("ragaudit.judges.cost", "CostEstimate"),
    "GEvalJudge": ("ragaudit.judges.geval", "GEvalJudge"),
    "PairwiseJudge": ("ragaudit.judges.pairwise", "PairwiseJudge"),
    "JuryJudge": ("ragaudit.judges.combinators.ensemble", "JuryJudge"),
    "ConsensusJudge": ("ragaudit.judges.combinators.ensemble", "ConsensusJudge"),
    "calibrate": ("ragaudit.evaluation.calibration", "calibrate"),
    "evaluate": ("ragaudit.evaluation", "evaluate"),
    "EvaluationReport": ("ragaudit.evaluation", "EvaluationReport"),
    "assert_rag_quality": ("ragaudit.evaluation", "assert_rag_quality"),
    "metrics": ("ragaudit.metrics", None),
    "tracing": ("ragaudit.tracing", None),
}

if TYPE_CHECKING:
    from . import metrics, tracing
    from .auditor import Auditor
    from .evaluation import EvaluationReport, assert_rag_quality, evaluate
    from .evaluation.calibration import calibrate
    from .judges import default_judge
    from .judges.chat import ChatRagJudge
    from .judges.combinators.cache import CachedJudge, MemoryCache, SqliteCache
    from .judges.combinators.ensemble import ConsensusJudge, JuryJudge
    from .judges.correctness import CorrectnessJudge
    from .judges.cost import CostEstimate, estimate_cost
    from .judges.geval import GEvalJudge
    from .judges.lexical import LexicalJudge
    from .judges.pairwise import PairwiseJudge
    from .judges.rubric import Criterion, RubricJudge
    from .judges.rules import RuleJudge, TieredJudge


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'ragaudit' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
