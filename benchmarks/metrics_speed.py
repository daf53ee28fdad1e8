"""Retrieval-metric speed: ragaudit against pytrec_eval (and ranx when installed), same data, same run.

    python benchmarks/metrics_speed.py            # 100,000 queries x 100 docs (~2-4 min on 2 cores)
    python benchmarks/metrics_speed.py --quick    # 2,000 queries: a smoke run of a few seconds

Data: Q queries x D retrieved docs ("d<int>" ids from a 1M-doc corpus, random scores, rows in rank
order as a retriever writes them, or in random order with ``--shuffle``), ~5 judged relevant docs
per query with graded labels 1-3, about 60 % of them retrieved. Measures: ndcg@10, recall@10,
mrr@10, map@100 (pytrec_eval: ndcg_cut_10, recall_10, recip_rank cut at rank 10 afterwards --
trec_eval's recip_rank has no cut-off --, map_cut_100). Every tool returns the four means.

Method. Each tool runs in a process of its own (so peak memory is its own and no tool warms
another's caches): the process loads the data, builds the tool's natural input outside the clock
(nested dicts; numpy columns; a pandas DataFrame; a pyarrow Table), then times the whole
evaluation from that input -- qrels and run conversion included -- once (``first_s``: includes any
JIT compilation, e.g. ranx's numba kernels) and then ``--repeat`` more times (``best_s`` is the
fastest). For ranx the conversion to its Qrels/Run objects and the kernels are also timed apart.
Peak memory: Linux's per-process high-water mark, reset just before the timed calls
(``/proc/self/clear_refs``), minus the resident size at that moment (``peak_added_mb``); the whole
process peak, input data included, is ``peak_rss_mb``. Import time is the best of three fresh
interpreters, the bytecode cache written. Every tool's means are checked against pytrec_eval's
(``max_abs_diff``).
"""

from __future__ import annotations

import argparse
import json
import os
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
TOOLS = {
    "ragaudit-columnar": "ragaudit, numpy columns (evaluate_columns)",
    "ragaudit-dict": "ragaudit, nested dicts (evaluate)",
    "ragaudit-pandas": "ragaudit, pandas DataFrame (evaluate)",
    "ragaudit-arrow": "ragaudit, pyarrow Table (evaluate)",
    "pytrec_eval": "pytrec_eval, nested dicts",
    "ranx": "ranx, nested dicts -> Qrels/Run -> evaluate",
}
OPTIONAL_MODULE = {
    "ragaudit-pandas": "pandas",
    "ragaudit-arrow": "pyarrow",
    "pytrec_eval": "pytrec_eval",
    "ranx": "ranx",
}
IMPORTS = {"ragaudit.metrics": "ragaudit.metrics", "pytrec_eval": "pytrec_eval", "ranx": "ranx"}
CORPUS = 1_000_003  # prime: (a + j*b) mod CORPUS gives distinct docs for j < CORPUS


# ---------------------------------------------------------------------------------------------
# Data


