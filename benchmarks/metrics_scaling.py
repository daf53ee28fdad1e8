"""Cost per row across sizes, each form in one process (issue 31's linear scaling).

    python benchmarks/metrics_scaling.py                  # every form, 10k / 50k / 200k queries x 100
    python benchmarks/metrics_scaling.py --tools numpy,pytrec_eval --sizes 1000,4000 --rounds 1 --quick \
        --out /tmp/metrics_scaling.json

The grid (``metrics_grid.py``) times each size in a process of its own, beside other tools; on this
machine what else a process holds moves a tool's per-row cost between steps by up to half, and
pytrec_eval's with it. Here each tool gets one process (a child of this one) that builds the grid's
cell (tie-heavy, rows shuffled within each query, 32-character doc ids) at every size, then times
the sizes interleaved, their order rotated every round, after one untimed call each: a size's
per-row cost then differs from another's by the size, not by the process. CPU seconds
(``time.process_time``), the median over the rounds, divided by the rows (queries x 100). Written to
``benchmarks/results/metrics_scaling.json``. ``numpy_read_once`` is no tool: one pass over every byte
of the numpy U columns, for how reading an input grows per row in the same process (a small cell
may stay in the processor's cache between calls; a 20 M-row one comes from memory every time).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import _bench, metrics_speed
from benchmarks._metrics_forms import FORMS

DEPTH = 100
# Not a tool: one pass over every byte of the numpy U columns (qids, doc ids, scores), the least any
# tool reading that input spends -- what its per-row cost does across sizes is the memory's doing.
READ_ONCE = "numpy_read_once"
DEFAULT_TOOLS = ["pytrec_eval", *(t for t, form in FORMS.items() if form.ours and not form.pure), READ_ONCE]


def _read_once(columns: tuple[np.ndarray, ...]) -> Callable[[], Any]:
    words = [np.ascontiguousarray(c).view(np.uint32) for c in columns]  # U and float64 rows: whole words
    return lambda: [np.bitwise_or.reduce(w) for w in words]


def child(tool: str, sizes: list[int], rounds: int) -> dict[str, Any]:
    """One tool at every size in this process: the median CPU seconds of each size."""
    calls: dict[int, Callable[[], Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ragaudit-scaling-") as tmp:
        for q in sizes:
            data = metrics_speed.make_cell(q, DEPTH, 5, 0.6, "shuffled", seed=0, long_ids=True)
            place = Path(tmp) / str(q)
            place.mkdir()
            if tool == READ_ONCE:
                calls[q] = _read_once((data["qids"], data["docids"], data["scores"]))
            else:
                calls[q] = metrics_speed.calls(metrics_speed.build_inputs(data, [tool], place), [tool])[tool]
            del data
        for q in sizes:  # untimed: imports, first allocations, ranx's compilation
            calls[q]()
        times: dict[int, list[float]] = {q: [] for q in sizes}
        for r in range(rounds):
            for q in sizes[r % len(sizes):] + sizes[: r % len(sizes)]:
                gc.collect()
                started = time.process_time()
                calls[q]()
                times[q].append(time.process_time() - started)
    return {str(q): {"cpu_s": times[q], "median_cpu_s": statistics.median(times[q]),
                     "ns_per_row": statistics.median(times[q]) / (q * DEPTH) * 1e9} for q in sizes}


def _memory() -> dict[str, str | None]:
    """What decides the cost of fresh memory here: the kernel's transparent huge pages (numpy asks
    for them, madvise, for its large arrays unless NUMPY_MADVISE_HUGEPAGE=0)."""
    out: dict[str, str | None] = {"NUMPY_MADVISE_HUGEPAGE": os.environ.get("NUMPY_MADVISE_HUGEPAGE")}
    for name in ("enabled", "defrag"):
        try:
            setting = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text()
            out[f"transparent_hugepage.{name}"] = setting.strip()
        except OSError:
            out[f"transparent_hugepage.{name}"] = None
    return out


def _short(queries: int) -> str:
    return f"{queries // 1000}k" if queries % 1000 == 0 else str(queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", default=",".join(DEFAULT_TOOLS))
    parser.add_argument("--sizes", default="10000,50000,200000", help="queries, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="write metrics_scaling.quick.json")
    parser.add_argument("--out", default=None, help="the result file (default: benchmarks/results/)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.child:
        Path(args.result).write_text(json.dumps(child(args.child, sizes, args.rounds)))
        return 0
    tools = args.tools.split(",")
    unknown = [t for t in tools if t not in FORMS and t != READ_ONCE]
    if unknown:
        parser.error(f"unknown tools: {', '.join(unknown)} (known: {', '.join([*FORMS, READ_ONCE])})")
    info = _bench.machine_info(("pandas", "pyarrow", "polars", "pytrec_eval"))
    _bench.print_machine(info)
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragaudit-scaling-") as tmp:
        for tool in tools:
            result = Path(tmp) / f"{tool}.json"
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, __file__, "--child", tool, "--sizes", args.sizes, "--rounds", str(args.rounds),
                 "--result", str(result)], capture_output=True, text=True, timeout=3600,
            )
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()
                results[tool] = {"error": tail[-1] if tail else f"exit {done.returncode}"}
                print(f"{tool}: {results[tool]['error']}", flush=True)
                continue
            results[tool] = json.loads(result.read_text())
            per_row = "  ".join(f"{q:,}: {results[tool][str(q)]['ns_per_row']:.0f} ns" for q in sizes)
            print(f"{tool:14s} {per_row}  ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\nCPU ns per row, median of {args.rounds} rounds; each tool's sizes in one process:")
    pairs = [*pairwise(sizes), (sizes[0], sizes[-1])]
    print(f"{'tool':14s} " + " ".join(f"{q:>9,}" for q in sizes) + "  " +
          " ".join(f"{f'{_short(b)}/{_short(a)}':>9s}" for a, b in pairs))
    for tool, sized in results.items():
        if "error" in sized:
            continue
        ns = [sized[str(q)]["ns_per_row"] for q in sizes]
        steps = [b / a for a, b in pairwise(ns)] + [ns[-1] / ns[0]]
        print(f"{tool:14s} " + " ".join(f"{x:9.0f}" for x in ns) + "  " + " ".join(f"{x:9.2f}" for x in steps))
    load_end = os.getloadavg()
    print(f"load average at start {load_start}, at end {load_end}")
    _bench.write_result("metrics_scaling", {"machine": info, "sizes": sizes, "depth": DEPTH, "rounds": args.rounds,
                                            "load_start": load_start, "load_end": load_end, "memory": _memory(),
                                            "results": results},
                        quick=args.quick, out=args.out)
    return 0 if not any("error" in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
