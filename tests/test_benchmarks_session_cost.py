"""Smoke test of benchmarks/session_cost.py: it runs with --quick, makes one session call per session,
and the figure BENCHMARKS.md quotes holds its shape (a session verdict costs less than its turns')."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_session_cost_quick(tmp_path: Path) -> None:
    out = tmp_path / "session_cost.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "session_cost.py"), "--quick", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["results"]["4"]
    assert row["turn_calls"] == 4 and row["session_calls"] == 1  # one judge call for the whole session
    assert 0 < row["ratio_tokens"] < 0.5 and 0 < row["ratio_chars"] < 0.5
