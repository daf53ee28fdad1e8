"""The metrics benchmark runs end to end in --quick mode and writes the result file it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_metrics_speed_quick_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "metrics_speed.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "metrics_speed.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "metrics_speed" and doc["quick"] is True
    assert {"machine", "config", "results", "skipped", "import_s", "targets", "load_average"} <= set(doc)
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["python"]
    assert doc["config"]["queries"] == 2000 and doc["config"]["measures"] == [
        "ndcg@10",
        "recall@10",
        "mrr@10",
        "map@100",
    ]
    tools = {r["tool"]: r for r in doc["results"]}
    assert {"ragaudit-columnar", "ragaudit-dict", "pytrec_eval"} <= set(tools)
    for result in tools.values():
        assert {"first_s", "best_s", "means", "peak_rss_mb", "vs_pytrec_eval", "max_abs_diff"} <= set(result)
        assert set(result["means"]) == {"ndcg@10", "recall@10", "mrr@10", "map@100"}
        assert result["max_abs_diff"] <= 1e-9  # every tool agrees with pytrec_eval on the means
    assert "ragaudit.metrics" in doc["import_s"]
    assert set(doc["targets"]) >= {"agrees_with_pytrec_eval_1e-9", "columnar_process_peak_under_2gb"}
    assert "pytrec_eval" in done.stdout and "vs pytrec" in done.stdout
