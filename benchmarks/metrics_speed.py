"""Retrieval-metric speed and memory: ragaudit on every input form users hand it, against pytrec_eval,
ranx and ir_measures, over a grid of runs.

    python benchmarks/metrics_speed.py                 # 50,000 queries x 100 docs, tie-heavy, long ids
    python benchmarks/metrics_speed.py --queries 200000 --rounds 3
    python benchmarks/metrics_speed.py --quick         # 2,000 queries: a smoke run of a few seconds

The grid: ties in none / 5 % / 60 % of the queries (``--ties``) x rows in rank order / shuffled within
each query / spread through the whole run (``--orders``). Each cell is one run of Q queries x D
retrieved docs, ~5 judged docs per query (graded 1-3, about 60 % of them retrieved). Doc ids have 13
characters ("doc-" and 9 digits, from a 1,000,003-doc corpus), or with ``--long-ids`` 32 (an
MS MARCO-like prefix) and query ids 17-18. Scores are uniform in [0, 1); a tied cell rounds every
score to the grid of M levels at which the given share of queries has at least one tie (the share
measured in 32-bit floats is reported: pytrec_eval compares scores so). "rank": each query's rows
best first, as a retriever writes them; "shuffled": each query's rows in random order (queries
contiguous, as in a run file); "spread": every row in random order (a query's rows spread through
the run). Measures: ndcg@10, recall@10, mrr@10, map@100 (pytrec_eval: ndcg_cut_10, recall_10,
recip_rank cut at rank 10 afterwards -- trec_eval's recip_rank has no cut-off --, map_cut_100).

Tools (``--tools``; :mod:`benchmarks._metrics_forms` builds each input and call): ragaudit on nested
dicts, a list of (qid, docid, score) rows, numpy ``U`` and object columns, pandas object / pandas 3
default ``str`` / ``string[pyarrow]`` DataFrames, a pyarrow Table, a Polars DataFrame and a TREC file
(``read_run`` + ``evaluate``); pytrec_eval on the nested dicts it is handed (its conversion not
counted) and on the TREC file (``parse_run`` + evaluate); ranx end to end from nested dicts, a
pandas object DataFrame and the TREC file, and on a prebuilt ``Run`` (evaluate only); ir_measures
on the nested dicts. ranx compiles with numba: every tool is called once before the clock starts,
so ranx is measured warm (its compilation and cache load excluded).

Speed. In ONE process per cell, every input is built once outside the clock, then ``--rounds``
rounds time each tool once, in an order rotated every round (so machine load, on a shared machine,
falls on every tool alike), after one untimed warm-up call each. A tool's time is its whole
evaluation from its input. Reported: the median and min-max of each tool's wall-clock and CPU
times; its speed-up against its reference (pytrec_eval on dicts; on a TREC file, pytrec_eval's
``parse_run`` + evaluate) = median of the per-round ratios; and against ranx (the prebuilt Run,
and ranx from the same form where ranx takes it).

Memory. Each (cell, tool) runs again in a process of its own that loads the cell, builds the
tool's input, resets Linux's high-water mark (``/proc/self/clear_refs``) and evaluates once:
``peak_mb`` is that process's peak resident size during the evaluation (its input included),
``added_mb`` the part above what was resident just before.

Exactness. ragaudit is called with ``ties="pytrec_eval"`` (``--tie-mode``), so that its values can
equal pytrec_eval's. Every tool's per-query values are compared with pytrec_eval's: the largest
difference (``max_abs_diff_per_query``) and the number of queries differing on any measure
(``queries_differing``); ranx breaks ties differently (and orders docs by its own rules), so its
counts are reported, not targets.
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

from benchmarks import _metrics_forms as forms
from benchmarks._bench import machine_info, print_machine, write_result

MEASURES = forms.MEASURES
OURS = forms.OURS
TOOLS = {name: form.label for name, form in forms.FORMS.items()}
OPTIONAL_MODULE = {name: form.module for name, form in forms.FORMS.items() if form.module}
# Tools of the default grid; --tools all adds ranx end to end from every form (slow to convert).
DEFAULT_TOOLS = [t for t in TOOLS if t not in ("ranx_dicts", "ranx_trec")]
QUICK_TOOLS = [t for t in TOOLS if not t.startswith(("ranx", "ir_measures"))]
CORPUS = 1_000_003  # prime: (a + j*b) mod CORPUS gives distinct docs for j < CORPUS


# ---------------------------------------------------------------------------------------------
# Data


def levels_for(tied_share: float, depth: int) -> int | None:
    """Score levels at which *tied_share* of queries of *depth* docs have a tie (birthday bound)."""
    if tied_share <= 0:
        return None
    pairs = depth * (depth - 1) / 2
    return max(2, round(pairs / -np.log1p(-min(tied_share, 0.999))))


def make_cell(
    queries: int, depth: int, relevant: int, tied_share: float, order: str, seed: int, long_ids: bool = False
) -> dict[str, Any]:
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
    qid_names = np.char.add("query-2024-q" if long_ids else "q", np.arange(queries).astype("U7"))
    retrieved = rng.random((queries, relevant)) < 0.6
    at_rank = rng.integers(0, depth, (queries, relevant))
    outside = rng.integers(0, CORPUS, (queries, relevant))
    rel_docs = np.where(retrieved, np.take_along_axis(docs, at_rank, axis=1), outside)
    prefix = "msmarco_passage_00_doc-" if long_ids else "doc-"

    def ids(numbers: np.ndarray) -> np.ndarray:
        return np.char.add(prefix, np.char.zfill(numbers.ravel().astype("U9"), 9))

    qids, docids, flat_scores = np.repeat(qid_names, depth), ids(docs), scores.ravel()
    if order == "spread":  # a query's rows anywhere in the run
        spread = rng.permutation(len(qids))
        qids, docids, flat_scores = qids[spread], docids[spread], flat_scores[spread]
    return {
        "qids": qids,
        "docids": docids,
        "scores": flat_scores,
        "qrels_qids": np.repeat(qid_names, relevant),
        "qrels_docids": ids(rel_docs),
        "qrels_labels": rng.integers(1, 4, queries * relevant),
        "levels": levels,
        "tied_share_measured": tied_measured,
    }


def nested(qids: np.ndarray, docids: np.ndarray, values: np.ndarray) -> dict[str, dict[str, Any]]:
    return forms.nested(qids, docids, values)


def build_inputs(data: dict[str, Any], tools: list[str], tmp: Path | None = None) -> dict[str, Any]:
    """Each tool's natural input, built from the cell's arrays (*tmp*: where a TREC file goes)."""
    return forms.build(data, forms.needs_of(tools), tmp or Path(tempfile.mkdtemp(prefix="ragaudit-bench-")))


def calls(inputs: dict[str, Any], tools: list[str]) -> dict[str, Callable[[], Any]]:
    return {tool: forms.timed_call(tool, inputs) for tool in tools}


# ---------------------------------------------------------------------------------------------
# Speed: one process, interleaved rounds


def _exactness(per_query: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per tool: the largest per-query difference from pytrec_eval (on dicts, else on the TREC file)
    and how many queries differ."""
    name = "pytrec_eval" if "pytrec_eval" in per_query else "pytrec_trec"
    reference = per_query.get(name)
    out: dict[str, dict[str, Any]] = {}
    if reference is None:
        return out
    for tool, values in per_query.items():
        if tool == name:
            continue
        if set(values) != set(reference):
            out[tool] = {"max_abs_diff_per_query": float("inf"), "queries_differing": None,
                         "same_queries": False}
            continue
        diffs = [max(abs(values[q][m] - reference[q][m]) for m in MEASURES) for q in reference]
        out[tool] = {"max_abs_diff_per_query": max(diffs), "queries_differing": sum(d > 1e-12 for d in diffs),
                     "same_queries": True}
    return out


