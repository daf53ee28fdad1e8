"""``ragaudit metrics``: retrieval metrics of a run file against a qrels file (trec_eval semantics)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import MetricError
from ..metrics import Measure, OnDuplicate, Ties, evaluate, parse_measure, read_qrels, read_run

__all__ = ["metrics_command", "render_metrics"]

Format = Literal["table", "json", "trec"]


def metrics_command(args: argparse.Namespace) -> int:
    """The ``ragaudit metrics`` subcommand: print `render_metrics` of the arguments. Returns 0."""
    text = render_metrics(
        args.run, args.qrels, args.metrics, args.per_query, args.format,
        relevance_level=args.relevance_level, all_queries=args.all_queries,
        on_duplicate="max" if args.keep_duplicates else "error", ties=args.ties,
        max_docs_per_query=args.max_docs_per_query, judged_docs_only=args.judged_docs_only,
        summary=not args.no_summary,
    )
    if text:
        print(text)
    return 0


def _cell(measure: Measure, value: Any) -> str:
    if value is None:
        return ""
    if measure.entry.kind == "string":
        return f"'{value}'"
    if measure.entry.kind == "count":
        return str(round(value))
    return f"{value:.4f}"


def _format_table(rows: list[tuple[str, dict[str, Any]]], keys: list[tuple[str, Measure]]) -> list[str]:
    cells = [(qid, [_cell(m, values.get(key)) for key, m in keys]) for qid, values in rows]
    qid_width = max([len("query")] + [len(qid) for qid, _ in rows])
    widths = [max([len(key), 6] + [len(row[i]) for _, row in cells]) for i, (key, _) in enumerate(keys)]
    header = "  ".join(["query".ljust(qid_width)] + [key.rjust(w) for (key, _), w in zip(keys, widths)])
    out = [header, "-" * len(header)]
    for qid, row in cells:
        out.append("  ".join([qid.ljust(qid_width)] + [c.rjust(w) for c, w in zip(row, widths)]))
    return out


def _format_trec(
    per: dict[str, dict[str, Any]], means: dict[str, float], keys: list[tuple[str, Measure]], per_query: bool
) -> list[str]:
    """trec_eval's own layout (``%-22s\\t%s\\t%6.4f``; counts as integers, relstring quoted; gm_map,
    as in trec_eval, in the summary only)."""
    per_keys = [(key, m) for key, m in keys if m.entry.aggregate != "geometric"]
    lines = [f"{key:<22}\t{qid}\t{_cell(m, values[key])}" for qid, values in per.items() for key, m in per_keys]
    if not per_query:
        lines = []
    return lines + [f"{key:<22}\tall\t{_cell(m, means[key])}" for key, m in keys if key in means]


def _counts(run_qids: set[str], qrels: dict[str, dict[str, int]], evaluated: int) -> dict[str, int]:
    judged = {q for q, docs in qrels.items() if docs}
    return {
        "evaluated": evaluated,
        "run": len(run_qids),
        "qrels": len(judged),
        "missing_from_run": len(judged - run_qids),
        "not_in_qrels": len(run_qids - judged),
    }


def _note(counts: dict[str, int], all_queries: bool) -> str:
    note = f"{counts['evaluated']} queries evaluated ({counts['run']} in the run, {counts['qrels']} in the qrels"
    if counts["missing_from_run"]:
        counted = "counted as empty rankings" if all_queries else "not averaged (--all-queries counts them as 0)"
        note += f"; {counts['missing_from_run']} qrels queries missing from the run, {counted}"
    if counts["not_in_qrels"]:
        note += f"; {counts['not_in_qrels']} run queries not in the qrels, ignored"
    return note + ")"


def render_metrics(
    run_path: str | os.PathLike[str],
    qrels_path: str | os.PathLike[str],
    measures: Sequence[str | Measure],
    per_query: bool = False,
    fmt: Format = "table",
    *,
    relevance_level: int = 1,
    all_queries: bool = False,
    on_duplicate: OnDuplicate = "error",
    ties: Ties = "trec_eval",
    max_docs_per_query: int | None = None,
    judged_docs_only: bool = False,
    summary: bool = True,
) -> str:
    """What ``ragaudit metrics --run RUN --qrels QRELS -m ndcg@10 -m recall@5`` prints.

    Reads both files (TREC or JSONL), evaluates with [`evaluate`][ragaudit.metrics.evaluate]'s options
    (trec_eval's ``-l``, ``-c`` = *all_queries*, ``-M``, ``-J``, and *ties*) and returns the text to
    print: an aligned table (summaries, plus one row per query with ``per_query=True``), trec_eval's
    own layout (``fmt="trec"``: ``measure<TAB>qid<TAB>value`` lines, the summary's qid ``all``), or a
    JSON document with ``means``, ``queries`` (counts: evaluated, in the run, in the qrels, missing
    from the run, ignored because not in the qrels) and, with ``per_query=True``, ``per_query``.
    ``summary=False`` is trec_eval's ``-n``: no summary line (JSON: no ``means``). ``relstring``
    has no summary. Raises
    [`MetricError`][ragaudit.MetricError] for unreadable files, bad metric names and bad input.
    """
    if fmt not in ("table", "json", "trec"):
        raise MetricError(f"fmt must be 'table', 'json' or 'trec', got {fmt!r}")
    keys = [(key, parse_measure(key)) for key in dict.fromkeys(m if isinstance(m, str) else str(m) for m in measures)]
    run = read_run(run_path)
    qrels = read_qrels(qrels_path)
    per = evaluate(
        run, qrels, [key for key, _ in keys], True, relevance_level, all_queries=all_queries,
        on_duplicate=on_duplicate, ties=ties, max_docs_per_query=max_docs_per_query,
        judged_docs_only=judged_docs_only,
    )
    means = {
        key: m.aggregate([values[key] for values in per.values()])
        for key, m in keys
        if m.entry.aggregate != "none"
    } if summary else {}
    counts = _counts({q.decode() if isinstance(q, bytes) else str(q) for q in np.unique(run.qids).tolist()}, qrels,
                     len(per))
    if fmt == "json":
        doc: dict[str, Any] = {"queries": counts, "relevance_level": relevance_level, "all_queries": all_queries,
                               "ties": ties}
        if summary:
            doc = {"means": means, **doc}
        if per_query:
            doc["per_query"] = per
        return json.dumps(doc, indent=2, sort_keys=False)
    if fmt == "trec":
        return "\n".join(_format_trec(per, means, keys, per_query))
    rows = list(per.items()) if per_query else []
    if summary:
        rows.append(("all", means))
    return "\n".join([*_format_table(rows, keys), _note(counts, all_queries)])
