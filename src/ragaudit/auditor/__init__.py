"""Online judging: the [`Auditor`][ragaudit.Auditor] takes finished turns and judges them off the host's hot path.

Public names only; the worker, turn closing, lifecycle (exit, signals, fork) and sampling are private
modules of this package (or of the floor below, where judges and tracing share them).
"""

from __future__ import annotations

from .._sampling import sampled
from .._turn_metrics import DEFAULT_TURN_MEASURES, turn_metrics
from ._auditor import Auditor, OnJudgement, Submission, SubmitStatus
from ._draining import Upstream
from ._governor import Budget, CostControl
from ._limits import Limits
from ._sessions import Sessions

__all__ = [
    "DEFAULT_TURN_MEASURES",
    "Auditor",
    "Budget",
    "CostControl",
    "Limits",
    "OnJudgement",
    "Sessions",
    "Submission",
    "SubmitStatus",
    "Upstream",
    "sampled",
    "turn_metrics",
]
