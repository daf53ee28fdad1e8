"""``ragaudit metrics``: retrieval metrics of a run file against a qrels file (trec_eval semantics)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import MetricError
from ..metrics import Measure, OnDuplicate, evaluate, parse_measure, read_qrels, read_run

__all__ = ["metrics_command", "render_metrics"]


def metrics_command(args: argparse.Namespace) -> int:
    """The ``ragaudit metrics`` subcommand: print :func:`render_metrics` of the arguments. Returns 0."""
    print(render_metrics(args.run, args.qrels, args.metrics, args.per_query, args.format,
                         relevance_level=args.relevance_level, judged_only=not args.all_queries,
                         on_duplicate="max" if args.keep_duplicates else "error"))
    return 0


def _format_table(rows: list[tuple[str, dict[str, float]]], keys: list[str]) -> list[str]:
    qid_width = max([len("query")] + [len(qid) for qid, _ in rows])
    widths = [max(len(k), 6) for k in keys]
    header = "  ".join(["query".ljust(qid_width)] + [k.rjust(w) for k, w in zip(keys, widths)])
    out = [header, "-" * len(header)]
    for qid, values in rows:
        out.append("  ".join([qid.ljust(qid_width)] + [f"{values[k]:.4f}".rjust(w) for k, w in zip(keys, widths)]))
    return out


def render_metrics(
    run_path: str | os.PathLike[str],
    qrels_path: str | os.PathLike[str],
    measures: Sequence[str | Measure],
    per_query: bool = False,
    fmt: Literal["table", "json"] = "table",
    *,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> str:
    """What ``ragaudit metrics --run RUN --qrels QRELS -m ndcg@10 -m recall@5`` prints.

    Reads both files (TREC or JSONL), evaluates and returns the text to print: an aligned table
    (means, plus one row per query with ``per_query=True``) or a JSON document with ``means``,
    ``queries`` (counts: evaluated, in the run, in the qrels, missing from the run, ignored because
    not in the qrels) and, with ``per_query=True``, ``per_query``. Raises
    :class:`~ragaudit.errors.MetricError` for unreadable files, bad metric names and bad input.
    """
    if fmt not in ("table", "json"):
        raise MetricError(f"fmt must be 'table' or 'json', got {fmt!r}")
    keys = list(dict.fromkeys(m if isinstance(m, str) else str(m) for m in measures))
    for key in keys:
        parse_measure(key)
    run = read_run(run_path)
    qrels = read_qrels(qrels_path)
    per = evaluate(
        run, qrels, keys, True, relevance_level=relevance_level, judged_only=judged_only, on_duplicate=on_duplicate
    )
    means = {key: sum(values[key] for values in per.values()) / len(per) if per else 0.0 for key in keys}
    run_qids = set(np.unique(run.qids).tolist())
    judged = {q for q, docs in qrels.items() if docs}
    counts = {
        "evaluated": len(per),
        "run": len(run_qids),
        "qrels": len(judged),
        "missing_from_run": len(judged - run_qids),
        "not_in_qrels": len(run_qids - judged),
    }
    if fmt == "json":
        doc: dict[str, Any] = {
            "means": means,
            "queries": counts,
            "relevance_level": relevance_level,
            "judged_only": judged_only,
        }
        if per_query:
            doc["per_query"] = per
        return json.dumps(doc, indent=2, sort_keys=False)
    rows = list(per.items()) if per_query else []
    rows.append(("all", means))
    lines = _format_table(rows, keys)
    note = f"{counts['evaluated']} queries evaluated ({counts['run']} in the run, {counts['qrels']} in the qrels"
    if counts["missing_from_run"]:
        counted = "counted as 0" if not judged_only else "not averaged (judged_only=False counts them as 0)"
        note += f"; {counts['missing_from_run']} qrels queries missing from the run, {counted}"
    if counts["not_in_qrels"]:
        note += f"; {counts['not_in_qrels']} run queries not in the qrels, ignored"
    lines.append(note + ")")
    return "\n".join(lines)
