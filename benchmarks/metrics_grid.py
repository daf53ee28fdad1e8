"""The metrics benchmark's whole grid (issue 31) as one command: every step one run of
``metrics_speed.py`` in processes of its own, its result file in ``benchmarks/results/``.

    python benchmarks/metrics_grid.py                    # every step, in order
    python benchmarks/metrics_grid.py --plan             # print the commands, run nothing
    python benchmarks/metrics_grid.py --only 10k,200k-trec
    python benchmarks/metrics_grid.py --plot             # the ratios per form, from the result files

Steps: 50,000 queries with rows shuffled within each query (every tool, peak memory of each) and
with rows spread through the run (the same data: the same seed, rows permuted); 10,000 queries
(the per-row cost's small end); 200,000 queries in groups of tools, each group in its own run with
its reference (pytrec_eval on dicts; for the TREC file, pytrec_eval's ``parse_run`` + evaluate) in
the same rounds -- every form of a 20 M-row run in one process needs more memory than a 24 GB
machine has -- with 2 rounds. ranx's prebuilt ``Run`` at 200,000 queries comes last, alone with
pytrec_eval (building that ``Run`` takes minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks._metrics_forms import FORMS  # noqa: E402

OURS = [t for t, form in FORMS.items() if form.ours]
PEERS = ["pytrec_eval", "pytrec_trec", "ranx_pandas", "ranx_prebuilt", "ir_measures"]
EVERY = ",".join(["pytrec_eval", "pytrec_trec", *OURS, "ranx_pandas", "ranx_prebuilt", "ir_measures"])
MEASURED = ",".join(["pytrec_eval", "pytrec_trec", *OURS])  # peak memory: ours and the references
BIG = ["--queries", "200000", "--rounds", "2", "--orders", "shuffled"]

STEPS: dict[str, list[str]] = {
    "50k-shuffled": ["--orders", "shuffled", "--tools", EVERY, "--memory-tools", MEASURED],
    "50k-spread": ["--orders", "spread", "--memory", "none", "--tools", EVERY],
    "10k": ["--queries", "10000", "--orders", "shuffled", "--memory", "none", "--tools", EVERY],
    "200k-columns": [*BIG, "--memory", "first", "--tools", "pytrec_eval,numpy,numpy_object,pyarrow"],
    "200k-tables": [*BIG, "--memory", "first", "--tools", "pytrec_eval,pandas_object,pandas,pandas_arrow,polars"],
    "200k-trec": [*BIG, "--memory", "first", "--tools", "pytrec_trec,trec_file"],
    "200k-dicts": [*BIG, "--memory", "first", "--tools", "pytrec_eval,dicts,rows"],
    "200k-ranx": [*BIG, "--memory", "none", "--tools", "pytrec_eval,ranx_prebuilt"],
}
OUT = {"50k-shuffled": "metrics_speed.json", "50k-spread": "metrics_speed_spread.json", "10k": "metrics_speed_10k.json"}


def out_file(step: str) -> Path:
    return RESULTS / OUT.get(step, f"metrics_speed_{step.replace('-', '_')}.json")


def command(step: str) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "metrics_speed.py"), *STEPS[step], "--out", str(out_file(step))]


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run(steps: list[str]) -> int:
    for step in steps:
        started = time.perf_counter()
        print(f"== {step}: {' '.join(command(step)[1:])}\n   {_uptime()}", flush=True)
        done = subprocess.run(command(step), cwd=ROOT)
        print(f"== {step}: exit {done.returncode} after {time.perf_counter() - started:.0f} s; {_uptime()}", flush=True)
        if done.returncode != 0:
            return done.returncode
    return 0


def _ratios(path: Path) -> dict[str, float]:
    """Each of our forms' median speed-up against its reference in the result file's first cell."""
    doc: dict[str, Any] = json.loads(path.read_text())
    speed = doc["cells"][0]["speed"]
    return {tool: r["vs_reference"] for tool, r in speed.items() if FORMS[tool].ours and "vs_reference" in r}


def plot(path: Path) -> Path | None:
    """Bars of each form's speed-up against pytrec_eval: 50,000 queries (shuffled, spread) and
    200,000 (the groups); the targets as marks. None (and a note) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    series = {"50,000 shuffled": _ratios(out_file("50k-shuffled")), "50,000 spread": _ratios(out_file("50k-spread"))}
    big: dict[str, float] = {}
    for step in ("200k-columns", "200k-tables", "200k-trec", "200k-dicts"):
        if out_file(step).exists():
            big.update(_ratios(out_file(step)))
    series["200,000 shuffled"] = big
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(series)
    for k, (label, ratios) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i, tool in enumerate(OURS) if tool in ratios]
        ax.bar(xs, [ratios[t] for t in OURS if t in ratios], width, label=label)
    for i, tool in enumerate(OURS):
        target = FORMS[tool].target
        if target:
            ax.hlines(target, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1)
    ax.set_xticks(range(len(OURS)), [FORMS[t].label.removeprefix("ragaudit, ") for t in OURS], rotation=30, ha="right")
    ax.set_ylabel("× pytrec_eval (wall clock, median)")
    ax.set_title("ragaudit on each input form against pytrec_eval (dashed: the target)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--only", default=None, help="comma-separated steps: " + ", ".join(STEPS))
    parser.add_argument("--plot", action="store_true", help="draw the ratios from the result files")
    args = parser.parse_args(argv)
    steps = list(STEPS) if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps: {unknown}")
    if args.plot:
        return 0 if plot(RESULTS / "metrics_speed_ratios.png") else 1
    if args.plan:
        for step in steps:
            words = [str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c for c in command(step)[1:]]
            print(f"{step}: python {' '.join(words)}")
        return 0
    return run(steps)


if __name__ == "__main__":
    raise SystemExit(main())
