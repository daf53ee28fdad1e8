"""The metrics benchmark runs end to end in --quick mode and writes the result file it promises.

Only shape and exactness are asserted -- never a speed or a ratio, so machine load cannot fail it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MEASURES = ["ndcg@10", "recall@10", "mrr@10", "map@100"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_metrics_speed_quick_writes_its_grid(tmp_path: Path) -> None:
    out = tmp_path / "metrics_speed.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "metrics_speed.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=580,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "metrics_speed" and doc["quick"] is True
    assert {"machine", "config", "cells", "skipped", "import_s", "uptime", "tools"} <= set(doc)
    assert doc["machine"]["cores"] >= 1 and doc["uptime"]["start"]
    assert doc["config"]["queries"] == 2000 and doc["config"]["measures"] == MEASURES
    assert doc["config"]["doc_id_chars"] == 32  # long ids by default
    cells = doc["cells"]
    # The default grid: tie-heavy data, rows shuffled within each query / spread through the run.
    assert [(c["ties"], c["order"]) for c in cells] == [(0.6, "shuffled"), (0.6, "spread")]
    tools = set(doc["tools"]) | set(doc["skipped"])
    # Every input form of issue 31, and the peers (ranx and ir_measures only in full runs).
    assert {"pytrec_eval", "pytrec_trec", "dicts", "rows", "numpy", "numpy_object", "pandas_object", "pandas",
            "pandas_arrow", "pyarrow", "polars", "trec_file"} <= tools
    measured = set(doc["tools"])
    for cell in cells:
        assert abs(cell["tied_share_measured"] - cell["ties"]) < 0.05  # the data ties as promised
        assert set(cell["speed"]) == measured
        for tool, result in cell["speed"].items():
            assert len(result["times_s"]) == len(result["cpu_times_s"]) == doc["config"]["rounds"]
            assert result["min_s"] <= result["median_s"] <= result["max_s"]
            assert set(result["means"]) == set(MEASURES)
            if tool != "pytrec_eval":
                assert math.isfinite(result["vs_reference"]), tool
                # Exact in every cell: every query's every value equals pytrec_eval's.
                assert result["max_abs_diff_per_query"] == 0.0 and result["queries_differing"] == 0, tool
            assert result["max_abs_diff"] <= 1e-9, (cell["ties"], cell["order"], tool)
        assert cell["max_abs_diff_per_query"] == 0.0  # numpy columns against pytrec_eval, per query
        assert {"numpy_at_least_5x", "dicts_at_least_3x", "trec_file_at_least_3x", "numpy_exact",
                "agrees_with_pytrec_eval_1e-9"} <= set(cell["targets"])
        assert cell["targets"]["agrees_with_pytrec_eval_1e-9"] is True
    memory = cells[0]["memory"]
    assert set(memory) == measured
    for tool, result in memory.items():
        assert result["peak_mb"] > 0 and result["added_mb"] >= 0, tool
    assert "ragaudit.metrics" in doc["import_s"]
    assert "pytrec_eval" in done.stdout and "x ref" in done.stdout


@pytest.mark.timeout(300)
def test_spread_qids_times_both_sides_for_every_arrow_and_polars_form(tmp_path: Path) -> None:
    for module in ("pandas", "pyarrow", "polars"):
        pytest.importorskip(module)
    out = tmp_path / "spread_qids.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "spread_qids.py"), "--queries", "2000", "--rounds", "2",
         "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "spread_qids" and doc["quick"] is True and doc["rounds"] == 2
    assert set(doc["results"]) == {"pyarrow", "pandas 3 str", "string[pyarrow]", "Polars"}
    for form in doc["results"].values():
        assert {side: len(v) for side, v in form["rounds_cpu_s"].items()} == {"first rows": 2, "whole column": 2}


@pytest.mark.timeout(300)
def test_spread_groups_times_the_c_grouping_beside_the_path_before_it(tmp_path: Path) -> None:
    for module in ("pandas", "pyarrow", "polars"):
        pytest.importorskip(module)
    from ragaudit.metrics import _fast

    if _fast.speedups is None:
        pytest.skip("the C speedups are not built in this install")
    out = tmp_path / "spread_groups.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "spread_groups.py"), "--queries", "2000", "--rounds", "2",
         "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "spread_groups" and doc["quick"] is True and doc["rounds"] == 2
    assert set(doc["results"]) == {"rows", "numpy", "numpy_object", "pandas_object", "pandas", "pandas_arrow",
                                   "pyarrow", "polars", "dicts"}
    for form in doc["results"].values():
        assert form["same_values"] is True  # the two spread paths give the same means
        assert {side: len(v) for side, v in form["rounds_cpu_s"].items()} == {
            "spread, grouped in C": 2, "spread, before": 2, "contiguous": 2}


@pytest.mark.timeout(300)
def test_profile_metrics_prints_every_stage_for_every_column_input() -> None:
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "profile_metrics.py"), "--queries", "2000", "--rounds", "2",
         "--ties", "0.6", "--order", "shuffled"],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert sum(line.startswith("round ") for line in lines) == 2 * 3  # 2 rounds x 3 tools, interleaved
    header = lines.index(next(line for line in lines if line.startswith("tool ")))
    assert lines[header].split() == ["tool", "total", "prepare_qrels", "prepare_columns", "judged_of",
                                     "rank_judged", "rest"]
    table = [line.split() for line in lines[header + 1 : header + 4]]
    assert [row[0] for row in table] == ["numpy", "pandas", "pyarrow"]
    for row in table:
        total, *stages = map(float, row[1:6])
        # Every stage ran (was timed) and the stages are parts of the whole.
        assert all(s > 0 for s in stages) and sum(stages) <= total + 1e-3


def test_metrics_grid_plans_every_step_of_the_issue_grid() -> None:
    """The final grid's one command: every step a metrics_speed.py run of known tools, each step
    its own result file, the sizes and orders of issue 31 (shuffled and spread; 10k, 50k, 200k)."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "metrics_grid.py"), "--plan"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    sys.path.insert(0, str(REPO))
    from benchmarks import metrics_grid
    from benchmarks._metrics_forms import FORMS

    plan = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert list(plan) == list(metrics_grid.STEPS)
    outs = set()
    covered: dict[str, set[str]] = {}
    for step, line in plan.items():
        words = line.split()
        assert words[:2] == ["python", "benchmarks/metrics_speed.py"], step
        tools = words[words.index("--tools") + 1].split(",")
        assert set(tools) <= set(FORMS), step
        queries = words[words.index("--queries") + 1] if "--queries" in words else "50000"
        orders = words[words.index("--orders") + 1]
        covered.setdefault(f"{queries} {orders}", set()).update(tools)
        outs.add(words[words.index("--out") + 1])
    assert len(outs) == len(plan)  # no step overwrites another's results
    ours = {t for t, form in FORMS.items() if form.ours and not form.pure}
    for cell in ("50000 shuffled", "50000 spread", "10000 shuffled", "200000 shuffled"):
        assert ours | {"pytrec_eval", "pytrec_trec", "ranx_prebuilt"} <= covered[cell], cell
    # Every form's pure twin (the C speedups off) at 50,000 queries.
    assert {t for t, form in FORMS.items() if form.pure} <= covered["50000 shuffled"]


