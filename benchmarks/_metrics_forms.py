"""The input forms and peers of the metrics benchmark: how each tool's input is built from a cell's
arrays (outside the clock), and the timed call that evaluates it, from that input to the means.

Every ragaudit form evaluates the same run; ``per_query`` gives its per-query values for the
exactness check. Peers: pytrec_eval on the nested dicts it is handed (and on a TREC file through
its own ``parse_run``), ranx (numba; called once before the clock so its compilation and cache load
are not timed: "warm") end to end from each form it accepts -- nested dicts, a pandas DataFrame of
object columns, a TREC file -- and on a prebuilt ``Run`` (its conversion not timed), and
ir_measures on the nested dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MEASURES = ["ndcg@10", "recall@10", "mrr@10", "map@100"]
TREC_MEASURES = {"ndcg_cut_10", "recall_10", "recip_rank", "map_cut_100"}
# ragaudit compares scores as pytrec_eval does (32-bit floats) here, so its values can equal
# pytrec_eval's exactly in every cell (--tie-mode trec_eval times its default, trec_eval 10's doubles).
OURS: dict[str, Any] = {"ties": "pytrec_eval"}


@dataclass(frozen=True)
class Form:
    """One tool on one input form: its label, the input it needs (a key of :func:`build`), what it
    is compared with for speed ("pytrec_eval", or "pytrec_trec" for files), its target ratio, and
    the module it needs (skipped when missing)."""

    label: str
    needs: str
    reference: str = "pytrec_eval"
    target: float | None = None
    module: str | None = None
    ours: bool = True
    # Ours with the C speedups turned off for the call (ragaudit.metrics._fast.speedups = None): the
    # pure path of a form, timed in the same rounds as the built one. Not in the grid's steps.
    pure: bool = False


FORMS: dict[str, Form] = {
    "pytrec_eval": Form("pytrec_eval, nested dicts", "run", module="pytrec_eval", ours=False),
    "pytrec_trec": Form("pytrec_eval, TREC file (parse_run + evaluate)", "trec_path", module="pytrec_eval",
                        ours=False),
    "dicts": Form("ragaudit, nested dicts", "run", target=3),
    "rows": Form("ragaudit, list of (qid, docid, score)", "rows", target=3),
    "numpy": Form("ragaudit, numpy U columns", "columns", target=5),
    "numpy_object": Form("ragaudit, numpy object columns", "object_columns", target=5),
    "pandas_object": Form("ragaudit, pandas object DataFrame", "pandas_object", target=5, module="pandas"),
    "pandas": Form("ragaudit, pandas 3 default str DataFrame", "pandas_str", target=5, module="pandas"),
    "pandas_arrow": Form("ragaudit, pandas string[pyarrow] DataFrame", "pandas_arrow", target=5, module="pyarrow"),
    "pyarrow": Form("ragaudit, pyarrow Table", "table", target=5, module="pyarrow"),
    "polars": Form("ragaudit, Polars DataFrame", "polars", target=5, module="polars"),
    "trec_file": Form("ragaudit, TREC file (read_run + evaluate)", "trec_path", reference="pytrec_trec", target=3),
    "rows_pure": Form("ragaudit, list of (qid, docid, score), pure Python", "rows", target=3, pure=True),
    "numpy_pure": Form("ragaudit, numpy U columns, pure Python", "columns", target=5, pure=True),
    "polars_pure": Form("ragaudit, Polars DataFrame, pure Python", "polars", target=5, module="polars", pure=True),
    "numpy_object_pure": Form("ragaudit, numpy object columns, pure Python", "object_columns", target=5,
                              pure=True),
    "pandas_object_pure": Form("ragaudit, pandas object DataFrame, pure Python", "pandas_object", target=5,
                               module="pandas", pure=True),
    "ranx_dicts": Form("ranx, nested dicts (Run(dict) + evaluate)", "run", module="ranx", ours=False),
    "ranx_pandas": Form("ranx, pandas object DataFrame (Run.from_df + evaluate)", "pandas_object", module="ranx",
                        ours=False),
    "ranx_trec": Form("ranx, TREC file (Run.from_file + evaluate)", "trec_path", module="ranx", ours=False),
    "ranx_prebuilt": Form("ranx, prebuilt Run (evaluate only)", "ranx_run", module="ranx", ours=False),
    "ir_measures": Form("ir_measures, nested dicts", "run", module="ir_measures", ours=False),
}
# Which ranx measurement each ragaudit form is compared with (ranx takes these forms).
RANX_OF = {"dicts": "ranx_dicts", "pandas_object": "ranx_pandas", "trec_file": "ranx_trec"}
RANX_NAMES = {"ndcg@10": "ndcg@10", "recall@10": "recall@10", "mrr@10": "mrr@10", "map@100": "map@100"}


def nested(qids: Any, docids: Any, values: Any) -> dict[str, dict[str, Any]]:
    """``{qid: {docid: value}}`` of three arrays (or lists: their strings are then shared)."""
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in zip(*(c if isinstance(c, list) else c.tolist() for c in (qids, docids, values))):
        out.setdefault(q, {})[d] = v
    return out


def write_trec(path: Path, qids: np.ndarray, docids: np.ndarray, scores: np.ndarray) -> Path:
    """The run as a TREC file (``qid Q0 docid rank score tag``, scores as ``repr`` writes them)."""
    with open(path, "w", encoding="utf-8") as f:
        for i, (q, d, s) in enumerate(zip(qids.tolist(), docids.tolist(), scores.tolist())):
            f.write(f"{q} Q0 {d} {i % 1000 + 1} {s!r} bench\n")
    return path


def build(data: dict[str, Any], needs: set[str], tmp: Path) -> dict[str, Any]:
    """The inputs *needs* names, built from the cell's arrays as a user would build them."""
    q, d, s = data["qids"], data["docids"], data["scores"]
    out: dict[str, Any] = {"qrels": nested(data["qrels_qids"], data["qrels_docids"], data["qrels_labels"])}
    lists = None
    if needs & {"rows", "pandas_object", "pandas_str", "pandas_arrow", "polars", "object_columns"}:
        lists = (q.tolist(), d.tolist(), s.tolist())
    if "run" in needs:
        # From the lists when the rows (or another form) has them: the dicts then share their strings,
        # as when a user builds one from the other, and a 20 M-row cell fits in memory with both.
        out["run"] = nested(*lists) if lists is not None else nested(q, d, s)
    if "rows" in needs:
        assert lists is not None
        out["rows"] = list(zip(*lists))
    if "columns" in needs:
        out["columns"] = (q, d, s)
    if "object_columns" in needs:
        # What np.array(list_of_str, dtype=object) and df[col].to_numpy() on object columns give.
        assert lists is not None
        out["object_columns"] = (np.array(lists[0], dtype=object), np.array(lists[1], dtype=object), s)
    if needs & {"pandas_object", "pandas_str", "pandas_arrow"}:
        import pandas as pd

        assert lists is not None
        if "pandas_object" in needs:  # read before pandas 3, or object dtype on purpose
            out["pandas_object"] = pd.DataFrame({"qid": pd.Series(lists[0], dtype=object),
                                                 "docid": pd.Series(lists[1], dtype=object), "score": s})
        if "pandas_str" in needs:  # pandas 3's default string dtype
            out["pandas_str"] = pd.DataFrame({"qid": lists[0], "docid": lists[1], "score": s})
        if "pandas_arrow" in needs:
            out["pandas_arrow"] = pd.DataFrame({"qid": pd.Series(lists[0], dtype="string[pyarrow]"),
                                                "docid": pd.Series(lists[1], dtype="string[pyarrow]"), "score": s})
    if "table" in needs:
        import pyarrow as pa

        out["table"] = pa.table({"qid": q, "docid": d, "score": s})
    if "polars" in needs:
        import polars as pl

        assert lists is not None
        out["polars"] = pl.DataFrame({"qid": lists[0], "docid": lists[1], "score": s})
    if "trec_path" in needs:
        out["trec_path"] = write_trec(tmp / "run.trec", q, d, s)
    if "ranx_run" in needs:
        import ranx

        out["ranx_qrels"] = ranx.Qrels(out["qrels"])
        out["ranx_run"] = ranx.Run(out["run"] if "run" in out else nested(q, d, s))
    return out


