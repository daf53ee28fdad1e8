"""Spread query rows grouped by the C speedups (``metrics/_groups.py``) against the path before them,
whole evaluations, in one process, interleaved; and nested dicts built from spread rows, their
scores read by the speedups (``dict_scores``) against ``np.fromiter``.

    python benchmarks/spread_groups.py                    # 50,000 queries x 100, rows spread, 5 rounds
    python benchmarks/spread_groups.py --queries 2000 --rounds 1 --quick --out /tmp/spread_groups.json

Every form whose spread query ids the speedups group is evaluated on the grid's spread cell (tie-heavy,
32-character doc ids, a query's rows anywhere in the run) twice a round: once as shipped, once with the
five ``_groups`` calls answering None -- which is what they answer without the speedups, so the ids
then take the path they took before (pyarrow's hash table and a packed sort of (code, row), the
scores and doc-id hashes gathered through the row order; every other speedup still on). Nested
dicts are grouped by query already; a run of them built from spread rows has its score objects
spread through the heap, and its "before" side reads them by ``np.fromiter`` (``dict_scores``
answering None) instead of with each value fetched ahead. The same contiguous cell ("shuffled": a
query's rows together) is timed as shipped beside them, so each form's spread / contiguous ratio
comes from the same rounds. CPU seconds (``time.process_time``), the sides' order rotated every round
after one untimed call each; the medians are printed and written to
``benchmarks/results/spread_groups.json``. One process keeps the ratios honest on a machine whose
speed drifts between processes.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import _bench, metrics_speed

# The forms whose spread query ids _groups reads: Python strings, numpy U, Arrow offsets, Polars views.
# And nested dicts, whose scores dict_scores reads.
FORMS = ["rows", "numpy", "numpy_object", "pandas_object", "pandas", "pandas_arrow", "pyarrow", "polars", "dicts"]
SIDES = ("spread, grouped in C", "spread, before", "contiguous")


@contextmanager
def _groups_off() -> Iterator[None]:
    """The ``_groups`` functions, where the library calls them, and ``dict_scores`` answering None
    for the block."""
    from ragaudit.metrics import _fast, _inputs, _tables

    names = [(_inputs, "string_groups"), (_inputs, "row_groups"), (_inputs, "fixed_groups"), (_tables, "arrow_groups"),
             (_tables, "view_groups"), (_fast.speedups, "dict_scores")]
    kept = [(module, name, getattr(module, name)) for module, name in names]
    try:
        for module, name in names:
            setattr(module, name, lambda *args, **kwargs: None)
        yield
    finally:
        for module, name, fn in kept:
            setattr(module, name, fn)


def _timed(call: Callable[[], Any], off: bool) -> tuple[float, Any]:
    gc.collect()
    if off:
        with _groups_off():
            started = time.process_time()
            out = call()
            return time.process_time() - started, out
    started = time.process_time()
    out = call()
    return time.process_time() - started, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="write spread_groups.quick.json")
    parser.add_argument("--out", default=None, help="the result file (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    from ragaudit.metrics import _fast

    if _fast.speedups is None:
        raise SystemExit("the C speedups are not built (or RAGAUDIT_PURE=1): nothing to compare")
    info = _bench.machine_info(("pandas", "pyarrow", "polars"))
    _bench.print_machine(info)
    load_start = os.getloadavg()
    cells = {}
    for order in ("spread", "shuffled"):
        data = metrics_speed.make_cell(args.queries, 100, 5, 0.6, order, seed=0, long_ids=True)
        cells[order] = metrics_speed.calls(metrics_speed.build_inputs(data, FORMS), FORMS)
        del data
    plan = {SIDES[0]: ("spread", False), SIDES[1]: ("spread", True), SIDES[2]: ("shuffled", False)}
    exact: dict[str, bool] = {}
    for form in FORMS:  # untimed: imports, first allocations; the two spread sides must agree
        got = {side: _timed(cells[order][form], off)[1] for side, (order, off) in plan.items()}
        exact[form] = got[SIDES[0]] == got[SIDES[1]]
    times: dict[str, dict[str, list[float]]] = {form: {side: [] for side in SIDES} for form in FORMS}
    for r in range(args.rounds):
        for form in FORMS:
            sides = list(SIDES[r % len(SIDES):] + SIDES[: r % len(SIDES)])
            for side in sides:
                order, off = plan[side]
                times[form][side].append(_timed(cells[order][form], off)[0])
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{args.queries:,} queries x 100; median CPU s over {args.rounds} rounds:")
    print(f"{'form':14s} {'grouped in C':>13s} {'before':>8s} {'contiguous':>11s} {'before/C':>9s} "
          f"{'spread/contig':>14s} {'exact':>6s}")
    results = {}
    for form, sides in times.items():
        med = {side: statistics.median(values) for side, values in sides.items()}
        speedup = med[SIDES[1]] / med[SIDES[0]]
        penalty = med[SIDES[0]] / med[SIDES[2]]
        before_penalty = med[SIDES[1]] / med[SIDES[2]]
        results[form] = {"median_cpu_s": med, "rounds_cpu_s": sides, "before_over_grouped": speedup,
                         "spread_over_contiguous": penalty, "before_spread_over_contiguous": before_penalty,
                         "same_values": exact[form]}
        print(f"{form:14s} {med[SIDES[0]]:13.3f} {med[SIDES[1]]:8.3f} {med[SIDES[2]]:11.3f} {speedup:9.2f} "
              f"{penalty:14.2f} {exact[form]!s:>6s}")
    load_end = os.getloadavg()
    print(f"load average at start {load_start}, at end {load_end}")
    _bench.write_result("spread_groups", {"machine": info, "queries": args.queries, "rounds": args.rounds,
                                          "load_start": load_start, "load_end": load_end, "results": results},
                        quick=args.quick, out=args.out)
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
