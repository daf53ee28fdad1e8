"""Smoke test of benchmarks/judge_costs.py: it runs with --quick and writes sensible figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_judge_costs_quick(tmp_path: Path) -> None:
    out = tmp_path / "judge_costs.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "judge_costs.py"), "--quick", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "machine:" in proc.stdout and "| judge |" in proc.stdout
    data = json.loads(out.read_text())
    assert data["quick"] is True and data["method"]["turns"] == 4 and data["machine"]["cores"] >= 1
    rows = data["results"]
    assert all(row["usage_matches_log"] for row in rows)

    def calls(prefix: str) -> list[float]:
        return [row["calls_per_unit"] for row in rows if row["judge"].startswith(prefix)]

    assert calls("ChatRagJudge") == [1.0, 1.0]  # three-score and full audit: one call each
    three, full = (row for row in rows if row["judge"].startswith("ChatRagJudge"))
    assert full["total_tokens_per_unit"] <= 1.5 * three["total_tokens_per_unit"]  # the default's rule
    assert calls("GEvalJudge single-call") == [1.0] and calls("GEvalJudge per-dimension") == [3.0]
    assert calls("PairwiseJudge") == [2.0] and calls("JuryJudge") == [3.0] and calls("ConsensusJudge") == [3.0]
    assert calls("GEvalJudge sampling") == [1.0, 5.0]
    sampling = [row for row in rows if row["judge"].startswith("GEvalJudge sampling")]
    # five samples come back in both cases; without n the prompt is paid five times
    assert sampling[0]["completion_tokens_per_unit"] == pytest.approx(sampling[1]["completion_tokens_per_unit"])
    assert sampling[1]["prompt_tokens_per_unit"] == pytest.approx(5 * sampling[0]["prompt_tokens_per_unit"])
    assert {a["name"]: a["calls"] for a in data["anchors"]} == {"RAGAS": 5, "DeepEval": 10, "TruLens": 7}
