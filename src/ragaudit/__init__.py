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
from .records import Citation, Generation, Judgement, JudgeRequest, RagTurn, Retrieval, RetrievedDoc

__version__ = "0.1.0"

__all__ = [
    "Auditor",
    "BaseRagJudge",
    "ChatRagJudge",
    "Citation",
    "ConfigurationError",
    "FakeJudge",
    "Generation",
    "JudgeError",
    "JudgeRequest",
    "Judgement",
    "LexicalJudge",
    "MetricError",
    "RagAuditError",
    "RagJudge",
    "RagTurn",
    "Retrieval",
    "RetrievedDoc",
    "__version__",
    "default_judge",
    "metrics",
    "tracing",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "Auditor": ("ragaudit.online", "Auditor"),
    "ChatRagJudge": ("ragaudit.judges.chat", "ChatRagJudge"),
    "LexicalJudge": ("ragaudit.judges.lexical", "LexicalJudge"),
    "default_judge": ("ragaudit.judges", "default_judge"),
    "metrics": ("ragaudit.metrics", None),
    "tracing": ("ragaudit.tracing", None),
}

if TYPE_CHECKING:
    from . import metrics, tracing
    from .judges import default_judge
    from .judges.chat import ChatRagJudge
    from .judges.lexical import LexicalJudge
    from .online import Auditor


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