def needs_of(tools: list[str]) -> set[str]:
    return {FORMS[t].needs for t in tools}


def _pytrec(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    import pytrec_eval

    out: dict[str, dict[str, float]] = {}
    for qid, values in pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run).items():
        rr = values["recip_rank"]
        out[qid] = {
            "ndcg@10": values["ndcg_cut_10"],
            "recall@10": values["recall_10"],
            # trec_eval's recip_rank has no cut-off: cut at rank 10 afterwards.
            "mrr@10": rr if rr >= 0.1 - 1e-12 else 0.0,
            "map@100": values["map_cut_100"],
        }
    return out


def _means(per_query: dict[str, dict[str, float]]) -> dict[str, float]:
    values = per_query.values()
    return {m: sum(v[m] for v in values) / len(values) for m in MEASURES}


def _ranx(qrels: Any, run: Any) -> dict[str, Any]:
    import ranx

    return ranx.evaluate(qrels, run, list(RANX_NAMES.values()), return_mean=False, save_results_in_run=False)


def _without_speedups(fn: Callable[[], Any]) -> Callable[[], Any]:
    """*fn* run with the C speedups turned off (the pure path), then turned back on."""
    from ragaudit.metrics import _fast

    def pure() -> Any:
        built, _fast.speedups = _fast.speedups, None
        try:
            return fn()
        finally:
            _fast.speedups = built

    return pure


