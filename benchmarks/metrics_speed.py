"""Retrieval-metric speed and memory: ragaudit's input paths against pytrec_eval, over a grid of runs.

    python benchmarks/metrics_speed.py           # 100,000 queries x 100 docs, the full grid (4 min on a quiet machine)
    python benchmarks/metrics_speed.py --quick   # 2,000 queries: a smoke run of a few seconds

The grid: ties in none / 5 % / 60 % of the queries x rows in rank order / shuffled. Each cell is
one run of Q queries x D retrieved docs with 13-character doc ids ("doc-" and 9 digits, from a
1,000,003-doc corpus) and ~5 judged docs per query (graded 1-3, about 60 % of them retrieved).
Scores are uniform in [0, 1); a tied cell rounds every score to the grid of M levels at which the
given share of queries has at least one tie (the share measured in 32-bit floats is reported:
trec_eval compares scores so). "rank": each query's rows best first, as a retriever writes them;
"shuffled": each query's rows in random order (queries stay contiguous, as in a run file).
Measures: ndcg@10, recall@10, mrr@10, map@100 (pytrec_eval: ndcg_cut_10, recall_10, recip_rank
cut at rank 10 afterwards -- trec_eval's recip_rank has no cut-off --, map_cut_100).

Speed. In ONE process per cell, every input is built once outside the clock -- nested dicts (the
same object for pytrec_eval and ragaudit), numpy columns, a pandas DataFrame, a pyarrow Table --
then ``--rounds`` rounds time each tool once, in an order rotated every round (so machine load,
on a shared machine, falls on every tool alike), after one untimed warm-up
call each. A tool's time is its whole evaluation from its input, qrels and run conversion
included. Reported: the median and min-max of each tool's times, and its speed-up against
pytrec_eval = median of the per-round ratios (pytrec_eval's time in that round / the tool's), with
their min-max.

Memory. Each (cell, tool) runs again in a process of its own that loads the cell, builds the
tool's input, resets Linux's high-water mark (``/proc/self/clear_refs``) and evaluates once:
``peak_mb`` is that process's peak resident size during the evaluation (its input included),
``added_mb`` the part above what was resident just before.

Exactness. ragaudit is called with ``ties="pytrec_eval"`` (``--tie-mode``), so that its values can
equal pytrec_eval's. Every tool's four means are compared with pytrec_eval's (``max_abs_diff``), and
ragaudit's per-query values from numpy columns with pytrec_eval's per-query values
(``max_abs_diff_per_query``).
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
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import machine_info, print_machine, write_result

MEASURES = ["ndcg@10", "recall@10", "mrr@10", "map@100"]
TREC_MEASURES = {"ndcg_cut_10", "recall_10", "recip_rank", "map_cut_100"}
TOOLS = {
    "pytrec_eval": "pytrec_eval, nested dicts",
    "dicts": "ragaudit, nested dicts (evaluate)",
    "numpy": "ragaudit, numpy columns (evaluate_columns)",
    "pandas": "ragaudit, pandas DataFrame (evaluate)",
    "pyarrow": "ragaudit, pyarrow Table (evaluate)",
}
OPTIONAL_MODULE = {"pytrec_eval": "pytrec_eval", "pandas": "pandas", "pyarrow": "pyarrow"}
COLUMN_TOOLS = ("numpy", "pandas", "pyarrow")
# ragaudit compares scores as pytrec_eval does (32-bit floats) here, so its values can equal
# pytrec_eval's exactly in every cell (--tie-mode trec_eval times its default, trec_eval 10's doubles).
OURS: dict[str, Any] = {"ties": "pytrec_eval"}
CORPUS = 1_000_003  # prime: (a + j*b) mod CORPUS gives distinct docs for j < CORPUS


# ---------------------------------------------------------------------------------------------
# Data


def levels_for(tied_share: float, depth: int) -> int | None:
    """Score levels at which *tied_share* of queries of *depth* docs have a tie (birthday bound)."""
    if tied_share <= 0:
        return None
    pairs = depth * (depth - 1) / 2
    return max(2, round(pairs / -np.log1p(-min(tied_share, 0.999))))


def make_cell(queries: int, depth: int, relevant: int, tied_share: float, order: str, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    start = rng.integers(0, CORPUS, queries)
    step = rng.integers(1, CORPUS, queries)
    docs = (start[:, None] + np.arange(depth)[None, :] * step[:, None]) % CORPUS
    scores = rng.random((queries, depth))
    levels = levels_for(tied_share, depth)
    if levels is not None:
        scores = np.floor(scores * levels) / levels
    if order == "rank":
        by_score = np.argsort(-scores, axis=1, kind="stable")
    else:
        by_score = np.argsort(rng.random((queries, depth)), axis=1)
    docs = np.take_along_axis(docs, by_score, axis=1)
    scores = np.take_along_axis(scores, by_score, axis=1)
    as32 = np.sort(scores.astype(np.float32), axis=1)
    tied_measured = float((as32[:, 1:] == as32[:, :-1]).any(axis=1).mean())
    qid_names = np.char.add("q", np.arange(queries).astype("U7"))
    retrieved = rng.random((queries, relevant)) < 0.6
    at_rank = rng.integers(0, depth, (queries, relevant))
    outside = rng.integers(0, CORPUS, (queries, relevant))
    rel_docs = np.where(retrieved, np.take_along_axis(docs, at_rank, axis=1), outside)

    def ids(numbers: np.ndarray) -> np.ndarray:
        return np.char.add("doc-", np.char.zfill(numbers.ravel().astype("U9"), 9))

    return {
        "qids": np.repeat(qid_names, depth),
        "docids": ids(docs),
        "scores": scores.ravel(),
        "qrels_qids": np.repeat(qid_names, relevant),
        "qrels_docids": ids(rel_docs),
        "qrels_labels": rng.integers(1, 4, queries * relevant),
        "levels": levels,
        "tied_share_measured": tied_measured,
    }


def nested(qids: np.ndarray, docids: np.ndarray, values: np.ndarray) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in zip(qids.tolist(), docids.tolist(), values.tolist()):
        out.setdefault(q, {})[d] = v
    return out


def build_inputs(data: dict[str, Any], tools: list[str]) -> dict[str, Any]:
    """Each tool's natural input, built from the cell's arrays."""
    inputs: dict[str, Any] = {"qrels": nested(data["qrels_qids"], data["qrels_docids"], data["qrels_labels"])}
    if "dicts" in tools or "pytrec_eval" in tools:
        inputs["run"] = nested(data["qids"], data["docids"], data["scores"])
    if "numpy" in tools:
        inputs["columns"] = (data["qids"], data["docids"], data["scores"])
    if "pandas" in tools:
        import pandas as pd

        inputs["frame"] = pd.DataFrame({"qid": data["qids"], "docid": data["docids"], "score": data["scores"]})
    if "pyarrow" in tools:
        import pyarrow as pa

        inputs["table"] = pa.table({"qid": data["qids"], "docid": data["docids"], "score": data["scores"]})
    return inputs


def pytrec_means(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    per_query = pytrec_per_query(run, qrels)
    return {name: sum(values[name] for values in per_query.values()) / len(per_query) for name in MEASURES}


def pytrec_per_query(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES)
    out: dict[str, dict[str, float]] = {}
    for qid, values in evaluator.evaluate(run).items():
        rr = values["recip_rank"]
        out[qid] = {
            "ndcg@10": values["ndcg_cut_10"],
            "recall@10": values["recall_10"],
            "mrr@10": rr if rr >= 0.1 - 1e-12 else 0.0,
            "map@100": values["map_cut_100"],
        }
    return out


def calls(inputs: dict[str, Any], tools: list[str]) -> dict[str, Callable[[], dict[str, float]]]:
    from ragaudit import metrics

    qrels = inputs["qrels"]
    out: dict[str, Callable[[], dict[str, float]]] = {}
    for tool in tools:
        if tool == "pytrec_eval":
            out[tool] = lambda: pytrec_means(inputs["run"], qrels)
        elif tool == "dicts":
            out[tool] = lambda: metrics.evaluate(inputs["run"], qrels, MEASURES, **OURS)
        elif tool == "numpy":
            out[tool] = lambda: metrics.evaluate_columns(*inputs["columns"], qrels, MEASURES, **OURS)
        elif tool == "pandas":
            out[tool] = lambda: metrics.evaluate(inputs["frame"], qrels, MEASURES, **OURS)
        elif tool == "pyarrow":
            out[tool] = lambda: metrics.evaluate(inputs["table"], qrels, MEASURES, **OURS)
    return out


# ---------------------------------------------------------------------------------------------
# Speed: one process, interleaved rounds


def time_cell(inputs: dict[str, Any], tools: list[str], rounds: int) -> tuple[dict[str, Any], float | None]:
    """Interleaved rounds; also the largest per-query difference between ragaudit's numpy path and
    pytrec_eval, from the untimed warm-up calls."""
    from ragaudit import metrics

    call = calls(inputs, tools)
    means: dict[str, dict[str, float]] = {}
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    for tool, fn in call.items():  # warm-up, untimed; also the values checked
        if tool == "pytrec_eval":
            per_query[tool] = pytrec_per_query(inputs["run"], inputs["qrels"])
        elif tool == "numpy":
            per_query[tool] = metrics.evaluate_columns(
                *inputs["columns"], inputs["qrels"], MEASURES, per_query=True, **OURS
            )
        else:
            means[tool] = fn()
            continue
        values = per_query[tool].values()
        means[tool] = {m: sum(v[m] for v in values) / len(values) for m in MEASURES}
    diff = None
    if len(per_query) == 2:
        ours, reference = per_query["numpy"], per_query["pytrec_eval"]
        same = set(ours) == set(reference)
        diff = max(abs(ours[q][m] - reference[q][m]) for q in reference for m in MEASURES) if same else float("inf")
    del per_query
    times: dict[str, list[float]] = {tool: [] for tool in tools}
    cpu: dict[str, list[float]] = {tool: [] for tool in tools}
    for r in range(rounds):
        rotated = tools[r % len(tools) :] + tools[: r % len(tools)]
        for tool in rotated:
            gc.collect()
            started, started_cpu = time.perf_counter(), time.process_time()
            call[tool]()
            times[tool].append(time.perf_counter() - started)
            cpu[tool].append(time.process_time() - started_cpu)
    out: dict[str, Any] = {}
    for tool in tools:
        entry: dict[str, Any] = {"means": means[tool]}
        for key, values in (("", times[tool]), ("cpu_", cpu[tool])):
            entry[f"{key}times_s"] = values
            entry[f"{key}median_s"] = statistics.median(values)
            entry[f"{key}min_s"] = min(values)
            entry[f"{key}max_s"] = max(values)
            reference = (times if not key else cpu).get("pytrec_eval")
            if reference is not None:
                ratios = [ref / max(mine, 1e-9) for ref, mine in zip(reference, values)]
                entry[f"{key}vs_pytrec_eval"] = statistics.median(ratios)
                entry[f"{key}vs_pytrec_eval_min"] = min(ratios)
                entry[f"{key}vs_pytrec_eval_max"] = max(ratios)
        if "pytrec_eval" in means:
            entry["max_abs_diff"] = max(abs(means[tool][m] - means["pytrec_eval"][m]) for m in MEASURES)
        out[tool] = entry
    return out, diff


# ---------------------------------------------------------------------------------------------
# Memory: one process per (cell, tool)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_worker(tool: str, data_path: Path) -> dict[str, Any]:
    with np.load(data_path) as stored:
        data: dict[str, Any] = {name: stored[name] for name in stored.files}
    inputs = build_inputs(data, [tool])
    del data, stored
    call = calls(inputs, [tool])[tool]
    gc.collect()
    before_kb = _status_kb("VmRSS") or 0
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    call()
    if reset:
        peak_kb = _status_kb("VmHWM") or 0
    else:
        import resource

        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "tool": tool,
        "rss_before_mb": before_kb / 1024,
        "peak_mb": peak_kb / 1024,
        "added_mb": (peak_kb - before_kb) / 1024,
        "method": "VmHWM after clear_refs" if reset else "ru_maxrss (whole process)",
    }


def measure_memory(data: dict[str, Any], tools: list[str], tmp: Path) -> dict[str, Any]:
    path = tmp / "cell.npz"
    np.savez(path, **{k: v for k, v in data.items() if isinstance(v, np.ndarray)})
    out: dict[str, Any] = {}
    try:
        for tool in tools:
            result = tmp / f"{tool}.json"
            done = subprocess.run(
                [sys.executable, __file__, "--memory-worker", tool, "--data", str(path), "--result", str(result),
                 "--tie-mode", OURS["ties"]],
                env=_child_env(),
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()
                out[tool] = {"error": tail[-1] if tail else f"exit {done.returncode}"}
                continue
            out[tool] = json.loads(result.read_text())
    finally:
        path.unlink(missing_ok=True)
    return out


def run_cell(
    index: int, tie: float, order: str, tools: list[str], args: argparse.Namespace, memory: bool
) -> dict[str, Any]:
    """One cell of the grid, timed (and its memory measured) in this process, which runs nothing else."""
    data = make_cell(args.queries, args.depth, args.relevant, tie, order, args.seed + index)
    inputs = build_inputs(data, tools)
    speed, diff = time_cell(inputs, tools, args.rounds)
    del inputs
    gc.collect()
    measured: dict[str, Any] = {}
    if memory:
        with tempfile.TemporaryDirectory(prefix="ragaudit-metrics-cell-") as tmp:
            measured = measure_memory(data, tools, Path(tmp))
    cell = {
        "ties": tie,
        "order": order,
        "score_levels": data["levels"],
        "tied_share_measured": data["tied_share_measured"],
        "speed": speed,
        "memory": measured,
        "max_abs_diff_per_query": diff,
    }
    cell["targets"] = cell_targets(speed, measured)
    return cell


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _available(module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([sys.executable, "-c", code], env=_child_env()).returncode == 0


def _import_seconds(module: str) -> float | None:
    """Best of three fresh interpreters, after one that writes the bytecode cache (as an install has)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    best = None
    for attempt in range(4):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_child_env())
        if done.returncode != 0:
            return None
        if attempt:
            value = float(done.stdout.strip().splitlines()[-1])
            best = value if best is None else min(best, value)
    return best