def test_metrics_grid_summary_has_the_speedups_table_from_the_committed_results() -> None:
    """BENCHMARKS.md's tables come from ``--summary`` over the committed result files; the last one
    sets each form the C speedups read beside its pure twin (the ``50k-pure`` step)."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "metrics_grid.py"), "--summary"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    pure_table = done.stdout.strip().split("\n\n")[-1].splitlines()
    assert pure_table[0].startswith("| form | with the C speedups")
    sys.path.insert(0, str(REPO))
    from benchmarks._metrics_forms import FORMS

    twins = [t.removesuffix("_pure") for t, form in FORMS.items() if form.pure]
    assert [row.split(" | ")[0].removeprefix("| ") for row in pure_table[2:]] == [
        FORMS[t].label.removeprefix("ragaudit, ") for t in FORMS if t in twins
    ]


@pytest.mark.timeout(300)
def test_metrics_scaling_times_each_tool_at_every_size_in_one_process(tmp_path: Path) -> None:
    pytest.importorskip("pytrec_eval")
    out = tmp_path / "metrics_scaling.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "metrics_scaling.py"), "--tools",
         "pytrec_eval,numpy,trec_file,numpy_read_once",
         "--sizes", "300,900", "--rounds", "2", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "metrics_scaling" and doc["quick"] is True and doc["sizes"] == [300, 900]
    assert set(doc["results"]) == {"pytrec_eval", "numpy", "trec_file", "numpy_read_once"}
    for sized in doc["results"].values():
        assert set(sized) == {"300", "900"}
        for q, cell in sized.items():
            assert len(cell["cpu_s"]) == 2 and cell["median_cpu_s"] > 0
            assert math.isclose(cell["ns_per_row"], cell["median_cpu_s"] / (int(q) * 100) * 1e9)
    assert "1k/300" not in done.stdout and "900/300" in done.stdout  # the sizes' ratios are labelled


def test_page_faults_times_both_allocations_at_every_size_and_pause(tmp_path: Path) -> None:
    out = tmp_path / "page_faults.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "page_faults.py"), "--sizes", "8,16", "--pauses", "0,0.1",
         "--rounds", "2", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "page_faults" and doc["quick"] is True
    cells = {(r["kind"], r["mib"], r["pause_s"]) for r in doc["results"]}
    assert len(cells) == len(doc["results"]) == 2 * 2 * 2
    for row in doc["results"]:
        assert len(row["ns_per_byte"]) == 2 and row["median_ns_per_byte"] > 0