def make_data(path: Path, queries: int, depth: int, relevant: int, seed: int, shuffle: bool = False) -> None:
    """Write the run and qrels as numpy arrays to *path* (.npz); *shuffle*: rows in random order."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, CORPUS, queries)
    step = rng.integers(1, CORPUS, queries)
    docs = (start[:, None] + np.arange(depth)[None, :] * step[:, None]) % CORPUS
    scores = -np.sort(-rng.random((queries, depth)), axis=1)  # rank order, best first
    qid_names = np.char.add("q", np.arange(queries).astype("U7"))
    retrieved = rng.random((queries, relevant)) < 0.6
    at_rank = rng.integers(0, depth, (queries, relevant))
    outside = rng.integers(0, CORPUS, (queries, relevant))
    rel_docs = np.where(retrieved, np.take_along_axis(docs, at_rank, axis=1), outside)
    rows = rng.permutation(queries * depth) if shuffle else np.arange(queries * depth)
    np.savez(
        path,
        qids=np.repeat(qid_names, depth)[rows],
        docids=np.char.add("d", docs.ravel().astype("U7"))[rows],
        scores=scores.ravel()[rows],
        qrels_qids=np.repeat(qid_names, relevant),
        qrels_docids=np.char.add("d", rel_docs.ravel().astype("U7")),
        qrels_labels=rng.integers(1, 4, queries * relevant),
    )


def load_data(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def nested(qids: np.ndarray, docids: np.ndarray, values: np.ndarray) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in zip(qids.tolist(), docids.tolist(), values.tolist()):
        out.setdefault(q, {})[d] = v
    return out


# ---------------------------------------------------------------------------------------------
# Workers: one tool per process


def _peak_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _maxrss_kb() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def _pytrec_means(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_10", "recip_rank", "map_cut_100"})
    per_query = evaluator.evaluate(run)
    n = len(per_query)
    totals = dict.fromkeys(MEASURES, 0.0)
    for values in per_query.values():
        totals["ndcg@10"] += values["ndcg_cut_10"]
        totals["recall@10"] += values["recall_10"]
        rr = values["recip_rank"]
        totals["mrr@10"] += rr if rr >= 0.1 - 1e-12 else 0.0
        totals["map@100"] += values["map_cut_100"]
    return {name: total / n for name, total in totals.items()}


def _worker(tool: str, data_path: Path, repeat: int) -> dict[str, Any]:
    data = load_data(data_path)
    qrels = nested(data["qrels_qids"], data["qrels_docids"], data["qrels_labels"])
    extra: dict[str, Any] = {}
    call: Callable[[], dict[str, float]]
    if tool.startswith("ragaudit"):
        from ragaudit import metrics

        if tool == "ragaudit-columnar":
            qids, docids, scores = data["qids"], data["docids"], data["scores"]

            def call() -> dict[str, float]:
                return metrics.evaluate_columns(qids, docids, scores, qrels, MEASURES)  # type: ignore[return-value]

        elif tool == "ragaudit-dict":
            run = nested(data["qids"], data["docids"], data["scores"])

            def call() -> dict[str, float]:
                return metrics.evaluate(run, qrels, MEASURES)  # type: ignore[return-value]

        else:
            if tool == "ragaudit-pandas":
                import pandas as pd

                table: Any = pd.DataFrame({"qid": data["qids"], "docid": data["docids"], "score": data["scores"]})
                extra["column_dtypes"] = {k: str(v) for k, v in table.dtypes.items()}
            else:
                import pyarrow as pa

                table = pa.table({"qid": data["qids"], "docid": data["docids"], "score": data["scores"]})

            def call() -> dict[str, float]:
                return metrics.evaluate(table, qrels, MEASURES)  # type: ignore[return-value]

    elif tool == "pytrec_eval":
        run = nested(data["qids"], data["docids"], data["scores"])

        def call() -> dict[str, float]:
            return _pytrec_means(run, qrels)

    elif tool == "ranx":
        import ranx

        run = nested(data["qids"], data["docids"], data["scores"])

        def call() -> dict[str, float]:
            started = time.perf_counter()
            ranx_qrels, ranx_run = ranx.Qrels(qrels), ranx.Run(run)
            converted = time.perf_counter()
            means = ranx.evaluate(ranx_qrels, ranx_run, MEASURES)
            extra.setdefault("convert_s", []).append(converted - started)
            extra.setdefault("kernels_s", []).append(time.perf_counter() - converted)
            return {name: float(value) for name, value in means.items()}  # type: ignore[union-attr]

    else:
        raise SystemExit(f"unknown tool {tool!r}")
    del data
    import gc

    gc.collect()
    rss_before_kb = _status_kb("VmRSS") or 0
    reset = _peak_reset()
    times: list[float] = []
    means: dict[str, float] = {}
    for _ in range(1 + repeat):
        started = time.perf_counter()
        means = call()
        times.append(time.perf_counter() - started)
    peak_kb = (_status_kb("VmHWM") if reset else None) or _maxrss_kb()
    return {
        "tool": tool,
        "first_s": times[0],
        "best_s": min(times[1:]) if len(times) > 1 else times[0],
        "times_s": times,
        "means": means,
        "rss_before_mb": rss_before_kb / 1024,
        "peak_rss_mb": peak_kb / 1024,
        "peak_added_mb": (peak_kb - rss_before_kb) / 1024 if reset else None,
        "peak_method": "VmHWM after clear_refs" if reset else "ru_maxrss (whole process)",
        **extra,
    }


def _import_seconds(module: str) -> float | None:
    """Best of three fresh interpreters, after one that writes the bytecode cache (as an install has)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = _child_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    best = None
    for attempt in range(4):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if attempt == 0:
            continue
        if out.returncode != 0:
            return None
        value = float(out.stdout.strip().splitlines()[-1])
        best = value if best is None else min(best, value)
    return best


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _available(module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([sys.executable, "-c", code], env=_child_env()).returncode == 0


# ---------------------------------------------------------------------------------------------
# Driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 queries, one repeat, no ranx unless --ranx")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--relevant", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=None, help="timed runs after the first (default 3; quick 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shuffle",
        action="store_true",
        help="rows in random order (columns: queries interleaved) instead of rank order",
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of: " + ", ".join(TOOLS))
    parser.add_argument("--ranx", action="store_true", help="include ranx in a --quick run")
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results/metrics_speed.json)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        result = _worker(args.worker, Path(args.data), args.repeat)
        Path(args.result).write_text(json.dumps(result))
        return 0

    queries = args.queries or (2_000 if args.quick else 100_000)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        parser.error(f"unknown tools: {unknown}")
    if args.quick and not args.ranx and "ranx" in tools:
        tools.remove("ranx")
    info = machine_info(("pytrec-eval-terrier", "ranx", "numba", "pandas", "pyarrow", "numpy"))
    print_machine(info)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"load average at start: {load}")
    order = "random order" if args.shuffle else "rank order"
    print(f"data: {queries:,} queries x {args.depth} docs ({order}), ~{args.relevant} relevant each; {MEASURES}")

    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ragaudit-metrics-bench-") as tmp:
        data_path = Path(tmp) / "data.npz"
        started = time.perf_counter()
        make_data(data_path, queries, args.depth, args.relevant, args.seed, args.shuffle)
        print(f"generated in {time.perf_counter() - started:.1f} s")
        for tool in tools:
            module = OPTIONAL_MODULE.get(tool)
            if module and not _available(module):
                skipped[tool] = f"{module} not installed"
                print(f"{tool:18s} skipped: {skipped[tool]}")
                continue
            result_path = Path(tmp) / f"{tool}.json"
            command = [
                sys.executable, __file__, "--worker", tool, "--data", str(data_path),
                "--result", str(result_path), "--repeat", str(repeat),
            ]  # fmt: skip
            done = subprocess.run(command, env=_child_env(), capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                skipped[tool] = (
                    f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
                )
                print(f"{tool:18s} {skipped[tool]}")
                continue
            result = json.loads(result_path.read_text())
            results.append(result)
            print(f"{tool:18s} first {result['first_s']:.3f} s, best {result['best_s']:.3f} s")

    imports = {name: _import_seconds(module) for name, module in IMPORTS.items() if _available(module)}
    by_tool = {r["tool"]: r for r in results}
    reference = by_tool.get("pytrec_eval")
    for result in results:
        if reference is not None:
            result["vs_pytrec_eval"] = reference["best_s"] / result["best_s"]
            result["max_abs_diff"] = max(abs(result["means"][m] - reference["means"][m]) for m in MEASURES)
    _print_table(results, imports, repeat)
    targets = _targets(by_tool, imports)
    for name, value in targets.items():
        print(f"target {name}: {value}")
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"load average at end: {load_end}")
    write_result(
        "metrics_speed_shuffled" if args.shuffle and not args.out else "metrics_speed",
        {
            "machine": info,
            "load_average": {"start": load, "end": load_end},
            "config": {
                "queries": queries,
                "depth": args.depth,
                "relevant_per_query": args.relevant,
                "rows": queries * args.depth,
                "measures": MEASURES,
                "repeat": repeat,
                "seed": args.seed,
                "row_order": "random" if args.shuffle else "rank",
            },
            "results": results,
            "skipped": skipped,
            "import_s": imports,
            "targets": targets,
        },
        quick=args.quick,
        out=args.out,
    )
    return 0


