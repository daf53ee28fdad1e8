"""Offline retrieval metrics with trec_eval semantics: did we retrieve the right ids?

```python
from ragaudit import metrics
metrics.evaluate(run, qrels, ["ndcg@10", "recall@5", "mrr@10", "map"])
# run: {qid: {docid: score}}, qrels: {qid: {docid: int}} -> {"ndcg@10": 0.61, ...}
metrics.evaluate_columns(qids, docids, scores, qrels, ["ndcg@10"])   # numpy / pandas / pyarrow columns
metrics.evaluate({"q1": ["d3", "d1", "d7"]}, qrels, ["P@3"])   # rank-only run: doc ids, best first
metrics.score_ranking(["d3", "d1", "d7"], {"d1": 1}, ["recall@3", "mrr@3"])  # one turn, already ranked
metrics.evaluate(metrics.read_run("run.trec"), metrics.read_qrels("qrels.txt"), ["P@5"])
```

Numbers match ``trec_eval`` 10, checked against its own test suite (scores compared as doubles, ties
broken by doc id descending, P@K divides by K, NDCG with the raw label as gain ...); ``ties=
"pytrec_eval"`` compares scores as 32-bit floats, as pytrec_eval and trec_eval <= 9.0.8 do.
trec_eval's ``-l``, ``-c``, ``-M``, ``-J`` are ``relevance_level``, ``all_queries``,
``max_docs_per_query`` and ``judged_docs_only``.
`ragaudit.metrics.retrieval` documents every rule, `ragaudit.metrics.measures` every
measure (one declared entry each, its formula written once for both batch and single-query use).
Imports numpy only: no JIT, no pandas (pandas, Polars and pyarrow tables are accepted when the caller
has them). pyarrow, when installed, is imported for two jobs it does in C: converting a large column
of Python strings and reading a TREC run file.
"""

from __future__ import annotations

from .io import read_qrels, read_run
from .measures import MEASURE_NAMES, Measure, parse_measure
from .retrieval import OnDuplicate, Run, Ties, evaluate, evaluate_columns, score_ranking

__all__ = [
    "MEASURE_NAMES",
    "Measure",
    "OnDuplicate",
    "Run",
    "Ties",
    "evaluate",
    "evaluate_columns",
    "parse_measure",
    "read_qrels",
    "read_run",
    "score_ranking",
]
