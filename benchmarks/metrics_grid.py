"""The metrics benchmark's whole grid (issue 31) as one command: every step one run of
``metrics_speed.py`` in processes of its own, its result file in ``benchmarks/results/``.

    python benchmarks/metrics_grid.py                    # every step, in order
    python benchmarks/metrics_grid.py --plan             # print the commands, run nothing
    python benchmarks/metrics_grid.py --only 10k,200k-trec
    python benchmarks/metrics_grid.py --plot             # the ratios per form, from the result files
    python benchmarks/metrics_grid.py --summary          # BENCHMARKS.md's comparison tables, from them

Steps: 50,000 queries with rows shuffled within each query (every tool, peak memory of each) and
with rows spread through the run (the same data: the same seed, rows permuted); 10,000 queries
(the per-row cost's small end); 200,000 queries in groups of tools, each group in its own run with
its reference (pytrec_eval on dicts; for the TREC file, pytrec_eval's ``parse_run`` + evaluate) in
the same rounds -- every form of a 20 M-row run in one process needs more memory than a 24 GB
machine has -- with 3 rounds. ranx's prebuilt ``Run`` at 200,000 queries comes last, alone with
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

OURS = [t for t, form in FORMS.items() if form.ours and not form.pure]
PEERS = ["pytrec_eval", "pytrec_trec", "ranx_pandas", "ranx_prebuilt", "ir_measures"]
EVERY = ",".join(["pytrec_eval", "pytrec_trec", *OURS, "ranx_pandas", "ranx_prebuilt", "ir_measures"])
MEASURED = ",".join(["pytrec_eval", "pytrec_trec", *OURS])  # peak memory: ours and the references
# The spread and 10k steps leave out the two slowest peers (ranx from a DataFrame, ir_measures: 16 and
# 6 s a call at 50,000 queries), which the shuffled step measures: the grid has to fit its window.
LEAN = ",".join(["pytrec_eval", "pytrec_trec", *OURS, "ranx_prebuilt"])
BIG = ["--queries", "200000", "--rounds", "3", "--orders", "shuffled"]
# The forms the C speedups read (Python objects, numpy U), each beside its pure twin.
PURE = ",".join(f"{t},{t}_pure" for t in ("rows", "numpy", "numpy_object", "pandas_object", "polars"))

# The 200,000-query DataFrame steps: (step name, tool).
TABLES = [("pandas-object", "pandas_object"), ("pandas-str", "pandas"), ("pandas-arrow", "pandas_arrow"),
          ("polars", "polars")]

STEPS: dict[str, list[str]] = {
    "50k-shuffled": ["--orders", "shuffled", "--tools", EVERY, "--memory-tools", MEASURED],
    "50k-spread": ["--orders", "spread", "--memory", "none", "--tools", LEAN],
    # Nine rounds at 10k (a round is about 4 s): our calls take 0.07-0.1 s there, and with three
    # rounds one slow call moved a form's median by a third (pyarrow: 0.071, 0.098, 0.112 s).
    "10k": ["--queries", "10000", "--rounds", "9", "--orders", "shuffled", "--memory", "none", "--tools", LEAN],
    "200k-dicts": [*BIG, "--memory", "first", "--tools", "pytrec_eval,dicts,rows"],
    "200k-trec": [*BIG, "--memory", "first", "--tools", "pytrec_trec,trec_file"],
    "200k-columns": [*BIG, "--memory", "first", "--tools", "pytrec_eval,numpy,numpy_object,pyarrow"],
    # One DataFrame form a process: with all four built in one (at 7377af2), everything in it --
    # pytrec_eval too, 11.0 s against 8.2 s in the columns' process -- cost a third more per row.
    # pytrec_eval's peak memory is measured in the steps above.
    **{f"200k-{name}": [*BIG, "--memory", "first", "--memory-tools", tool, "--tools", f"pytrec_eval,{tool}"]
       for name, tool in TABLES},
    "200k-ranx": [*BIG, "--memory", "none", "--tools", "pytrec_eval,ranx_prebuilt"],
    # The C speedups against the pure path, in the same process and rounds (with pytrec_eval).
    "50k-pure": ["--orders", "shuffled", "--memory-tools", PURE, "--tools", f"pytrec_eval,{PURE}"],
}
OUT = {"50k-shuffled": "metrics_speed.json", "50k-spread": "metrics_speed_spread.json", "10k": "metrics_speed_10k.json",
       "50k-pure": "metrics_speed_pure.json"}


def out_file(step: str) -> Path:
    return RESULTS / OUT.get(step, f"metrics_speed_{step.replace('-', '_')}.json")


def command(step: str) -> list[str]:
    # Paths relative to the checkout (the step runs there): the command is recorded in the result
    # JSON, which is committed, and says nothing of the machine it ran on.
    script = Path("benchmarks") / "metrics_speed.py"
    return [sys.executable, str(script), *STEPS[step], "--out", str(out_file(step).relative_to(ROOT))]


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
    for step in BIG_STEPS:
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
    ax.set_ylabel("× reference (wall clock, median)")
    ax.set_title("ragaudit on each input form against pytrec_eval (TREC file: parse_run + evaluate); dashed: target")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
    return path


def _cells(steps: list[str]) -> list[dict[str, Any]]:
    """The first cell of each step's result file that exists (a 200,000-query group's, each)."""
    return [json.loads(out_file(s).read_text())["cells"][0] for s in steps if out_file(s).exists()]


def _merged(steps: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Speed and memory of every tool over *steps* (the first step that has a tool gives it)."""
    speed: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    for cell in _cells(steps):
        for tool, r in cell["speed"].items():
            speed.setdefault(tool, r)
        for tool, m in cell["memory"].items():
            memory.setdefault(tool, m)
    return speed, memory


