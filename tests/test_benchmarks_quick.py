"""The overhead and judge-throughput benchmarks run end to end in --quick mode and write the JSON they promise.

Timings are never asserted (they depend on the machine); the tests check that every configuration
ran and did what it claims (spans exported, turns judged, one judge call per answer) and that the
result files have their keys. Peers that are not installed are reported as skipped, not failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_quick(script: str, out: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--quick", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=280, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "machine:" in done.stdout and "python:" in done.stdout
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["quick"] is True and doc["command"].startswith("python benchmarks/")
    assert {"cores", "python", "packages"} <= set(doc["machine"])
    return doc


@pytest.mark.timeout(300)
def test_overhead_quick(tmp_path: Path) -> None:
    doc = run_quick("overhead.py", tmp_path / "overhead.json", "-n", "20", "--block", "10", "--warmup", "3")
    assert doc["benchmark"] == "overhead"
    assert set(doc["results"]) == {"langchain", "llamaindex"}
    for framework, result in doc["results"].items():
        configs = result["configs"]
        assert {"baseline", "baseline-2", "ragaudit", "ragaudit-notrace"} <= set(configs), framework
        assert set(configs) | set(result["skipped"]) >= {"baseline", "openinference"}
        for name, entry in configs.items():
            assert {"median_us", "p90_us", "cpu_us", "n", "checks"} <= set(entry), name
            assert entry["n"] == result["n_per_config"] == 20
            if name != "baseline":
                assert {"us", "ci95_low", "ci95_high"} <= set(entry["overhead_median"])
                assert "us" in entry["overhead_p90"]
        # Each traced configuration really traced: ragaudit one turn span + children per call, and
        # every turn was judged; the untraced one exported nothing but still judged every turn.
        ours = configs["ragaudit"]["checks"]
        assert ours["spans_exported"] >= 3 * 20 and ours["auditor"]["judged"] == ours["auditor"]["submitted"] > 0
        untraced = configs["ragaudit-notrace"]["checks"]
        assert untraced["spans_exported"] == 0 and untraced["auditor"]["judged"] > 0
        if "openinference" in configs:
            assert configs["openinference"]["checks"]["spans_exported"] > 0
        verdict = result["verdict"]
        assert {"target_ratio", "target_us", "ragaudit_overhead_us", "under_target_us"} <= set(verdict)
    langchain = doc["results"]["langchain"]["configs"]
    if "langfuse" in langchain:
        assert langchain["langfuse"]["checks"]["sink_requests"] > 0  # it exported to the loopback sink


@pytest.mark.timeout(300)
def test_judge_throughput_quick(tmp_path: Path) -> None:
    doc = run_quick("judge_throughput.py", tmp_path / "judge_throughput.json", "-n", "60", "--no-peers")
    assert doc["benchmark"] == "judge_throughput"
    assert {"turns", "concurrency", "latency_s"} <= set(doc["config"])
    run = doc["results"]["throughput"]
    assert {"judgements_per_s", "ideal_per_s", "ratio_to_ideal", "elapsed_s", "rss_mb", "latency_s"} <= set(run)
    assert run["stats"]["judged"] == 60 and run["stats"]["failed"] == 0 and run["stats"]["dropped"] == 0
    assert run["calls_per_answer"] == 1.0 and run["server_calls_per_answer"] == 1.0  # one call per answer
    assert run["prompt_tokens_per_answer"] > 0 and run["completion_tokens_per_answer"] > 0
    assert set(run["rss_mb"]["at"]) == {"25%", "50%", "75%", "100%"} and run["rss_mb"]["peak"] > 0
    assert doc["results"]["tracemalloc_run"]["tracemalloc_peak_mb"] > 0
    judges = doc["results"]["cost"]["judges"]
    assert judges["ragaudit"]["calls_per_answer"] == 1.0
    for peer in ("ragas", "deepeval", "trulens"):
        assert judges[peer]["ran"] is False and judges[peer]["calls"] and judges[peer]["source"]
    assert set(doc["targets"]) == {"throughput_ratio_ge_0.9", "one_call_per_answer", "no_failures",
                                   "rss_flat_within_10mb"}
    assert doc["targets"]["one_call_per_answer"] is True