def _print_table(results: list[dict[str, Any]], imports: dict[str, float | None], repeat: int) -> None:
    best = f"best of {repeat}"
    header = f"{'tool':<46} {'first':>8} {best:>10} {'vs pytrec':>10} {'peak +MB':>9} {'peak MB':>8}  max|diff|"
    print()
    print(header)
    print("-" * len(header))
    for r in results:
        ratio = r.get("vs_pytrec_eval")
        ratio_text = "" if ratio is None else (f"{ratio:.2f}x" if ratio >= 1 else f"1/{1 / ratio:.2f}x")
        added = "" if r.get("peak_added_mb") is None else f"{r['peak_added_mb']:.0f}"
        diff = "" if r.get("max_abs_diff") is None else f"{r['max_abs_diff']:.1e}"
        print(
            f"{TOOLS[r['tool']]:<46} {r['first_s']:>7.3f}s {r['best_s']:>9.3f}s {ratio_text:>10} "
            f"{added:>9} {r['peak_rss_mb']:>8.0f}  {diff}"
        )
        if "convert_s" in r:
            kernels = r["kernels_s"]
            print(f"{'  of which ranx Qrels/Run conversion (best)':<46} {min(r['convert_s']):>19.3f}s")
            label = "  of which ranx kernels (first / best)"
            print(f"{label:<46} {kernels[0]:>7.3f}s {min(kernels[1:] or kernels):>9.3f}s")
    print()
    for name, seconds in imports.items():
        print(f"import {name}: {'n/a' if seconds is None else f'{seconds:.3f} s'}")


def _targets(by_tool: dict[str, dict[str, Any]], imports: dict[str, float | None]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    columnar, as_dict = by_tool.get("ragaudit-columnar"), by_tool.get("ragaudit-dict")
    if columnar and "vs_pytrec_eval" in columnar:
        targets["columnar_at_least_5x_pytrec_eval"] = columnar["vs_pytrec_eval"] >= 5
    if as_dict and "vs_pytrec_eval" in as_dict:
        targets["dict_faster_than_pytrec_eval"] = as_dict["vs_pytrec_eval"] > 1
    ours = [r for name, r in by_tool.items() if name.startswith("ragaudit")]
    if columnar:
        targets["columnar_process_peak_under_2gb"] = columnar["peak_rss_mb"] < 2048
    if ours:
        added = [r["peak_added_mb"] for r in ours if r.get("peak_added_mb") is not None]
        if added:
            targets["evaluation_memory_under_2gb"] = max(added) < 2048
        targets["agrees_with_pytrec_eval_1e-9"] = all((r.get("max_abs_diff") or 0.0) <= 1e-9 for r in ours)
    import_s = imports.get("ragaudit.metrics")
    if import_s is not None:
        targets["import_under_0.5s"] = import_s < 0.5
    return targets


if __name__ == "__main__":
    raise SystemExit(main())
