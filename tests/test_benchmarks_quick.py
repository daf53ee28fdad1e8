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


@pytest.mark.slow
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
        # The default configuration: the audit log has a line per turn, every turn was judged, and
        # the judging latency and the background CPU are reported.
        default = configs["ragaudit-default"]
        assert default["checks"]["audit_lines"] == default["checks"]["auditor"]["judged"] > 0
        assert set(default["checks"]["judging_latency_ms"]) == {"p50", "p90", "p99"}
        assert {"overhead_p99", "overhead_background_cpu_us"} <= set(default)
        assert configs["ragaudit-default-lexical"]["checks"]["auditor"]["judged"] > 0
        assert set(result["verdict"]["ratios"]) >= {"ragaudit-default", "ragaudit"} or not result["verdict"].get(
            "lightest_peer")
        untraced = configs["ragaudit-notrace"]["checks"]
        assert untraced["spans_exported"] == 0 and untraced["auditor"]["judged"] > 0
        if "openinference" in configs:
            assert configs["openinference"]["checks"]["spans_exported"] > 0
        verdict = result["verdict"]
        assert {"target_ratio", "target_us", "ragaudit_overhead_us", "under_target_us"} <= set(verdict)
    langchain = doc["results"]["langchain"]["configs"]
    if "langfuse" in langchain:
        assert langchain["langfuse"]["checks"]["sink_requests"] > 0  # it exported to the loopback sink


@pytest.mark.slow
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
    sdk = doc["results"]["bare_sdk"]  # the bare openai SDK, same request bodies, in the same run
    assert sdk["failed"] == 0 and sdk["per_s"] > 0 and sdk["requests_replayed"] > 0
    assert run["ratio_to_bare_sdk"] > 0 and len(run["rounds_per_s"]) == doc["config"]["rounds"]
    judges = doc["results"]["cost"]["judges"]
    assert judges["ragaudit"]["calls_per_answer"] == 1.0
    for peer in ("ragas", "deepeval", "trulens"):
        assert judges[peer]["ran"] is False and judges[peer]["calls"] and judges[peer]["source"]
    assert set(doc["targets"]) == {"throughput_ratio_ge_0.9", "bare_sdk_ratio_ge_0.95", "one_call_per_answer",
                                   "no_failures", "rss_flat_within_10mb"}
    assert doc["targets"]["one_call_per_answer"] is True


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_profile_background_quick(tmp_path: Path) -> None:
    doc = run_quick("profile_background.py", tmp_path / "profile_background.json", "--judges", "instant", "chat")
    assert doc["benchmark"] == "profile_background" and doc["turns"] == 40
    for judge in ("instant", "chat"):
        measured, profile = doc["results"][judge]["measured"], doc["results"][judge]["profile"]
        # every turn recorded (the warm-up's 30 too) and judged; the profile saw the background threads
        assert measured["audit_lines"] == 70 and measured["stats"]["judged"] == 70
        assert measured["background_cpu_us_raw"] > 0
        assert profile["threads"] >= 2 and sum(profile["profiled_s_per_area"].values()) > 0
    assert "judge" in doc["results"]["chat"]["profile"]["profiled_s_per_area"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_overhead_score_metrics_quick(tmp_path: Path) -> None:
    # The metrics arm against the no-op one (issue 48): the difference with its intervals, and every
    # turn arrived at the loopback sink as OTLP metrics (the last, cumulative export counts them all).
    doc = run_quick("overhead.py", tmp_path / "overhead.json", "--framework", "langchain", "-n", "20",
                    "--block", "10", "--warmup", "3", "--configs", "ragaudit", "ragaudit-metrics")
    configs = doc["results"]["langchain"]["configs"]
    versus = configs["ragaudit-metrics"]["versus"]
    assert versus["reference"] == "ragaudit"
    for key in ("median", "p90", "host_cpu_median", "cpu_per_call"):
        assert {"us", "ci95_low", "ci95_high"} <= set(versus[key]), key
    checks = configs["ragaudit-metrics"]["checks"]
    assert checks["metrics_flushed"] is True and checks["metrics_sink"]["exports"] >= 1
    assert checks["metrics_sink"]["turns_counted"] == checks["auditor"]["judged"] == 23
    assert "metrics_sink" not in configs["ragaudit"]["checks"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_score_metrics_cost_quick(tmp_path: Path) -> None:
    doc = run_quick("score_metrics_cost.py", tmp_path / "score_metrics_cost.json")
    assert set(doc["results"]) == {"lean, batch 1", "lean, batch 32", "full audit, batch 1", "full audit, batch 32"}
    for row in doc["results"].values():
        assert row["no-op (global)"]["best_us"] > 0 and row["SDK MeterProvider"]["best_us"] > 0


def test_overhead_table_prints_when_the_lightest_peer_measured_no_overhead(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loaded machine a peer's measured overhead can come out <= 0 (inside the noise floor): there is
    # no ratio then, and the report must say so rather than crash formatting None.
    import importlib.util

    spec = importlib.util.spec_from_file_location("overhead_bench", REPO / "benchmarks" / "overhead.py")
    assert spec is not None and spec.loader is not None
    overhead = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, overhead)  # its dataclasses look their module up
    spec.loader.exec_module(overhead)
    verdict = {"target_ratio": 1.0, "target_us": 100.0, "ragaudit_overhead_us": 40.0, "under_target_us": True,
               "lightest_peer": "openinference", "lightest_peer_overhead_us": -3.0,
               "ratio_to_lightest_peer": None, "met_ratio": False}
    overhead.print_table("langchain", {"configs": {}, "verdict": verdict, "rounds": 2, "block": 10,
                                       "n_per_config": 20})
    out = capsys.readouterr().out
    assert "lightest peer openinference -3 us, ratio n/a (peer overhead <= 0, within noise)" in out
