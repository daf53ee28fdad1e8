"""Spread query ids of Arrow, pandas ``str`` and Polars columns: the first-rows check against a search of
the whole column for runs, in one process, interleaved.

    python benchmarks/spread_qids.py                      # 50,000 queries x 100, rows spread, 7 rounds
    python benchmarks/spread_qids.py --queries 2000 --rounds 1 --quick --out /tmp/spread_qids.json

Both sides call the same function (``_tables.coded_ids``, the query ids' step of every Arrow and Polars
input): once with the sample the library uses (16 Ki rows: ids that change at most of those rows are
not searched for runs), once with a sample larger than the column (the whole column searched first, as
before). Only the spread case is timed: for contiguous ids both sides find the same runs, the check
adding one encode of 16 Ki rows. CPU seconds (``time.process_time``), the two sides alternating in
every round after one untimed call each; the medians and their ratio are printed and written to
``benchmarks/results/spread_qids.json``. Timing side by side in one process keeps the ratio honest on
a machine whose speed drifts between processes.
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import _bench, metrics_speed

SIDES = {"first rows": 1 << 14, "whole column": 1 << 62}


def columns(qids: list[str]) -> dict[str, Any]:
    """The query-id column of each form whose step this is, built as the grid builds it."""
    import pandas as pd
    import polars as pl
    import pyarrow as pa

    return {
        "pyarrow": pa.array(qids, pa.string()),
        "pandas 3 str": pd.Series(qids, dtype="str"),
        "string[pyarrow]": pd.Series(qids, dtype="string[pyarrow]"),
        "Polars": pl.Series(qids),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="write spread_qids.quick.json")
    parser.add_argument("--out", default=None, help="the result file (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    from ragaudit.metrics import _tables

    info = _bench.machine_info(("pandas", "pyarrow", "polars"))
    _bench.print_machine(info)
    load_start = os.getloadavg()
    data = metrics_speed.make_cell(args.queries, 100, 5, 0.6, "spread", seed=0, long_ids=True)
    cols = columns(data["qids"].tolist())
    del data
    times: dict[str, dict[str, list[float]]] = {form: {side: [] for side in SIDES} for form in cols}
    for column in cols.values():  # untimed: imports, Arrow's first allocations
        for sample in SIDES.values():
            _tables.coded_ids(column, "qids", sample)
    for r in range(args.rounds):
        for form, column in cols.items():
            for side, sample in (list(SIDES.items()) if r % 2 == 0 else list(SIDES.items())[::-1]):
                gc.collect()
                started = time.process_time()
                _tables.coded_ids(column, "qids", sample)
                times[form][side].append(time.process_time() - started)
    print(f"\n{args.queries:,} queries x 100, rows spread; median CPU s over {args.rounds} rounds:")
    print(f"{'form':16s} {'first rows':>11s} {'whole column':>13s} {'ratio':>6s}")
    results = {}
    for form, sides in times.items():
        med = {side: statistics.median(values) for side, values in sides.items()}
        ratio = med["whole column"] / med["first rows"]
        results[form] = {"median_cpu_s": med, "rounds_cpu_s": sides, "whole_over_first": ratio}
        print(f"{form:16s} {med['first rows']:11.3f} {med['whole column']:13.3f} {ratio:6.2f}")
    load_end = os.getloadavg()
    print(f"load average at start {load_start}, at end {load_end}")
    _bench.write_result("spread_qids", {"machine": info, "queries": args.queries, "rounds": args.rounds,
                                        "load_start": load_start, "load_end": load_end, "results": results},
                        quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