BIG_STEPS = ["200k-columns", *(f"200k-{name}" for name, _ in TABLES), "200k-trec", "200k-dicts", "200k-ranx"]


def _per_row(rows: dict[str, int]) -> str:
    """CPU nanoseconds per row of every tool at each size, and their growth."""
    sizes = {"10k": ["10k"], "50k": ["50k-shuffled"], "200k": BIG_STEPS}
    cpu = {size: {t: r["cpu_median_s"] for t, r in _merged(steps)[0].items()} for size, steps in sizes.items()}
    out = ["| tool | 10k: ns/row (CPU) | 50k | 200k | 50k / 10k | 200k / 50k | 200k / 10k |",
           "|---|--:|--:|--:|--:|--:|--:|"]
    for tool in FORMS:
        ns = {size: cpu[size][tool] * 1e9 / rows[size] for size in sizes if tool in cpu[size]}
        if not ns:
            continue
        grown = [f"{ns[b] / ns[a]:.2f}" if a in ns and b in ns else "–"
                 for a, b in (("10k", "50k"), ("50k", "200k"), ("10k", "200k"))]
        cells = [f"{ns[size]:,.0f}" if size in ns else "–" for size in sizes]
        out.append(f"| {FORMS[tool].label} | {' | '.join(cells + grown)} |")
    return "\n".join(out)


def _spread() -> str:
    """Spread rows against contiguous ones (the same data, 50,000 queries), CPU seconds."""
    contiguous, _ = _merged(["50k-shuffled"])
    spread, _ = _merged(["50k-spread"])
    out = ["| tool | contiguous (shuffled) CPU s | spread CPU s | spread / contiguous | spread: × reference "
           "(wall; CPU) |", "|---|--:|--:|--:|--:|"]
    for tool in FORMS:
        if tool in contiguous and tool in spread:
            a, b = contiguous[tool]["cpu_median_s"], spread[tool]["cpu_median_s"]
            out.append(f"| {FORMS[tool].label} | {a:.2f} | {b:.2f} | {b / a:.2f} | {_ratio(spread[tool])} |")
    return "\n".join(out)


def _ratio(r: dict[str, Any] | None) -> str:
    return f"{r['vs_reference']:.2f}×; {r['cpu_vs_reference']:.2f}×" if r and "vs_reference" in r else "–"


def _peak(memory: dict[str, Any], tool: str) -> str:
    mine, ref = memory.get(tool, {}).get("peak_mb"), memory.get(FORMS[tool].reference, {}).get("peak_mb")
    return f"{mine:,.0f} vs {ref:,.0f}" if mine is not None and ref is not None else "–"


def _diff(speed: dict[str, Any], tool: str) -> str:
    value = speed.get(tool, {}).get("max_abs_diff_per_query")
    return "–" if value is None else f"{value:.2g}"


def _targets() -> str:
    """Each of our forms against its targets: speed-up (50k, 200k), peak memory, exactness."""
    out = ["| form | target | 50k: × reference (wall; CPU) | 200k: × reference (wall; CPU) | × ranx prebuilt "
           "Run, 50k (wall) | peak MB, ours vs reference's, 50k | 200k | max per-query diff vs pytrec_eval "
           "(50k; 200k) |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    small, small_mem = _merged(["50k-shuffled"])
    big, big_mem = _merged(BIG_STEPS)
    for tool in OURS:
        ranx = small.get(tool, {}).get("vs_ranx_prebuilt")
        out.append(f"| {FORMS[tool].label.removeprefix('ragaudit, ')} | ≥ {FORMS[tool].target:g}× | "
                   f"{_ratio(small.get(tool))} | {_ratio(big.get(tool))} | "
                   f"{'–' if ranx is None else f'{ranx:.2f}×'} | {_peak(small_mem, tool)} | "
                   f"{_peak(big_mem, tool)} | {_diff(small, tool)}; {_diff(big, tool)} |")
    return "\n".join(out)


def _pure() -> str:
    """The C speedups against the pure path: each form and its pure twin, in the same rounds."""
    speed, memory = _merged(["50k-pure"])
    out = ["| form | with the C speedups: CPU s | × pytrec_eval (wall; CPU) | peak MB | pure Python: CPU s | "
           "× pytrec_eval (wall; CPU) | peak MB | pure / built (CPU) | max per-query diff vs pytrec_eval "
           "(built; pure) |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for tool in OURS:
        twin = f"{tool}_pure"
        if tool not in speed or twin not in speed:
            continue
        built, pure = speed[tool], speed[twin]
        peaks = [memory.get(t, {}).get("peak_mb") for t in (tool, twin)]
        mb = [f"{p:,.0f}" if p is not None else "–" for p in peaks]
        out.append(f"| {FORMS[tool].label.removeprefix('ragaudit, ')} | {built['cpu_median_s']:.3f} | "
                   f"{_ratio(built)} | {mb[0]} | {pure['cpu_median_s']:.3f} | {_ratio(pure)} | {mb[1]} | "
                   f"{pure['cpu_median_s'] / built['cpu_median_s']:.2f} | {_diff(speed, tool)}; {_diff(speed, twin)} |")
    return "\n".join(out)


def summary() -> str:
    rows = {"10k": 1_000_000, "50k": 5_000_000, "200k": 20_000_000}
    return "\n\n".join([_targets(), _per_row(rows), _spread(), _pure()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--only", default=None, help="comma-separated steps: " + ", ".join(STEPS))
    parser.add_argument("--plot", action="store_true", help="draw the ratios from the result files")
    parser.add_argument("--summary", action="store_true", help="print the comparison tables of the result files")
    args = parser.parse_args(argv)
    steps = list(STEPS) if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps: {unknown}")
    if args.summary:
        print(summary())
        return 0
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
