"""ragaudit: make every answer of a RAG pipeline auditable.

One callback (LangChain) or one call (LlamaIndex) gives every answer, in one OpenTelemetry trace, the
documents retrieved for it, the ones it cites, three judge scores with the judge's reason and, where
ground truth is known, retrieval metrics. Importing this package loads no framework and no OTel SDK;
the heavier names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _last_resort
from ._export import BaseExporter, Exporter, ExportResult
from ._lazy import lazy_exports
from .errors import ConfigurationError, JudgeError, MetricError, RagAuditError
from .judges.base import BaseRagJudge, FakeJudge, RagJudge
from .records import (
    AuditRecord,
    Citation,
    DocumentGrade,
    Generation,
    JudgeIdentity,
    Judgement,
    JudgeRequest,
    RagTurn,
    Retrieval,
    RetrievedDoc,
    SentenceVerdict,
    ToolCall,
)
from .sessions import SessionJudgement, SessionRecord, SessionRequest, SessionVerdict

if TYPE_CHECKING:  # for type checkers; `X as X` marks a re-export (tests/test_exports.py checks it matches)
    from . import metrics as metrics
    from . import tracing as tracing
    from ._version import __version__ as __version__
    from .auditor import Auditor as Auditor
    from .auditor import Budget as Budget
    from .auditor import CostControl as CostControl
    from .auditor import Limits as Limits
    from .auditor import Sessions as Sessions
    from .content import ContentPolicy as ContentPolicy
    from .evaluation import EvaluationReport as EvaluationReport
    from .evaluation import assert_rag_quality as assert_rag_quality
    from .evaluation import evaluate_pipeline as evaluate_pipeline
    from .evaluation.calibration import calibrate as calibrate
    from .judges import default_judge as default_judge
    from .judges.chat import ChatRagJudge as ChatRagJudge
    from .judges.combinators.cache import CachedJudge as CachedJudge
    from .judges.combinators.cache import MemoryCache as MemoryCache
    from .judges.combinators.cache import SqliteCache as SqliteCache
    from .judges.combinators.ensemble import ConsensusJudge as ConsensusJudge
    from .judges.combinators.ensemble import JuryJudge as JuryJudge
    from .judges.combinators.tiered import TieredJudge as TieredJudge
    from .judges.correctness import CorrectnessJudge as CorrectnessJudge
    from .judges.cost import CostEstimate as CostEstimate
    from .judges.cost import estimate_cost as estimate_cost
    from .judges.geval import GEvalJudge as GEvalJudge
    from .judges.lexical import LexicalJudge as LexicalJudge
    from .judges.pairwise import PairwiseJudge as PairwiseJudge
    from .judges.rubric import Criterion as Criterion
    from .judges.rubric import RubricJudge as RubricJudge
    from .judges.rules import RuleJudge as RuleJudge

# The heavier names, imported on first use (name -> module, see ragaudit._lazy).
_EXPORTS = {
    "__version__": "._version",
    "Auditor": ".auditor",
    "Budget": ".auditor",
    "CostControl": ".auditor",
    "Limits": ".auditor",
    "Sessions": ".auditor",
    "ContentPolicy": ".content",
    "ChatRagJudge": ".judges",
    "LexicalJudge": ".judges",
    "RubricJudge": ".judges",
    "Criterion": ".judges",
    "CorrectnessJudge": ".judges",
    "RuleJudge": ".judges",
    "TieredJudge": ".judges",
    "CachedJudge": ".judges",
    "MemoryCache": ".judges",
    "SqliteCache": ".judges",
    "GEvalJudge": ".judges",
    "PairwiseJudge": ".judges",
    "JuryJudge": ".judges",
    "ConsensusJudge": ".judges",
    "default_judge": ".judges",
    "estimate_cost": ".judges",
    "CostEstimate": ".judges",
    "calibrate": ".evaluation.calibration",
    "evaluate_pipeline": ".evaluation",
    "EvaluationReport": ".evaluation",
    "assert_rag_quality": ".evaluation",
    "metrics": ".metrics:",
    "tracing": ".tracing:",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AuditRecord",
    "BaseExporter",
    "BaseRagJudge",
    "Citation",
    "ConfigurationError",
    "DocumentGrade",
    "ExportResult",
    "Exporter",
    "FakeJudge",
    "Generation",
    "JudgeError",
    "JudgeIdentity",
    "JudgeRequest",
    "Judgement",
    "MetricError",
    "RagAuditError",
    "RagJudge",
    "RagTurn",
    "Retrieval",
    "RetrievedDoc",
    "SentenceVerdict",
    "SessionJudgement",
    "SessionRecord",
    "SessionRequest",
    "SessionVerdict",
    "ToolCall",
    *_EXPORTS,
]

# Not the usual NullHandler: ragaudit's WARNINGs (a judge failing on every turn) reach stderr while the
# application has configured no logging, and only then (see ragaudit._last_resort).
_last_resort.install(__name__)
