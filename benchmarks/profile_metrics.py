"""Where the retrieval metrics' time goes: CPU seconds per stage, for each column input, one cell.

    python benchmarks/profile_metrics.py                             # 5 %-tied, rank order, 100k x 100
    python benchmarks/profile_metrics.py --ties 0.6 --order shuffled --rounds 5
    python benchmarks/profile_metrics.py --queries 50000 --ties 0.6 --order shuffled --tools dicts,pandas --kernel

The cell is the one ``metrics_speed.py`` builds for the same arguments. Each stage of the
evaluation (``prepare_qrels``, ``prepare_columns`` or ``prepare_dict_run``, ``judged_of``,
``rank_judged``) is wrapped to add up its CPU time (``time.process_time``); the rest of a call is
the measures and the means. ``--kernel`` also splits ``rank_judged`` of a run of columns: hashing
the run's ids, encoding the labelled ids, the ranking -- the blocks (duplicates, lookups, ranks) on
the pure path (``RAGAUDIT_PURE=1``), the C kernel with the id comparisons it asks for (its collect
included) with the speedups -- and collecting.
Tools run interleaved, one call each per round, after one untimed warm-up; printed per round,
then the medians. No cProfile: its per-call cost would inflate the many small numpy calls.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

STAGES = ("prepare_qrels", "prepare_columns", "prepare_dict_run", "judged_of", "rank_judged")
# Inside rank_judged (--kernel): (module, object, attribute) wrapped, and the name printed. The
# ranking is "blocks" on the pure path and "c_kernel" (rank_columns and the id comparisons it asks
# for) with the C speedups; a stage that did not run is left out of the table.
KERNEL_STAGES = {
    "hash_run_ids": ("_docids", "DocIds", "row_hashes"),
    "encode_labelled": ("_kernel", None, "_encode_entries"),
    "blocks": ("_kernel", None, "_column_block"),
    "c_kernel": ("_kernel", None, "_native_column_hits"),
    "collect": ("_kernel", None, "_collect"),
}


def _timed(totals: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.process_time() - started

    return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--ties", type=float, default=0.05)
    parser.add_argument("--order", choices=("rank", "shuffled", "spread"), default="rank")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tools", default="numpy,pandas,pyarrow")
    parser.add_argument("--kernel", action="store_true", help="split rank_judged of column runs too")
    parser.add_argument("--long-ids", action="store_true", help="32-character doc ids, as metrics_grid.py's cells")
    args = parser.parse_args(argv)
    from benchmarks import metrics_speed

    from ragaudit.metrics import _docids, _kernel, retrieval

    tools = [t for t in args.tools.split(",") if t]
    data = metrics_speed.make_cell(args.queries, args.depth, 5, args.ties, args.order, seed=0, long_ids=args.long_ids)
    call = metrics_speed.calls(metrics_speed.build_inputs(data, tools), tools)
    totals: dict[str, float] = {}
    for stage in STAGES:  # the names retrieval.py calls them by
        setattr(retrieval, stage, _timed(totals, stage, getattr(retrieval, stage)))
    stages: tuple[str, ...] = STAGES
    if args.kernel:
        modules = {"_docids": _docids, "_kernel": _kernel}
        for stage, (module, owner, name) in KERNEL_STAGES.items():
            where = modules[module] if owner is None else getattr(modules[module], owner)
            setattr(where, name, _timed(totals, stage, getattr(where, name)))
        stages = STAGES + tuple(KERNEL_STAGES)
    for fn in call.values():
        fn()
    rows: dict[str, list[dict[str, float]]] = {tool: [] for tool in tools}
    for r in range(args.rounds):
        for tool in tools[r % len(tools) :] + tools[: r % len(tools)]:
            gc.collect()
            totals.clear()
            started = time.process_time()
            call[tool]()
            row = {"total": time.process_time() - started, **{s: totals.get(s, 0.0) for s in stages}}
            rows[tool].append(row)
            print(f"round {r} {tool:8s} " + " ".join(f"{k} {v:.4f}" for k, v in row.items()), flush=True)
    print(f"\nmedian CPU seconds, {args.queries:,} queries x {args.depth}, ties {args.ties:.0%}, rows {args.order}:")
    # A stage no tool went through (the dict run's preparation, for columns) is left out.
    stages = tuple(s for s in stages if any(row[s] > 0 for tool in tools for row in rows[tool]))
    print(f"{'tool':8s} " + " ".join(f"{k:>16s}" for k in ("total", *stages, "rest")))
    for tool in tools:
        med = {k: statistics.median(row[k] for row in rows[tool]) for k in ("total", *stages)}
        rest = med["total"] - sum(med.get(s, 0.0) for s in STAGES)  # the kernel's parts are inside rank_judged
        print(f"{tool:8s} " + " ".join(f"{v:16.4f}" for v in (*med.values(), rest)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