def per_query_call(tool: str, inputs: dict[str, Any]) -> Callable[[], dict[str, dict[str, float]]]:
    """The tool's per-query values ({qid: {measure: value}}), for the exactness check."""
    call = _per_query_call(tool, inputs)
    return _without_speedups(call) if FORMS[tool].pure else call


def _per_query_call(tool: str, inputs: dict[str, Any]) -> Callable[[], dict[str, dict[str, float]]]:
    from ragaudit import metrics

    qrels = inputs["qrels"]
    if tool == "pytrec_eval":
        return lambda: _pytrec(inputs["run"], qrels)
    if tool == "pytrec_trec":
        def from_file() -> dict[str, dict[str, float]]:
            import pytrec_eval

            with open(inputs["trec_path"], encoding="utf-8") as f:
                return _pytrec(pytrec_eval.parse_run(f), qrels)

        return from_file
    if tool.startswith("ranx"):
        return lambda: _ranx_per_query(tool, inputs)
    if tool == "ir_measures":
        return lambda: _ir_measures(inputs["run"], qrels, per_query=True)
    form = inputs[FORMS[tool].needs]
    if tool == "trec_file":
        return lambda: metrics.evaluate(metrics.read_run(form), qrels, MEASURES, per_query=True, **OURS)
    if FORMS[tool].needs in ("columns", "object_columns"):
        return lambda: metrics.evaluate_columns(*form, qrels, MEASURES, per_query=True, **OURS)
    return lambda: metrics.evaluate(form, qrels, MEASURES, per_query=True, **OURS)


def timed_call(tool: str, inputs: dict[str, Any]) -> Callable[[], Any]:
    """The call the clock measures: from the tool's input to its means."""
    call = _timed_call(tool, inputs)
    return _without_speedups(call) if FORMS[tool].pure else call


def _timed_call(tool: str, inputs: dict[str, Any]) -> Callable[[], Any]:
    from ragaudit import metrics

    qrels = inputs["qrels"]
    if tool in ("pytrec_eval", "pytrec_trec", "ir_measures"):
        if tool == "ir_measures":
            return lambda: _ir_measures(inputs["run"], qrels, per_query=False)
        per_query = per_query_call(tool, inputs)
        return lambda: _means(per_query())
    if tool.startswith("ranx"):
        return lambda: _ranx_run(tool, inputs)
    form = inputs[FORMS[tool].needs]
    if tool == "trec_file":
        return lambda: metrics.evaluate(metrics.read_run(form), qrels, MEASURES, **OURS)
    if FORMS[tool].needs in ("columns", "object_columns"):
        return lambda: metrics.evaluate_columns(*form, qrels, MEASURES, **OURS)
    return lambda: metrics.evaluate(form, qrels, MEASURES, **OURS)


def _ranx_inputs(tool: str, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """ranx's qrels and run for *tool*, converted from its input form (part of its timed call)."""
    import ranx

    if tool == "ranx_prebuilt":
        return inputs["ranx_qrels"], inputs["ranx_run"]
    qrels = ranx.Qrels(inputs["qrels"])
    if tool == "ranx_dicts":
        return qrels, ranx.Run(inputs["run"])
    if tool == "ranx_pandas":
        frame = inputs["pandas_object"]
        return qrels, ranx.Run.from_df(frame, q_id_col="qid", doc_id_col="docid", score_col="score")
    return qrels, ranx.Run.from_file(str(inputs["trec_path"]), kind="trec")


def _ranx_run(tool: str, inputs: dict[str, Any]) -> dict[str, float]:
    import ranx

    qrels, run = _ranx_inputs(tool, inputs)
    means = ranx.evaluate(qrels, run, list(RANX_NAMES.values()), save_results_in_run=False)
    return {m: float(means[name]) for m, name in RANX_NAMES.items()}


def _ranx_per_query(tool: str, inputs: dict[str, Any]) -> dict[str, dict[str, float]]:
    qrels, run = _ranx_inputs(tool, inputs)
    values = _ranx(qrels, run)
    # ranx evaluates the queries of its qrels, in sorted order.
    qids = sorted(set(qrels.keys()))
    return {q: {m: float(values[name][i]) for m, name in RANX_NAMES.items()} for i, q in enumerate(qids)}


def _ir_measures(run: Any, qrels: Any, per_query: bool) -> Any:
    import ir_measures
    from ir_measures import AP, RR, R, nDCG

    wanted = {"ndcg@10": nDCG @ 10, "recall@10": R @ 10, "mrr@10": RR @ 10, "map@100": AP @ 100}
    if not per_query:
        means = ir_measures.calc_aggregate(list(wanted.values()), qrels, run)
        return {m: means[measure] for m, measure in wanted.items()}
    names = {str(measure): m for m, measure in wanted.items()}
    out: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc(list(wanted.values()), qrels, run):
        out.setdefault(metric.query_id, {})[names[str(metric.measure)]] = metric.value
    return out