# ---------------------------------------------------------------------------------------------
# Targets and report


def cell_targets(speed: dict[str, Any], memory: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets in one cell: on wall-clock ratios, and (``cpu_``) on CPU-time ratios."""
    targets: dict[str, bool] = {}
    for key in ("", "cpu_"):
        for tool in COLUMN_TOOLS:
            if tool in speed and f"{key}vs_pytrec_eval" in speed[tool]:
                targets[f"{key}{tool}_at_least_5x"] = speed[tool][f"{key}vs_pytrec_eval"] >= 5
        if "dicts" in speed and f"{key}vs_pytrec_eval" in speed["dicts"]:
            targets[f"{key}dicts_at_least_3x"] = speed["dicts"][f"{key}vs_pytrec_eval"] >= 3
        if "numpy" in speed and "pyarrow" in speed:
            targets[f"{key}numpy_no_slower_than_pyarrow"] = (
                speed["numpy"][f"{key}median_s"] <= speed["pyarrow"][f"{key}median_s"]
            )
    reference = memory.get("pytrec_eval", {}).get("peak_mb")
    if reference is not None:
        for tool, result in memory.items():
            if tool != "pytrec_eval" and "peak_mb" in result:
                targets[f"{tool}_peak_at_most_pytrec_eval"] = result["peak_mb"] <= reference
    targets["agrees_with_pytrec_eval_1e-9"] = all(
        r.get("max_abs_diff", 0.0) <= 1e-9 for t, r in speed.items() if t != "pytrec_eval"
    )
    return targets


def print_cell(cell: dict[str, Any]) -> None:
    head = f"ties {cell['ties']:.0%} (measured {cell['tied_share_measured']:.1%}), rows {cell['order']}"
    print(f"\n{head}")
    print(
        f"  {'tool':<44} {'median s':>9} {'min-max s':>13} {'x pytrec':>9} {'ratio min-max':>14} "
        f"{'cpu x pytrec':>12} {'peak MB':>8}"
    )
    for tool, r in cell["speed"].items():
        mem = cell["memory"].get(tool, {})
        ratio = r.get("vs_pytrec_eval")
        spread = f"{r['min_s']:.2f}-{r['max_s']:.2f}"
        ratio_spread = "" if ratio is None else f"{r['vs_pytrec_eval_min']:.2f}-{r['vs_pytrec_eval_max']:.2f}"
        print(
            f"  {TOOLS[tool]:<44} {r['median_s']:>9.3f} {spread:>13} "
            f"{'' if ratio is None else f'{ratio:.2f}':>9} {ratio_spread:>14} "
            f"{r.get('cpu_vs_pytrec_eval', float('nan')):>12.2f} {mem.get('peak_mb', float('nan')):>8.0f}"
        )
    failed = [name for name, ok in cell["targets"].items() if not ok]
    print(f"  targets missed: {', '.join(failed) if failed else 'none'}")


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's tables from a result file: speed-ups per cell, then times and peak memory."""
    tools = [t for t in TOOLS if t in doc["tools"] and t != "pytrec_eval"]
    cells = doc["cells"]
    head = ["ties (measured)", "rows", "pytrec_eval s"] + [TOOLS[t].split(", ", 1)[1].split(" (")[0] for t in tools]
    out = [
        "Speed-up against pytrec_eval: wall clock, median of the per-round ratios (min-max in brackets);"
        " then CPU time, median of the per-round ratios:",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * 2 + "--:|" * (len(head) - 2),
    ]
    for c in cells:
        speed = c["speed"]
        row = [
            f"{c['ties']:.0%} ({c['tied_share_measured']:.1%})",
            c["order"],
            f"{speed['pytrec_eval']['median_s']:.2f}",
        ]
        for t in tools:
            r = speed[t]
            row.append(
                f"**{r['vs_pytrec_eval']:.2f}×** ({r['vs_pytrec_eval_min']:.1f}-{r['vs_pytrec_eval_max']:.1f}); "
                f"CPU **{r['cpu_vs_pytrec_eval']:.2f}×**"
            )
        out.append("| " + " | ".join(row) + " |")
    out += [
        "",
        "Median seconds, wall clock (min-max) and CPU:",
        "",
        "| ties | rows | " + " | ".join(TOOLS[t] for t in ["pytrec_eval", *tools]) + " |",
    ]
    out.append("|---|---|" + "--:|" * (len(tools) + 1))
    for c in cells:
        row = [f"{c['ties']:.0%}", c["order"]]
        for t in ["pytrec_eval", *tools]:
            r = c["speed"][t]
            row.append(f"{r['median_s']:.2f} ({r['min_s']:.2f}-{r['max_s']:.2f}); CPU {r['cpu_median_s']:.2f}")
        out.append("| " + " | ".join(row) + " |")
    measured = [c for c in cells if c["memory"]]
    if measured:
        out += [
            "",
            "Peak memory, MB (the process's peak during the evaluation, its input included; in brackets, "
            "the part above what was resident before):",
            "",
        ]
        out.append("| ties | rows | " + " | ".join(TOOLS[t] for t in ["pytrec_eval", *tools]) + " |")
        out.append("|---|---|" + "--:|" * (len(tools) + 1))
        for c in measured:
            row = [f"{c['ties']:.0%}", c["order"]]
            for t in ["pytrec_eval", *tools]:
                m = c["memory"].get(t, {})
                row.append(f"{m['peak_mb']:,.0f} ({m['added_mb']:,.0f})" if "peak_mb" in m else "–")
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 queries, 3 rounds, memory of one cell")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--relevant", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per cell (default 6; quick 3)")
    parser.add_argument("--ties", default="0,0.05,0.6", help="shares of queries with a tie, comma-separated")
    parser.add_argument("--orders", default="rank,shuffled", help="row orders: rank, shuffled")
    parser.add_argument(
        "--memory",
        choices=("all", "corners", "first", "none"),
        default=None,
        help="cells whose peak memory to measure (default: corners = the first and the last cell; quick: first)",
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of: " + ", ".join(TOOLS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results/metrics_speed.json)")
    parser.add_argument(
        "--markdown", default=None, metavar="RESULT", help="print BENCHMARKS.md's tables of a result file"
    )
    parser.add_argument(
        "--tie-mode", choices=["pytrec_eval", "trec_eval"], default="pytrec_eval",
        help="ragaudit's ties= (default pytrec_eval: 32-bit floats, so its values can equal pytrec_eval's)",
    )
    parser.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cell-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    OURS["ties"] = args.tie_mode

    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    if args.memory_worker:
        Path(args.result).write_text(json.dumps(memory_worker(args.memory_worker, Path(args.data))))
        return 0
    if args.cell_worker is not None:
        tools = [t for t in args.tools.split(",") if t]
        cell = run_cell(args.cell_worker, float(args.ties), args.orders, tools, args, args.memory == "all")
        Path(args.result).write_text(json.dumps(cell))
        return 0

    queries = args.queries or (2_000 if args.quick else 100_000)
    rounds = args.rounds or (3 if args.quick else 6)
    memory_cells = args.memory or ("first" if args.quick else "corners")
    ties = [float(t) for t in args.ties.split(",") if t.strip()]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    if not set(orders) <= {"rank", "shuffled"}:
        parser.error(f"unknown row orders: {orders}")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not set(tools) <= set(TOOLS):
        parser.error(f"unknown tools: {sorted(set(tools) - set(TOOLS))}")
    skipped = {t: f"{OPTIONAL_MODULE[t]} not installed" for t in tools if t in OPTIONAL_MODULE}
    skipped = {t: why for t, why in skipped.items() if not _available(OPTIONAL_MODULE[t])}
    tools = [t for t in tools if t not in skipped]

    info = machine_info(("pytrec-eval-terrier", "pandas", "pyarrow", "numpy"))
    print_machine(info)
    uptime_start = _uptime()
    print(f"uptime at start: {uptime_start}")
    print(f"data: {queries:,} queries x {args.depth} docs, ~{args.relevant} judged each; {MEASURES}; {rounds} rounds")
    started = time.perf_counter()
    cells: list[dict[str, Any]] = []
    n_cells = len(ties) * len(orders)
    with tempfile.TemporaryDirectory(prefix="ragaudit-metrics-bench-") as tmp:
        for i, (tie, order) in enumerate((t, o) for t in ties for o in orders):
            measured = memory_cells == "all" or (memory_cells == "corners" and i in (0, n_cells - 1))
            measured = measured or (memory_cells == "first" and i == 0)
            # A process of its own per cell: a cell never inherits the heap of the ones before it
            # (10 M-entry nested dicts leave the allocator fragmented; the same cell ran up to a
            # third slower as the fifth cell of one process than on its own).
            result = Path(tmp) / f"cell-{i}.json"
            command = [
                sys.executable, __file__, "--cell-worker", str(i), "--ties", repr(tie), "--orders", order,
                "--queries", str(queries), "--depth", str(args.depth), "--relevant", str(args.relevant),
                "--rounds", str(rounds), "--tools", ",".join(tools), "--seed", str(args.seed),
                "--memory", "all" if measured else "none", "--result", str(result), "--tie-mode", args.tie_mode,
            ]
            done = subprocess.run(command, env=_child_env(), capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                print(done.stdout[-2000:] + done.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"cell {i} (ties {tie}, rows {order}) failed: exit {done.returncode}")
            cell = json.loads(result.read_text())
            cells.append(cell)
            print_cell(cell)
    elapsed = time.perf_counter() - started
    imports = {name: _import_seconds(name) for name in ("ragaudit.metrics", "pytrec_eval") if _available(name)}
    uptime_end = _uptime()
    print(f"\nimport: {imports}")
    print(f"uptime at end: {uptime_end}; grid took {elapsed:.0f} s")
    missed = sorted({name for c in cells for name, ok in c["targets"].items() if not ok})
    print(f"targets missed in some cell: {', '.join(missed) if missed else 'none'}")
    write_result(
        "metrics_speed",
        {
            "machine": info,
            "uptime": {"start": uptime_start, "end": uptime_end},
            "config": {
                "queries": queries,
                "depth": args.depth,
                "relevant_per_query": args.relevant,
                "rows": queries * args.depth,
                "measures": MEASURES,
                "rounds": rounds,
                "seed": args.seed,
                "ties": ties,
                "tie_mode": args.tie_mode,
                "orders": orders,
                "doc_id_chars": 13,
            },
            "tools": {t: TOOLS[t] for t in tools},
            "cells": cells,
            "skipped": skipped,
            "import_s": imports,
            "elapsed_s": elapsed,
        },
        quick=args.quick,
        out=args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
