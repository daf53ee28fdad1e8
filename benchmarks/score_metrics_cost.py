"""What recording one AuditRecord as score metrics costs: CPU per record of ``ScoreMetricsExporter.export``.

    python benchmarks/score_metrics_cost.py                                 # this checkout
    python benchmarks/score_metrics_cost.py --root /path/to/other/checkout  # another version of src/

The exporter runs on the Auditor's export thread, never the host's; ``benchmarks/overhead.py
--configs ragaudit ragaudit-metrics`` measures what it does to the host's calls. This one measures the
exporter alone, finely enough to see it: the calling thread's CPU time (``time.thread_time_ns``) per
record, best and median of R repeats of N records, against the global provider (the OTel API's
no-op: what an app without a metrics SDK pays) and against an SDK ``MeterProvider`` with an
``InMemoryMetricReader`` (collection is the reader's, off this path). Two records: *lean* (three judge
scores, what overhead.py's FakeJudge gives) and *full audit* (three scores, citation precision and
recall, four sentence verdicts, two citation checks); in batches of 1 and of 32 records (the export
worker hands over batches).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._bench import machine_info, print_machine, write_result


def _records() -> dict[str, Any]:
    from ragaudit import Judgement, RagTurn, RetrievedDoc, SentenceVerdict
    from ragaudit.content import ContentPolicy
    from ragaudit.records import AuditRecord, CitationCheck, TurnAudit

    docs = (RetrievedDoc("d1", "Electronics can be returned within 30 days.", rank=1),
            RetrievedDoc("d2", "Standard shipping takes three to five days.", rank=2))
    turn = RagTurn(turn_id="t1", query="How long is the return window?", answer="30 days [1].", documents=docs,
                   model="gpt-app", metadata={"run_name": "RunnableSequence", "prompt_version": "v3"})

    def judgement(*sentences: SentenceVerdict) -> Judgement:
        return Judgement(faithfulness=1.0, context_relevance=0.9, answer_relevance=0.8, judge="fake",
                         sentences=sentences)

    sentences = (SentenceVerdict(1, "Sentence 1 [1].", "supported", (1,), ("d1",)),
                 SentenceVerdict(2, "Sentence 2 [1].", "supported", (1,), ("d1",)),
                 SentenceVerdict(3, "Sentence 3 [1].", "unsupported", (1,), ("d1",)),
                 SentenceVerdict(4, "Sentence 4 [1].", "contradicted", (1,), ("d1",)))
    audit = TurnAudit(metrics=None, citation_checks=(CitationCheck(1, "d1", 1, "[1]", True, "supported"),
                                                     CitationCheck(3, "d1", 1, "[1]", False, "unsupported")),
                      citation_precision=0.5, citation_recall=0.5, unsupported=2, sentences_missing=0,
                      grades_missing=0)
    return {"lean": AuditRecord(turn, ContentPolicy(), judgement=judgement()),
            "full audit": AuditRecord(turn, ContentPolicy(), judgement=judgement(*sentences), audit=audit)}


def _per_record_us(exporter: Any, record: Any, batch: int, n: int, repeats: int) -> dict[str, float]:
    records = [record] * batch
    for _ in range(max(1, 200 // batch)):
        exporter.export(records)
    batches = max(1, n // batch)
    runs = []
    for _ in range(repeats):
        gc.collect()
        c0 = time.thread_time_ns()
        for _ in range(batches):
            exporter.export(records)
        runs.append((time.thread_time_ns() - c0) / (batches * batch) / 1000.0)
    return {"best_us": min(runs), "median_us": statistics.median(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                        help="checkout whose src/ragaudit is measured (default: this one)")
    parser.add_argument("-n", type=int, default=10_000, help="records per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 records, 3 repeats")
    parser.add_argument("--out", help="result file (default benchmarks/results/score_metrics_cost[.quick].json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 500, 3
    root = str(Path(args.root).resolve())
    sys.path.insert(0, f"{root}/src")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ragaudit.tracing.score_metrics import ScoreMetricsExporter

    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for shape, record in _records().items():
        for batch in (1, 32):
            row: dict[str, Any] = {}
            for provider_name in ("no-op (global)", "SDK MeterProvider"):
                provider = MeterProvider(metric_readers=[InMemoryMetricReader()]) \
                    if provider_name.startswith("SDK") else None
                exporter = ScoreMetricsExporter(provider, judge_name="fake")
                row[provider_name] = _per_record_us(exporter, record, batch, args.n, args.repeats)
            row["sdk_minus_noop_best_us"] = row["SDK MeterProvider"]["best_us"] - row["no-op (global)"]["best_us"]
            results[f"{shape}, batch {batch}"] = row
            print(f"  {shape:<10} batch {batch:>2}: no-op {row['no-op (global)']['best_us']:6.1f} us/record, "
                  f"SDK {row['SDK MeterProvider']['best_us']:6.1f} us/record (best of {args.repeats}; medians "
                  f"{row['no-op (global)']['median_us']:.1f} / {row['SDK MeterProvider']['median_us']:.1f})")
    write_result("score_metrics_cost", {"machine": info, "root": root, "load_average": {
        "before": load_before, "after": os.getloadavg()}, "n": args.n, "repeats": args.repeats,
        "results": results}, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
