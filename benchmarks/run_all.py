"""Run every benchmark, one after the other (so none disturbs another's timings).

    python benchmarks/run_all.py            # full runs (what BENCHMARKS.md quotes); make bench
    python benchmarks/run_all.py --quick    # smoke runs
    python benchmarks/run_all.py --only overhead judge_throughput

Each benchmark prints its machine description and figures and writes its JSON result under
``benchmarks/results/``; ``--quick`` is passed through to each. Benchmarks not present in this
checkout are skipped. The exit status is non-zero when any benchmark failed to run (a missed
target is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("overhead", "judge_throughput", "judge_costs", "metrics_speed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke runs")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these")
    args = parser.parse_args(argv)
    failed: list[str] = []
    for name in args.only or BENCHMARKS:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"== {name}: not present, skipped", flush=True)
            continue
        command = [sys.executable, str(script), *(["--quick"] if args.quick else [])]
        print(f"\n== {name}: {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(command, cwd=str(HERE.parent))
        print(f"== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