def _ratios(times: dict[str, list[float]], tool: str, other: str) -> dict[str, float]:
    ratios = [ref / max(mine, 1e-9) for ref, mine in zip(times[other], times[tool])]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def time_cell(inputs: dict[str, Any], tools: list[str], rounds: int) -> dict[str, Any]:
    """Interleaved rounds, after an untimed warm-up per tool (its per-query values: exactness)."""
    per_query = {tool: forms.per_query_call(tool, inputs)() for tool in tools}
    exact = _exactness(per_query)
    means = {tool: {m: statistics.fmean(v[m] for v in values.values()) for m in MEASURES}
             for tool, values in per_query.items()}
    del per_query
    call = calls(inputs, tools)
    for fn in call.values():  # warm the timed path too (ranx's mean kernels compile apart)
        fn()
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
        entry: dict[str, Any] = {"means": means[tool], **exact.get(tool, {})}
        for key, values in (("", times[tool]), ("cpu_", cpu[tool])):
            entry[f"{key}times_s"] = values
            entry[f"{key}median_s"] = statistics.median(values)
            entry[f"{key}min_s"] = min(values)
            entry[f"{key}max_s"] = max(values)
            clock = times if not key else cpu
            reference = forms.FORMS[tool].reference
            if reference in clock and reference != tool:
                ratio = _ratios(clock, tool, reference)
                entry[f"{key}vs_reference"] = ratio["median"]
                entry[f"{key}vs_reference_min"], entry[f"{key}vs_reference_max"] = ratio["min"], ratio["max"]
            for peer in ("ranx_prebuilt", forms.RANX_OF.get(tool)):
                if forms.FORMS[tool].ours and peer in clock:
                    entry[f"{key}vs_{peer}"] = _ratios(clock, tool, peer)["median"]
        if "pytrec_eval" in means:
            entry["max_abs_diff"] = max(abs(means[tool][m] - means["pytrec_eval"][m]) for m in MEASURES)
        out[tool] = entry
    return out


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
    with tempfile.TemporaryDirectory(prefix="ragaudit-metrics-mem-") as tmp:
        inputs = build_inputs(data, [tool], Path(tmp))
        del data, stored
        call = calls(inputs, [tool])[tool]
        if tool.startswith("ranx"):
            call()  # warm: numba's compilation (or cache load) is not the evaluation's memory
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


