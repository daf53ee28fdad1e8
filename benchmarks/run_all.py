"""Run every benchmark, one after the other (so none disturbs another's timings).

    python benchmarks/run_all.py            # full runs (what BENCHMARKS.md quotes); make bench
    python benchmarks/run_all.py --quick    # smoke runs
    python benchmarks/run_all.py --only overhead judge_throughput
    python benchmarks/run_all.py --tables   # Markdown tables from benchmarks/results/*.json

Each benchmark prints its machine description and figures and writes its JSON result under
``benchmarks/results/``; ``--quick`` is passed through to each. Benchmarks not present in this
checkout are skipped. The exit status is non-zero when any benchmark failed to run (a missed
target is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("overhead", "judge_throughput", "judge_costs", "metrics_speed")


def _fmt(value: Any, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def overhead_tables(doc: dict[str, Any]) -> str:
    """Markdown: one table per framework from an overhead result file."""
    out = []
    for framework, result in doc["results"].items():
        out.append(f"**{framework}** ({result['n_per_config']} calls per configuration, {result['rounds']} rounds "
                   f"of {result['block']})\n")
        out.append("| configuration | median µs | p90 µs | overhead (median) µs [95 % CI] | overhead p90 µs "
                   "| host-thread CPU overhead µs | CPU µs/call (all threads) | × ragaudit |")
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|")
        for entry in result["configs"].values():
            ovh = entry.get("overhead_median")
            cells = [entry["label"], _fmt(entry["median_us"]), _fmt(entry["p90_us"])]
            if ovh is None:
                cells += ["–", "–", "–"]
            else:
                cells += [f"{_fmt(ovh['us'])} [{_fmt(ovh['ci95_low'])}, {_fmt(ovh['ci95_high'])}]",
                          _fmt(entry["overhead_p90"]["us"]),
                          _fmt(entry.get("overhead_host_cpu_median", {}).get("us"))]
            ratio = entry.get("ratio_to_ragaudit")
            cells += [_fmt(entry["cpu_us"]), "–" if ratio is None else f"{ratio:.1f}"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def throughput_tables(doc: dict[str, Any]) -> str:
    """Markdown: the throughput run and the cost per judged answer from a judge_throughput result file."""
    run, config = doc["results"]["throughput"], doc["config"]
    rss = run["rss_mb"]
    lines = [
        "| turns | concurrency | server latency | judgements/s | ideal/s | % of ideal | p50 / p99 judge latency s "
        "| peak RSS MB | RSS at 25/50/75/100 % MB | tracemalloc peak MB |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        f"| {config['turns']:,} | {config['concurrency']} | {config['latency_s'] * 1000:.0f} ms "
        f"| {_fmt(run['judgements_per_s'], 1)} | {_fmt(run['ideal_per_s'])} | {100 * run['ratio_to_ideal']:.1f} % "
        f"| {run['latency_s']['p50']:.3f} / {run['latency_s']['p99']:.3f} | {_fmt(rss['peak'], 1)} "
        f"| {' / '.join(_fmt(v, 1) for v in rss['at'].values())} "
        f"| {_fmt(doc['results'].get('tracemalloc_run', {}).get('tracemalloc_peak_mb'), 1)} |",
        "",
        "| judge (faithfulness + answer relevance + context relevance) | calls / answer | prompt tokens / answer "
        "| completion tokens / answer | × ragaudit calls | × ragaudit tokens |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    judges = doc["results"]["cost"]["judges"]
    ours = judges["ragaudit"]
    our_tokens = ours["prompt_tokens_per_answer"] + ours["completion_tokens_per_answer"]
    for name, entry in judges.items():
        label = f"{name} {entry.get('version', '')}".strip()
        if entry.get("ran"):
            tokens = entry["prompt_tokens_per_answer"] + entry["completion_tokens_per_answer"]
            lines.append(f"| {label} | {entry['calls_per_answer']:.1f} | {_fmt(entry['prompt_tokens_per_answer'])} "
                         f"| {_fmt(entry['completion_tokens_per_answer'])} "
                         f"| {entry['calls_per_answer'] / ours['calls_per_answer']:.1f} | {tokens / our_tokens:.1f} |")
        else:
            lines.append(f"| {label} (not run: {entry['why']}) | published: {entry['calls']} | | | | |")
    return "\n".join(lines)


def tables() -> int:
    results = HERE / "results"
    for name, render in (("overhead", overhead_tables), ("judge_throughput", throughput_tables)):
        path = results / f"{name}.json"
        if not path.exists():
            print(f"<!-- {path.name}: not found -->")
            continue
        doc = json.loads(path.read_text())
        print(f"### {name}\n\n`{doc['command']}` — {doc['date']}\n")
        print(render(doc))
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke runs")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these")
    parser.add_argument("--tables", action="store_true", help="print Markdown tables of the saved results and exit")
    args = parser.parse_args(argv)
    if args.tables:
        return tables()
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
