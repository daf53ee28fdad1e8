"""Batch evaluation: run a dataset through a pipeline, judge and score every row, report and gate.

```python
from ragaudit.evaluation import evaluate_pipeline, assert_rag_quality
report = evaluate_pipeline("questions.jsonl", chain, metrics=["recall@5", "ndcg@10"])
report.to_html("report.html"); print(report.to_markdown())
assert_rag_quality(report, faithfulness=0.8, recall_at_5=0.9)   # in a pytest test
```
"""

from __future__ import annotations

from .audit_log import report_from_audit_log
from .report import (
    DIAGNOSES,
    Diagnosis,
    EvaluationReport,
    RowResult,
    Summary,
    assert_rag_quality,
    diagnose,
    summarize,
)
from .runner import DEFAULT_METRICS, DatasetRow, evaluate_pipeline, load_dataset

__all__ = [
    "DEFAULT_METRICS",
    "DIAGNOSES",
    "DatasetRow",
    "Diagnosis",
    "EvaluationReport",
    "RowResult",
    "Summary",
    "assert_rag_quality",
    "diagnose",
    "evaluate_pipeline",
    "load_dataset",
    "report_from_audit_log",
    "summarize",
]