def save_cell(data: dict[str, Any], path: Path) -> Path:
    """The cell's arrays in *path* (``.npz``), for the memory workers to load."""
    np.savez(path, **{k: v for k, v in data.items() if isinstance(v, np.ndarray)})
    return path


def measure_memory(path: Path, tools: list[str], tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tool in tools:
        result = tmp / f"{tool}.json"
        done = subprocess.run(
            [sys.executable, __file__, "--memory-worker", tool, "--data", str(path), "--result", str(result),
             "--tie-mode", OURS["ties"]],
            env=_child_env(),
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()
            out[tool] = {"error": tail[-1] if tail else f"exit {done.returncode}"}
            continue
        out[tool] = json.loads(result.read_text())
    return out


def run_cell(
    index: int, tie: float, order: str, tools: list[str], args: argparse.Namespace, memory: list[str]
) -> dict[str, Any]:
    """One cell of the grid, timed (and its memory measured) in this process, which runs nothing else."""
    data = make_cell(args.queries, args.depth, args.relevant, tie, order, args.seed + index, args.long_ids)
    with tempfile.TemporaryDirectory(prefix="ragaudit-metrics-cell-") as tmp:
        stored = save_cell(data, Path(tmp) / "cell.npz") if memory else None
        inputs = build_inputs(data, tools, Path(tmp))
        # The cell's numpy arrays go before the clock starts (4 GB at 200,000 queries): each tool's
        # input is built, and the memory workers load the saved copy.
        levels, tied_share = data["levels"], data["tied_share_measured"]
        del data
        gc.collect()
        speed = time_cell(inputs, tools, args.rounds)
        del inputs
        gc.collect()
        measured = measure_memory(stored, memory, Path(tmp)) if stored is not None else {}
    cell = {
        "ties": tie,
        "order": order,
        "score_levels": levels,
        "tied_share_measured": tied_share,
        "speed": speed,
        "memory": measured,
        "max_abs_diff_per_query": speed.get("numpy", {}).get("max_abs_diff_per_query"),
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
    for tool, result in speed.items():
        form = forms.FORMS[tool]
        if not form.ours:
            continue
        for key in ("", "cpu_"):
            if form.target is not None and f"{key}vs_reference" in result:
                targets[f"{key}{tool}_at_least_{form.target:g}x"] = result[f"{key}vs_reference"] >= form.target
            for peer in ("ranx_prebuilt", forms.RANX_OF.get(tool)):
                if f"{key}vs_{peer}" in result:
                    targets[f"{key}{tool}_faster_than_{peer}"] = result[f"{key}vs_{peer}"] > 1
        if "max_abs_diff_per_query" in result:
            targets[f"{tool}_exact"] = result["max_abs_diff_per_query"] == 0.0
        reference = memory.get(form.reference, {}).get("peak_mb")
        if reference is not None and "peak_mb" in memory.get(tool, {}):
            targets[f"{tool}_peak_at_most_{form.reference}"] = memory[tool]["peak_mb"] <= reference
    targets["agrees_with_pytrec_eval_1e-9"] = all(
        r.get("max_abs_diff", 0.0) <= 1e-9 for t, r in speed.items() if forms.FORMS[t].ours
    )
    return targets


def _fmt_ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def print_cell(cell: dict[str, Any]) -> None:
    head = f"ties {cell['ties']:.0%} (measured {cell['tied_share_measured']:.1%}), rows {cell['order']}"
    print(f"\n{head}")
    print(f"  {'tool':<52} {'median s':>9} {'cpu s':>7} {'x ref':>6} {'cpu x':>6} {'x ranx':>7} {'peak MB':>8} "
          f"{'max diff':>9} {'q diff':>7}")
    for tool, r in cell["speed"].items():
        mem = cell["memory"].get(tool, {})
        print(
            f"  {TOOLS[tool]:<52} {r['median_s']:>9.3f} {r['cpu_median_s']:>7.3f} "
            f"{_fmt_ratio(r.get('vs_reference')):>6} {_fmt_ratio(r.get('cpu_vs_reference')):>6} "
            f"{_fmt_ratio(r.get('vs_ranx_prebuilt')):>7} {mem.get('peak_mb', float('nan')):>8.0f} "
            f"{r.get('max_abs_diff_per_query', float('nan')):>9.2g} {r.get('queries_differing', '')!s:>7}"
        )
    failed = [name for name, ok in cell["targets"].items() if not ok]
    print(f"  targets missed: {', '.join(failed) if failed else 'none'}")


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's table of a result file: one block of rows per cell."""
    out = [
        "| cell | tool | wall s, median (min-max) | CPU s | × reference (wall; CPU) | × ranx prebuilt Run "
        "(wall; CPU) | × ranx, same form | peak MB (added) | max per-query diff vs pytrec_eval; queries "
        "differing |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in doc["cells"]:
        cell = f"{c['ties']:.0%} ties ({c['tied_share_measured']:.1%}), {c['order']}"
        for tool, r in c["speed"].items():
            form = forms.FORMS[tool]
            m = c["memory"].get(tool, {})
            ref = (f"**{r['vs_reference']:.2f}×**; {r['cpu_vs_reference']:.2f}× (vs {form.reference})"
                   if "vs_reference" in r else "–")
            ranx = (f"{r['vs_ranx_prebuilt']:.2f}×; {r['cpu_vs_ranx_prebuilt']:.2f}×"
                    if "vs_ranx_prebuilt" in r else "–")
            peer = forms.RANX_OF.get(tool)
            same = f"{r[f'vs_{peer}']:.2f}×" if peer and f"vs_{peer}" in r else "–"
            mem = f"{m['peak_mb']:,.0f} ({m['added_mb']:,.0f})" if "peak_mb" in m else "–"
            diff = r.get("max_abs_diff_per_query")
            exact = "–" if diff is None else f"{diff:.2g}; {r.get('queries_differing')}"
            label = f"**{form.label}**" if form.ours else form.label
            out.append(f"| {cell} | {label} | {r['median_s']:.2f} ({r['min_s']:.2f}-{r['max_s']:.2f}) | "
                       f"{r['cpu_median_s']:.2f} | {ref} | {ranx} | {same} | {mem} | {exact} |")
            cell = ""
    return "\n".join(out)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 queries, 3 rounds, no ranx or ir_measures")
    parser.add_argument("--queries", type=int, default=None, help="queries per run (default 50,000)")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--relevant", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per cell (default 3)")
    parser.add_argument("--ties", default="0.6", help="shares of queries with a tie, comma-separated (0,0.05,0.6)")
    parser.add_argument("--orders", default="shuffled,spread", help="row orders: rank, shuffled, spread")
    parser.add_argument("--short-ids", action="store_true", help="13-character doc ids, not 32 (query ids 2-6)")
    parser.add_argument(
        "--memory",
        choices=("all", "corners", "first", "none"),
        default=None,
        help="cells whose peak memory to measure (default: first)",
    )
    parser.add_argument("--memory-tools", default=None, help="tools whose peak memory to measure (default: all)")
    parser.add_argument("--tools", default=None,
                        help="comma-separated subset of (or 'all'): " + ", ".join(TOOLS) + " (default: all but "
                        "ranx end to end from dicts and TREC files, slow to convert; quick: no ranx or ir_measures)")
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
    args.long_ids = not args.short_ids

    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    if args.memory_worker:
        Path(args.result).write_text(json.dumps(memory_worker(args.memory_worker, Path(args.data))))
        return 0
    if args.cell_worker is not None:
        tools = [t for t in args.tools.split(",") if t]
        memory = [t for t in (args.memory_tools or "").split(",") if t] if args.memory == "all" else []
        cell = run_cell(args.cell_worker, float(args.ties), args.orders, tools, args, memory)
        Path(args.result).write_text(json.dumps(cell))
        return 0

    queries = args.queries or (2_000 if args.quick else 50_000)
    rounds = args.rounds
    memory_cells = args.memory or "first"
    ties = [float(t) for t in args.ties.split(",") if t.strip()]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    if not set(orders) <= {"rank", "shuffled", "spread"}:
        parser.error(f"unknown row orders: {orders}")
    chosen = args.tools or ",".join(QUICK_TOOLS if args.quick else DEFAULT_TOOLS)
    tools = list(TOOLS) if chosen == "all" else [t.strip() for t in chosen.split(",") if t.strip()]
    if not set(tools) <= set(TOOLS):
        parser.error(f"unknown tools: {sorted(set(tools) - set(TOOLS))}")
    skipped = {t: f"{OPTIONAL_MODULE[t]} not installed" for t in tools if t in OPTIONAL_MODULE}
    skipped = {t: why for t, why in skipped.items() if not _available(OPTIONAL_MODULE[t])}
    tools = [t for t in tools if t not in skipped]
    memory_tools = [t for t in (args.memory_tools.split(",") if args.memory_tools else tools) if t in tools]

    info = machine_info(("pytrec-eval-terrier", "pandas", "pyarrow", "numpy", "polars", "ranx", "numba",
                         "ir-measures"))
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
                "--memory-tools", ",".join(memory_tools), *(["--short-ids"] if args.short_ids else []),
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
                "doc_id_chars": 32 if args.long_ids else 13,
                "qid_chars": "17-18" if args.long_ids else "2-6",
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
